// Fused N-ary Tree-LSTM level loops (Tai, Socher & Manning 2015, eqs 9-14) for float32 CPU
// tensors: the whole bottom-up loop (forward) and top-down loop (backward) of one batch in one
// call, each level = one gather, one matrix product, one fused element-wise pass.
//
// Built and loaded by gnn_treelstm/engine/native.py (g++ against the installed PyTorch's
// headers; ops registered as torch.ops.gnn_treelstm.*). The Python reference of the same
// arithmetic is _NaryLevels in gnn_treelstm/engine/level.py; tests/engine/test_native.py
// compares the two.
//
// Layout (the caller, _NaryLevels, prepares it):
//   gates (N, C): rows in schedule order (level l = rows off[l]:off[l+1]), columns
//     i, o, u, f_1..f_K as the rows of U (C = (3+K) h). On entry: W x_j + b (at leaves only
//     i, o, u are read); on exit: the activated gates.
//   h, c (N+1, h): states; row N is the zero padding row of missing children.
//   tc (N, h): tanh(c_j), kept for the backward.
//   slots (N, K) int64: children rows by position (N: missing).
//   U: ((3+K)h, K h) recurrent matrix, contiguous; each call copies it once into the
//     zero-padded operand of its level products (U^T forward, U backward).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using at::Tensor;

// exp(x) for float32, Cephes' range reduction and polynomial (max error about 1 ulp on
// [-87, 88]); branch-free so that the loops below vectorize.
inline float exp_f(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(float));
  return p * scale;
}

inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

// ---------------------------------------------------------------- level-sized products
// C (m, n) = A (m, k) @ B (k, n), row-major, n a multiple of 64 (B is zero-padded), m small
// (one level). A register-blocked kernel (6 rows x 64 columns of accumulators) written with
// GCC vector types, so it compiles to AVX-512, AVX2 or SSE alike; the column tiles are split
// over the intra-op threads. At level sizes it beats oneDNN's packed products (no per-call
// dispatch, no weight packing; e.g. 7 us against 19 us for 2 x 300 @ 300 x 750 on two cores).
typedef float v16 __attribute__((vector_size(64), aligned(4)));
constexpr int64_t kTile = 64;

template <int R>
inline void tile_kernel(const float* A, int64_t sar, int64_t sap, const float* B, int64_t ldb,
                        float* C, int64_t ldc, int64_t k) {
  v16 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = v16{};
  for (int64_t p = 0; p < k; ++p) {
    const float* b = B + p * ldb;
    v16 b0, b1, b2, b3;
    std::memcpy(&b0, b, 64);
    std::memcpy(&b1, b + 16, 64);
    std::memcpy(&b2, b + 32, 64);
    std::memcpy(&b3, b + 48, 64);
    for (int r = 0; r < R; ++r) {
      const float a = A[r * sar + p * sap];
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
      acc[r][2] += a * b2;
      acc[r][3] += a * b3;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) std::memcpy(C + r * ldc + 16 * v, &acc[r][v], 64);
}

// C (m, n) = A (m, k) @ B (k, n): A[r, p] at A + r * sar + p * sap (row-major: sar = lda,
// sap = 1; a transposed view: sar = 1, sap = lda), B row-major with n % 64 == 0, C row-major.
// Tasks are (column tile, block of 6 rows) pairs, tile-major, split over the threads.
void gemm(const float* A, int64_t sar, int64_t sap, const float* B, int64_t ldb, float* C,
          int64_t ldc, int64_t m, int64_t n, int64_t k) {
  const int64_t tiles = n / kTile, blocks = (m + 5) / 6, tasks = tiles * blocks;
  const int64_t grain = std::max<int64_t>(1, tasks / std::max(1, at::get_num_threads()));
  at::parallel_for(0, tasks, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t t = task / blocks, r = (task % blocks) * 6;
      const float* Ar = A + r * sar;
      const float* Bt = B + kTile * t;
      float* Cr = C + r * ldc + kTile * t;
      switch (std::min<int64_t>(6, m - r)) {
        case 6: tile_kernel<6>(Ar, sar, sap, Bt, ldb, Cr, ldc, k); break;
        case 5: tile_kernel<5>(Ar, sar, sap, Bt, ldb, Cr, ldc, k); break;
        case 4: tile_kernel<4>(Ar, sar, sap, Bt, ldb, Cr, ldc, k); break;
        case 3: tile_kernel<3>(Ar, sar, sap, Bt, ldb, Cr, ldc, k); break;
        case 2: tile_kernel<2>(Ar, sar, sap, Bt, ldb, Cr, ldc, k); break;
        case 1: tile_kernel<1>(Ar, sar, sap, Bt, ldb, Cr, ldc, k); break;
        default: break;
      }
    }
  });
}

inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// The row-major (k, round_up(n, 64)) copy of the 2-D float32 tensor b (k, n) (any strides:
// a transposed view is copied by 32 x 32 blocks), zero columns past n.
Tensor padded_operand(const Tensor& b) {
  const int64_t k = b.size(0), n = b.size(1), np = round_up(n, kTile);
  const int64_t s0 = b.stride(0), s1 = b.stride(1);
  Tensor out = at::empty({k, np}, b.options().memory_format(at::MemoryFormat::Contiguous));
  const float* S = b.data_ptr<float>();
  float* O = out.data_ptr<float>();
  for (int64_t p = 0; p < k; ++p) std::memset(O + p * np + n, 0, (np - n) * sizeof(float));
  if (s1 == 1) {
    for (int64_t p = 0; p < k; ++p) std::memcpy(O + p * np, S + p * s0, n * sizeof(float));
    return out;
  }
  constexpr int64_t bs = 32;
  for (int64_t q0 = 0; q0 < n; q0 += bs)
    for (int64_t p0 = 0; p0 < k; p0 += bs)
      for (int64_t q = q0; q < std::min(q0 + bs, n); ++q)
        for (int64_t p = p0; p < std::min(p0 + bs, k); ++p) O[p * np + q] = S[p * s0 + q * s1];
  return out;
}

// a @ b for 2-D float32 CPU tensors, a row-major (stride(1) == 1) or a transposed view of one
// (stride(0) == 1), b any strides -> (m, n) contiguous. The weight-gradient products of the
// N-ary kernel (a = dgates^T) then need no transposed copy of a.
Tensor matmul(const Tensor& a, const Tensor& b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
              "gnn_treelstm::matmul: shapes ", a.sizes(), " @ ", b.sizes());
  TORCH_CHECK(a.device().is_cpu() && a.scalar_type() == at::kFloat && b.device().is_cpu() &&
                  b.scalar_type() == at::kFloat,
              "gnn_treelstm::matmul: float32 CPU tensors only");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  Tensor out = at::empty({m, n}, a.options().memory_format(at::MemoryFormat::Contiguous));
  if (m == 0 || n == 0) return out;
  if (k == 0) return out.zero_();
  int64_t sar = a.stride(0), sap = a.stride(1);
  Tensor a_c;
  if (sap != 1 && sar != 1) {  // neither layout: copy
    a_c = a.contiguous();
    sar = k;
    sap = 1;
  }
  const float* A = a_c.defined() ? a_c.data_ptr<float>() : a.data_ptr<float>();
  const Tensor Bp = padded_operand(b);
  const int64_t np = Bp.size(1);
  if (np == n) {
    gemm(A, sar, sap, Bp.data_ptr<float>(), np, out.data_ptr<float>(), n, m, np, k);
    return out;
  }
  Tensor full = at::empty({m, np}, out.options());
  gemm(A, sar, sap, Bp.data_ptr<float>(), np, full.data_ptr<float>(), np, m, np, k);
  out.copy_(full.narrow(1, 0, n));
  return out;
}

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

// Rows of the largest level above the leaves.
int64_t max_level_rows(at::IntArrayRef off) {
  int64_t rows = 1;
  for (size_t l = 1; l + 1 < off.size(); ++l) rows = std::max(rows, off[l + 1] - off[l]);
  return rows;
}

// Forward, bottom-up (eqs 9-14). Writes gates (activated), h, c, tc.
void nary_forward(const Tensor& gates, const Tensor& h, const Tensor& c, const Tensor& tc,
                  const Tensor& slots, at::IntArrayRef off, const Tensor& U) {
  check_inputs(gates, h, c, slots, off);
  const int64_t K = slots.size(1), hs = h.size(1), C = gates.size(1);
  TORCH_CHECK(C == (3 + K) * hs && U.size(0) == C && U.size(1) == K * hs && U.is_contiguous(),
              "nary_levels: U must be contiguous ((3+K) h, K h)");
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
    float* i = g;
    float* o = g + hs;
    float* u = g + 2 * hs;
    if (pre != nullptr) {
#pragma omp simd
      for (int64_t q = 0; q < C; ++q) g[q] += pre[q];  // U h~ + W x_j + b (eqs 9-12)
    }
#pragma omp simd
    for (int64_t q = 0; q < 2 * hs; ++q) g[q] = sigmoid_f(g[q]);  // i, o (eqs 9, 11)
    float* cj = Cs + j * hs;
#pragma omp simd
    for (int64_t q = 0; q < hs; ++q) {
      u[q] = 2.0f * sigmoid_f(2.0f * u[q]) - 1.0f;  // u = tanh (eq 12)
      cj[q] = i[q] * u[q];                          // i (.) u (eq 13)
    }
    if (pre != nullptr) {
      for (int64_t l = 0; l < K; ++l) {  // + sum_l f_l (.) c_jl (eqs 10, 13)
        float* f = g + (3 + l) * hs;
        const float* ck = Cs + S[j * K + l] * hs;
#pragma omp simd
        for (int64_t q = 0; q < hs; ++q) {
          f[q] = sigmoid_f(f[q]);
          cj[q] += f[q] * ck[q];
        }
      }
    }
    float* t = T + j * hs;
    float* hj = H + j * hs;
#pragma omp simd
    for (int64_t q = 0; q < hs; ++q) {
      t[q] = 2.0f * sigmoid_f(2.0f * cj[q]) - 1.0f;  // tanh(c_j)
      hj[q] = o[q] * t[q];                            // eq 14
    }
  };

  if (num_levels == 0) return;
  for (int64_t j = 0; j < off[1]; ++j) finish_row(nullptr, j);  // level 0: leaves
  const int64_t rows = max_level_rows(off);
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
              "nary_levels: U must be contiguous ((3+K) h, K h)");
  const Tensor Up = padded_operand(U);  // (C, KHp): U, zero columns past K h
  const int64_t KHp = Up.size(1);
  Tensor dhk = at::empty({max_level_rows(off), KHp}, dgates.options());  // d[h_j1; ...]
  float* DHK = dhk.data_ptr<float>();

  for (int64_t lvl = num_levels - 1; lvl >= 0; --lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = a + r;
      const float* g = G + j * C;
      const float *i = g, *o = g + hs, *u = g + 2 * hs;
      const float* t = T + j * hs;
      const float* dhj = DH + j * hs;
      float* dcj = DC + j * hs;
      float* dg = DG + j * C;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) {
        dcj[q] += dhj[q] * o[q] * (1.0f - t[q] * t[q]);         // dL/dc_j (eq 14 into 13)
        dg[q] = dcj[q] * u[q] * i[q] * (1.0f - i[q]);           // d pre_i (eqs 13, 9)
        dg[hs + q] = dhj[q] * t[q] * o[q] * (1.0f - o[q]);      // d pre_o (eqs 14, 11)
        dg[2 * hs + q] = dcj[q] * i[q] * (1.0f - u[q] * u[q]);  // d pre_u (eqs 13, 12)
      }
      for (int64_t l = 0; l < K; ++l) {
        float* dgf = dg + (3 + l) * hs;
        if (lvl == 0) {  // leaves have no forget gates
          std::memset(dgf, 0, hs * sizeof(float));
          continue;
        }
        const int64_t s = S[j * K + l];
        const float* f = g + (3 + l) * hs;
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
      "int[] offsets, Tensor U) -> ()",
      &nary_forward);
  m.def(
      "nary_backward(Tensor(a!) dgates, Tensor(b!) dh, Tensor(c!) dc, Tensor gates, Tensor c, "
      "Tensor tc, Tensor slots, int[] offsets, Tensor U) -> ()",
      &nary_backward);
  m.def("matmul(Tensor a, Tensor b) -> Tensor", &matmul);
}
