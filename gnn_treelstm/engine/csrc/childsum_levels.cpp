// Fused Child-Sum Tree-LSTM level loops (Tai, Socher & Manning 2015, eqs 2-8) for float32
// CPU tensors: the whole bottom-up loop (forward) and top-down loop (backward) of one batch in
// one call. Per level: the children's sum h~ and their states gathered by edge, two level-sized
// products (U_iou h~_j per node, U_f h_k per edge), one fused element-wise pass.
//
// The Python reference of the same arithmetic is _ChildSumLevels in
// gnn_treelstm/engine/level.py; tests/engine/test_native.py compares the two.
//
// Layout (the caller, _ChildSumLevels, prepares it):
//   wx (N, 4h): W x_j + b in schedule order (level l = rows off[l]:off[l+1]), gate columns
//     i, o, u, f.
//   h, c (N+1, h): states; row N is a zero row.   gates (N, 3h): activated i, o, u.
//   h_tilde (N, h): sum of the children's h (eq 2).   tc (N, h): tanh(c_j).
//   fgate (E, h): f_jk per edge (eq 4), edges in schedule edge order: the edges into level l
//     are eoff[l]:eoff[l+1], sorted by parent row; edge_src = child row, edge_dst = parent row.
//   U_iou (3h, h), U_f (h, h): contiguous.
#include <torch/library.h>

#include "common.h"

namespace {

using at::Tensor;
using namespace gnn_treelstm_native;

void check_layout(const Tensor& rows, const Tensor& h, const Tensor& src, const Tensor& dst,
                  at::IntArrayRef off, at::IntArrayRef eoff, const Tensor& U_iou,
                  const Tensor& U_f) {
  const int64_t n = rows.size(0), hs = h.size(1), e = src.size(0);
  TORCH_CHECK(rows.device().is_cpu() && rows.scalar_type() == at::kFloat,
              "childsum_levels: float32 CPU tensors only");
  TORCH_CHECK(rows.is_contiguous() && h.is_contiguous() && src.is_contiguous() &&
                  dst.is_contiguous() && U_iou.is_contiguous() && U_f.is_contiguous(),
              "childsum_levels: contiguous tensors expected");
  TORCH_CHECK(src.scalar_type() == at::kLong && dst.scalar_type() == at::kLong &&
                  dst.size(0) == e,
              "childsum_levels: edge_src, edge_dst must be int64 of one length");
  TORCH_CHECK(h.size(0) == n + 1, "childsum_levels: h, c need N + 1 rows");
  TORCH_CHECK(off.size() >= 1 && off.size() == eoff.size() && off.front() == 0 &&
                  off.back() == n && eoff.front() == 0 && eoff.back() == e,
              "childsum_levels: node and edge offsets must cover N nodes and E edges");
  TORCH_CHECK(U_iou.size(0) == 3 * hs && U_iou.size(1) == hs && U_f.size(0) == hs &&
                  U_f.size(1) == hs,
              "childsum_levels: U_iou must be (3h, h) and U_f (h, h)");
}

// Forward, bottom-up (eqs 2-8).
void childsum_forward(const Tensor& wx, const Tensor& h, const Tensor& c, const Tensor& gates,
                      const Tensor& h_tilde, const Tensor& fgate, const Tensor& tc,
                      const Tensor& edge_src, const Tensor& edge_dst, at::IntArrayRef off,
                      at::IntArrayRef eoff, const Tensor& U_iou, const Tensor& U_f) {
  check_layout(wx, h, edge_src, edge_dst, off, eoff, U_iou, U_f);
  const int64_t hs = h.size(1), G3 = 3 * hs, W4 = 4 * hs;
  const float* WX = wx.data_ptr<float>();
  float* H = h.data_ptr<float>();
  float* Cs = c.data_ptr<float>();
  float* G = gates.data_ptr<float>();
  float* HT = h_tilde.data_ptr<float>();
  float* F = fgate.data_ptr<float>();
  float* T = tc.data_ptr<float>();
  const int64_t* src = edge_src.data_ptr<int64_t>();
  const int64_t* dst = edge_dst.data_ptr<int64_t>();
  const Tensor Uiou_t = padded_operand(U_iou.t());  // (h, 3h padded)
  const Tensor Uf_t = padded_operand(U_f.t());      // (h, h padded)
  const int64_t p3 = Uiou_t.size(1), p1 = Uf_t.size(1);
  const int64_t rows = max_level_rows(off), erows = max_level_rows(eoff);
  Tensor piou = at::empty({rows, p3}, wx.options());  // U_iou h~_j of a level
  Tensor hk = at::empty({erows, hs}, wx.options());   // h_k per edge of a level
  Tensor pf = at::empty({erows, p1}, wx.options());   // U_f h_k per edge
  float* PIOU = piou.data_ptr<float>();
  float* HK = hk.data_ptr<float>();
  float* PF = pf.data_ptr<float>();

  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  for (int64_t lvl = 0; lvl < num_levels; ++lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    const int64_t ea = eoff[lvl], ne = eoff[lvl + 1] - ea;
    std::memset(HT + a * hs, 0, m * hs * sizeof(float));
    for (int64_t q = 0; q < ne; ++q) {  // h~_j = sum_k h_k (eq 2); h_k of each edge
      const float* hk_row = H + src[ea + q] * hs;
      float* ht = HT + dst[ea + q] * hs;
      std::memcpy(HK + q * hs, hk_row, hs * sizeof(float));
#pragma omp simd
      for (int64_t p = 0; p < hs; ++p) ht[p] += hk_row[p];
    }
    if (ne > 0) {
      gemm(HT + a * hs, hs, 1, Uiou_t.data_ptr<float>(), p3, PIOU, p3, m, p3, hs);  // eqs 3,5,6
      gemm(HK, hs, 1, Uf_t.data_ptr<float>(), p1, PF, p1, ne, p1, hs);              // eq 4
    }
    for (int64_t r = 0; r < m; ++r) {  // i, o, u (eqs 3, 5, 6) and i (.) u (eq 7)
      const int64_t j = a + r;
      const float* w = WX + j * W4;
      const float* pre = PIOU + r * p3;
      float* g = G + j * G3;
      float* cj = Cs + j * hs;
      if (ne > 0) {
#pragma omp simd
        for (int64_t p = 0; p < G3; ++p) g[p] = w[p] + pre[p];
      } else {
        std::memcpy(g, w, G3 * sizeof(float));
      }
      activate_iou(g, cj, hs);
    }
    for (int64_t q = 0; q < ne; ++q) {  // f_jk (eq 4), + f_jk (.) c_k (eq 7)
      const int64_t j = dst[ea + q];
      const float* wf = WX + j * W4 + 3 * hs;
      const float* pre = PF + q * p1;
      const float* ck = Cs + src[ea + q] * hs;
      float* f = F + (ea + q) * hs;
      float* cj = Cs + j * hs;
#pragma omp simd
      for (int64_t p = 0; p < hs; ++p) {
        f[p] = sigmoid_f(wf[p] + pre[p]);
        cj[p] += f[p] * ck[p];
      }
    }
    for (int64_t j = a; j < a + m; ++j)  // h_j = o (.) tanh(c_j) (eq 8)
      output_h(G + j * G3 + hs, Cs + j * hs, T + j * hs, H + j * hs, hs);
  }
}

// Backward, top-down. dh, dc (N+1, h) hold dL/dh, dL/dc of the outputs and receive the
// children's contributions; dgates (N, 3h) and dfgate (E, h) receive the gradients of the
// pre-activations of i, o, u and of f_jk.
void childsum_backward(const Tensor& dh, const Tensor& dc, const Tensor& dgates,
                       const Tensor& dfgate, const Tensor& gates, const Tensor& c,
                       const Tensor& tc, const Tensor& fgate, const Tensor& edge_src,
                       const Tensor& edge_dst, at::IntArrayRef off, at::IntArrayRef eoff,
                       const Tensor& U_iou, const Tensor& U_f) {
  check_layout(dgates, dh, edge_src, edge_dst, off, eoff, U_iou, U_f);
  const int64_t hs = dh.size(1), G3 = 3 * hs;
  float* DH = dh.data_ptr<float>();
  float* DC = dc.data_ptr<float>();
  float* DG = dgates.data_ptr<float>();
  float* DF = dfgate.data_ptr<float>();
  const float* G = gates.data_ptr<float>();
  const float* Cs = c.data_ptr<float>();
  const float* T = tc.data_ptr<float>();
  const float* F = fgate.data_ptr<float>();
  const int64_t* src = edge_src.data_ptr<int64_t>();
  const int64_t* dst = edge_dst.data_ptr<int64_t>();
  const Tensor Uiou = padded_operand(U_iou);  // (3h, h padded)
  const Tensor Uf = padded_operand(U_f);      // (h, h padded)
  const int64_t ph = Uiou.size(1);
  Tensor dht = at::empty({max_level_rows(off), ph}, dgates.options());   // dL/dh~_j of a level
  Tensor dhk = at::empty({max_level_rows(eoff), ph}, dgates.options());  // U_f^T dpre_f per edge
  float* DHT = dht.data_ptr<float>();
  float* DHK = dhk.data_ptr<float>();

  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  for (int64_t lvl = num_levels - 1; lvl >= 0; --lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    const int64_t ea = eoff[lvl], ne = eoff[lvl + 1] - ea;
    for (int64_t j = a; j < a + m; ++j)  // eqs 8, 7 -> 3, 5, 6
      iou_backward(G + j * G3, T + j * hs, DH + j * hs, DC + j * hs, DG + j * G3, hs);
    if (ne == 0) continue;
    for (int64_t q = ea; q < ea + ne; ++q) {  // eq 7 -> c_k and f_jk (eq 4)
      const float* dcj = DC + dst[q] * hs;
      const float* f = F + q * hs;
      const float* ck = Cs + src[q] * hs;
      float* dck = DC + src[q] * hs;
      float* df = DF + q * hs;
#pragma omp simd
      for (int64_t p = 0; p < hs; ++p) {
        df[p] = dcj[p] * ck[p] * f[p] * (1.0f - f[p]);
        dck[p] += dcj[p] * f[p];
      }
    }
    // eqs 3, 5, 6 -> h~_j -> every child's h_k (eq 2); eq 4 -> h_k
    gemm(DG + a * G3, G3, 1, Uiou.data_ptr<float>(), ph, DHT, ph, m, ph, G3);
    gemm(DF + ea * hs, hs, 1, Uf.data_ptr<float>(), ph, DHK, ph, ne, ph, hs);
    for (int64_t q = 0; q < ne; ++q) {
      const float* dt = DHT + (dst[ea + q] - a) * ph;
      const float* dk = DHK + q * ph;
      float* dhk_row = DH + src[ea + q] * hs;
#pragma omp simd
      for (int64_t p = 0; p < hs; ++p) dhk_row[p] += dt[p] + dk[p];
    }
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnn_treelstm, m) {
  m.def(
      "childsum_forward(Tensor wx, Tensor(a!) h, Tensor(b!) c, Tensor(c!) gates, "
      "Tensor(d!) h_tilde, Tensor(e!) fgate, Tensor(f!) tc, Tensor edge_src, Tensor edge_dst, "
      "int[] offsets, int[] edge_offsets, Tensor U_iou, Tensor U_f) -> ()",
      &childsum_forward);
  m.def(
      "childsum_backward(Tensor(a!) dh, Tensor(b!) dc, Tensor(c!) dgates, Tensor(d!) dfgate, "
      "Tensor gates, Tensor c, Tensor tc, Tensor fgate, Tensor edge_src, Tensor edge_dst, "
      "int[] offsets, int[] edge_offsets, Tensor U_iou, Tensor U_f) -> ()",
      &childsum_backward);
}
