// Fused N-ary Tree-LSTM level loops (Tai, Socher & Manning 2015, eqs 9-14) for float32 CPU
// tensors: the whole bottom-up loop (forward) and top-down loop (backward) of one batch in one
// call, each level = one gather, one matrix product, one fused element-wise pass.
//
// Built and loaded by gnn_treelstm/kernels/native.py (g++ against the installed PyTorch's
// headers; ops registered as torch.ops.gnn_treelstm.*). The Python reference of the same
// arithmetic is _NaryLevels in gnn_treelstm/engine/level.py; tests/engine/test_native.py
// compares the two.
//
// Layout (the caller, _NaryLevels, prepares it):
//   gates (N, C): rows in schedule order (level l = rows off[l]:off[l+1]), columns
//     i, o, u, f_1..f_K as the rows of U (C = (3+K) h); without output gate (Tai's
//     relatedness models, h_j = tanh(c_j)) i, u, f_1..f_K (C = (2+K) h), told apart by C.
//     On entry: W x_j + b (at leaves only the non-forget columns are read); on exit: the
//     activated gates.
//   h, c (N+1, h): states; row N is the zero padding row of missing children.
//   tc (N, h): tanh(c_j), kept for the backward.
//   slots (N, K) int64: children rows by position (N: missing).
//   U: (C, K h) recurrent matrix, contiguous; each call copies it once into the
//     zero-padded operand of its level products (U^T forward, U backward).
#include <torch/library.h>

#include "common.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using at::Tensor;
using namespace gnn_treelstm_native;

void check_inputs(const Tensor& gates, const Tensor& h, const Tensor& c, const Tensor& slots,
                  at::IntArrayRef off) {
  TORCH_CHECK(gates.device().is_cpu() && gates.scalar_type() == at::kFloat,
              "nary_levels: float32 CPU tensors only");
  TORCH_CHECK(gates.is_contiguous() && h.is_contiguous() && c.is_contiguous() &&
                  slots.is_contiguous(),
              "nary_levels: contiguous buffers expected");
  TORCH_CHECK(slots.scalar_type() == at::kLong, "nary_levels: slots must be int64");
  const int64_t n = slots.size(0);
  TORCH_CHECK(off.size() >= 1 && off.front() == 0 && off.back() == n,
              "nary_levels: offsets must run from 0 to N");
  TORCH_CHECK(h.size(0) == n + 1 && c.size(0) == n + 1, "nary_levels: h, c need N + 1 rows");
  TORCH_CHECK(gates.size(0) == n, "nary_levels: gates needs N rows");
}

// The non-forget gate columns, 3 (i, o, u) or 2 (i, u: no output gate), from C = (G + K) h.
int64_t iou_gates(int64_t C, int64_t K, int64_t hs) {
  const int64_t G = hs > 0 ? C / hs - K : 3;
  TORCH_CHECK(hs > 0 && C % hs == 0 && (G == 2 || G == 3),
              "nary_levels: gate columns must be (3+K) h or (2+K) h, got ", C);
  return G;
}

// Forward, bottom-up (eqs 9-14). Writes gates (activated), h, c, tc.
void nary_forward(const Tensor& gates, const Tensor& h, const Tensor& c, const Tensor& tc,
                  const Tensor& slots, at::IntArrayRef off, const Tensor& U) {
  check_inputs(gates, h, c, slots, off);
  const int64_t K = slots.size(1), hs = h.size(1), C = gates.size(1);
  const int64_t NG = iou_gates(C, K, hs);
  const bool gated = NG == 3;
  TORCH_CHECK(U.size(0) == C && U.size(1) == K * hs && U.is_contiguous(),
              "nary_levels: U must be contiguous ((G+K) h, K h)");
  float* G = gates.data_ptr<float>();
  float* H = h.data_ptr<float>();
  float* Cs = c.data_ptr<float>();
  float* T = tc.data_ptr<float>();
  const int64_t* S = slots.data_ptr<int64_t>();
  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;

  // One node j: the activated gates from its input terms in G plus `pre`, its recurrent
  // terms (nullptr at a leaf), then c_j, tanh(c_j), h_j.
  auto finish_row = [&](const float* pre, int64_t j) {
    float* g = G + j * C;
    if (pre != nullptr) {
#pragma omp simd
      for (int64_t q = 0; q < C; ++q) g[q] += pre[q];  // U h~ + W x_j + b (eqs 9-12)
    }
    float* cj = Cs + j * hs;
    activate_gates(g, cj, hs, gated);  // i, o, u (eqs 9, 11, 12), i (.) u (eq 13)
    if (pre != nullptr) {
      for (int64_t l = 0; l < K; ++l) {  // + sum_l f_l (.) c_jl (eqs 10, 13)
        float* f = g + (NG + l) * hs;
        const float* ck = Cs + S[j * K + l] * hs;
#pragma omp simd
        for (int64_t q = 0; q < hs; ++q) {
          f[q] = sigmoid_f(f[q]);
          cj[q] += f[q] * ck[q];
        }
      }
    }
    output_state(g, cj, T + j * hs, H + j * hs, hs, gated);  // eq 14
  };

  if (num_levels == 0) return;
  for (int64_t j = 0; j < off[1]; ++j) finish_row(nullptr, j);  // level 0: leaves
  const int64_t rows = max_level_rows(off, 1);  // levels above the leaves
  const Tensor Ut = padded_operand(U.t());  // (K h, Cp): U^T, zero columns past C
  const int64_t Cp = Ut.size(1);
  Tensor hk = at::empty({rows, K * hs}, gates.options());  // [h_j1; ...; h_jK] of a level
  Tensor pre = at::empty({rows, Cp}, gates.options());     // U [h_j1; ...; h_jK]
  float* HK = hk.data_ptr<float>();
  float* P = pre.data_ptr<float>();
  for (int64_t lvl = 1; lvl < num_levels; ++lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t l = 0; l < K; ++l)
        std::memcpy(HK + (r * K + l) * hs, H + S[(a + r) * K + l] * hs, hs * sizeof(float));
    // the recurrent terms of eqs 9-12: (m, K h) @ (K h, Cp)
    gemm(HK, K * hs, 1, Ut.data_ptr<float>(), Cp, P, Cp, m, Cp, K * hs);
    for (int64_t r = 0; r < m; ++r) finish_row(P + r * Cp, a + r);
  }
}

// Backward, top-down. dh, dc (N+1, h) hold dL/dh, dL/dc of the outputs (schedule order) and
// receive the children's contributions; dgates (N, C) receives the gradients of the
// pre-activations. U: ((3+K) h, K h), contiguous.
void nary_backward(const Tensor& dgates, const Tensor& dh, const Tensor& dc,
                   const Tensor& gates, const Tensor& c, const Tensor& tc, const Tensor& slots,
                   at::IntArrayRef off, const Tensor& U) {
  check_inputs(dgates, dh, dc, slots, off);
  const int64_t K = slots.size(1), hs = dh.size(1), C = dgates.size(1);
  const int64_t NG = iou_gates(C, K, hs);
  const bool gated = NG == 3;
  TORCH_CHECK(gates.is_contiguous() && tc.is_contiguous() && gates.size(1) == C &&
                  gates.size(0) == dgates.size(0),
              "nary_levels: gates/tc layout");
  float* DG = dgates.data_ptr<float>();
  float* DH = dh.data_ptr<float>();
  float* DC = dc.data_ptr<float>();
  const float* G = gates.data_ptr<float>();
  const float* Cs = c.data_ptr<float>();
  const float* T = tc.data_ptr<float>();
  const int64_t* S = slots.data_ptr<int64_t>();
  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  TORCH_CHECK(U.size(0) == C && U.size(1) == K * hs && U.is_contiguous(),
              "nary_levels: U must be contiguous ((G+K) h, K h)");
  const Tensor Up = padded_operand(U);  // (C, KHp): U, zero columns past K h
  const int64_t KHp = Up.size(1);
  Tensor dhk = at::empty({max_level_rows(off, 1), KHp}, dgates.options());  // d[h_j1; ...]
  float* DHK = dhk.data_ptr<float>();

  for (int64_t lvl = num_levels - 1; lvl >= 0; --lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = a + r;
      const float* g = G + j * C;
      float* dcj = DC + j * hs;
      float* dg = DG + j * C;
      gates_backward(g, T + j * hs, DH + j * hs, dcj, dg, hs, gated);  // eqs 14, 13 -> 9, 11, 12
      for (int64_t l = 0; l < K; ++l) {
        float* dgf = dg + (NG + l) * hs;
        if (lvl == 0) {  // leaves have no forget gates
          std::memset(dgf, 0, hs * sizeof(float));
          continue;
        }
        const int64_t s = S[j * K + l];
        const float* f = g + (NG + l) * hs;
        const float* ck = Cs + s * hs;
        float* dck = DC + s * hs;
#pragma omp simd
        for (int64_t q = 0; q < hs; ++q) {
          dgf[q] = dcj[q] * ck[q] * f[q] * (1.0f - f[q]);  // d pre_f_l (eqs 13, 10)
          dck[q] += dcj[q] * f[q];                         // eq 13 -> c_jl
        }
      }
    }
    if (lvl == 0) break;
    // eqs 9-12 -> [h_j1; ...; h_jK]: (m, C) @ (C, KHp)
    gemm(DG + a * C, C, 1, Up.data_ptr<float>(), KHp, DHK, KHp, m, KHp, C);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t l = 0; l < K; ++l) {
        float* d = DH + S[(a + r) * K + l] * hs;
        const float* src = DHK + r * KHp + l * hs;
#pragma omp simd
        for (int64_t q = 0; q < hs; ++q) d[q] += src[q];
      }
  }
}

}  // namespace

TORCH_LIBRARY(gnn_treelstm, m) {
  m.def(
      "nary_forward(Tensor(a!) gates, Tensor(b!) h, Tensor(c!) c, Tensor(d!) tc, Tensor slots, "
      "int[] offsets, Tensor U) -> ()");
  m.def(
      "nary_backward(Tensor(a!) dgates, Tensor(b!) dh, Tensor(c!) dc, Tensor gates, Tensor c, "
      "Tensor tc, Tensor slots, int[] offsets, Tensor U) -> ()");
  m.def("matmul(Tensor a, Tensor b) -> Tensor");
}

// CPU kernels registered apart from the schemas, so the ops get fake (meta) kernels from
// Python (native.register_fakes) and torch.compile can trace them
TORCH_LIBRARY_IMPL(gnn_treelstm, CPU, m) {
  m.impl("nary_forward", &nary_forward);
  m.impl("nary_backward", &nary_backward);
  m.impl("matmul", &matmul);
}

