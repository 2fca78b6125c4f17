// Fused Child-Sum Tree-LSTM level loops (Tai, Socher & Manning 2015, eqs 2-8) for float32
// CPU tensors: the whole bottom-up loop (forward) and top-down loop (backward) of one batch in
// one call. Per level: the children's states gathered by edge, the summand of h~_j per edge,
// level-sized products (U_iou h~_j per node, U_f h_k per edge), fused element-wise passes.
//
// The same loop serves the mTreeLSTM of Tran & Cheng (2018, §3), whose gates are Child-Sum's
// (Tran eq 1 = Tai eqs 3-8) and whose h~_j sums a relation-dependent transform of h_k:
//   sum  (Child-Sum, mtree-add): h~_j = sum_k h_k                                  (Tai eq 2)
//   mult (mtree):  h~_j = W_hm M_j, M_j = sum_k s_jk (.) (W_mh h_k), s_jk = W_mr e_jk (eq 4)
//   full (mtree-full): h~_j = sum_k W_hh[r(j,k)] h_k                              (Tran eq 2)
// The forget gate f_jk always reads the untransformed h_k (Tai eq 4). Without output gate
// (Tai's relatedness models) the gate columns are i, u and h_j = tanh(c_j); the loops tell
// the two apart by the rows of U_iou (3h or 2h).
//
// The cells' declarations (gnn_treelstm/cells/childsum.py, multiplicative.py) hold the same
// arithmetic; tests/cells/test_registry.py and tests/engine/test_native.py compare the two.
//
// Layout (the callers in gnn_treelstm/kernels/fused.py prepare it), G = 3 (i, o, u) or 2 (i, u):
//   wx (N, (G+1)h): W x_j + b in schedule order (level l = rows off[l]:off[l+1]), gate
//     columns i, (o,) u, f.
//   h, c (N+1, h): states; row N is a zero row.   gates (N, G h): activated i, (o,) u.
//   h_tilde (N, h): h~_j.   tc (N, h): tanh(c_j).
//   fgate (E, h): f_jk per edge (eq 4), edges in schedule edge order: the edges into level l
//     are eoff[l]:eoff[l+1], sorted by parent row; edge_src = child row, edge_dst = parent row.
//   U_iou (G h, h), U_f (h, h): contiguous.
//   mult: s (E, ms) s_jk per edge; a (E, ms) W_mh h_k (written); msum (N, ms) M_j (written);
//     W_mh (ms, h), W_hm (h, ms). full: edge_rel (E,) int64, W_hh (R, h, h).
//   Backward: dfgate (E, h + ms): per edge [d pre_f | d(W_mh h_k)] (ms = 0 unless mult);
//     dht (N, h): dL/dh~_j (mult, full); ds (E, ms): dL/ds_jk (mult).
#include <torch/library.h>

#include <vector>

#include "common.h"

namespace {

using at::Tensor;
using namespace gnn_treelstm_native;

enum class Summand { kSum, kMult, kFull };

// The relation transform of h~_j's summand and its buffers (undefined tensors where unused).
struct Transform {
  Summand kind = Summand::kSum;
  Tensor s, a, msum, W_mh, W_hm;  // mult
  Tensor rel, W_hh;               // full
  Tensor dht, ds;                 // backward outputs (mult: both; full: dht)
  int64_t ms() const { return kind == Summand::kMult ? W_mh.size(0) : 0; }
};

void check_layout(const Tensor& rows, const Tensor& h, const Tensor& src, const Tensor& dst,
                  at::IntArrayRef off, at::IntArrayRef eoff, const Tensor& U_iou,
                  const Tensor& U_f, const Transform& tr) {
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
  TORCH_CHECK((U_iou.size(0) == 3 * hs || U_iou.size(0) == 2 * hs) && U_iou.size(1) == hs &&
                  U_f.size(0) == hs && U_f.size(1) == hs,
              "childsum_levels: U_iou must be (3h, h) or (2h, h) and U_f (h, h)");
  if (tr.kind == Summand::kMult) {
    const int64_t ms = tr.W_mh.size(0);
    TORCH_CHECK(tr.s.is_contiguous() && tr.s.size(0) == e && tr.s.size(1) == ms &&
                    tr.a.is_contiguous() && tr.a.size(0) == e && tr.a.size(1) == ms &&
                    tr.W_mh.size(1) == hs && tr.W_hm.size(0) == hs && tr.W_hm.size(1) == ms,
                "mtree_levels: s, a (E, m), W_mh (m, h), W_hm (h, m) expected");
  }
  if (tr.kind == Summand::kFull) {
    TORCH_CHECK(tr.rel.scalar_type() == at::kLong && tr.rel.is_contiguous() &&
                    tr.rel.size(0) == e && tr.W_hh.dim() == 3 && tr.W_hh.size(1) == hs &&
                    tr.W_hh.size(2) == hs,
                "mtree_full_levels: edge_rel (E,) int64 and W_hh (R, h, h) expected");
    const int64_t R = tr.W_hh.size(0);
    const int64_t* rel = tr.rel.data_ptr<int64_t>();
    for (int64_t q = 0; q < e; ++q)
      TORCH_CHECK(rel[q] >= 0 && rel[q] < R, "mtree_full_levels: relation id ", rel[q],
                  " of edge ", q, " is outside [0, ", R, ")");
  }
}

// The edges of one level grouped by relation (full): order[grp[r]:grp[r+1]] are the level's
// edge indices (0-based within the level) with relation r.
void group_by_relation(const int64_t* rel, int64_t ne, int64_t R, std::vector<int64_t>& grp,
                       std::vector<int64_t>& order) {
  grp.assign(R + 1, 0);
  for (int64_t q = 0; q < ne; ++q) ++grp[rel[q] + 1];
  for (int64_t r = 0; r < R; ++r) grp[r + 1] += grp[r];
  std::vector<int64_t> next(grp.begin(), grp.end() - 1);
  order.resize(ne);
  for (int64_t q = 0; q < ne; ++q) order[next[rel[q]]++] = q;
}

// Per relation r (full): rows X (edge q of the level at X + q * ldx, hs wide) times the
// padded operand Wr[r] (hs, p), added to Y row dst_row(q) (hs wide). in/out: scratch.
template <class DstRow>
void per_relation(const float* X, int64_t ldx, const std::vector<Tensor>& Wr,
                  const std::vector<int64_t>& grp, const std::vector<int64_t>& order, float* in,
                  float* out, int64_t hs, float* Y, DstRow dst_row) {
  const int64_t R = static_cast<int64_t>(Wr.size());
  for (int64_t r = 0; r < R; ++r) {
    const int64_t g0 = grp[r], g = grp[r + 1] - g0;
    if (g == 0) continue;
    const int64_t p = Wr[r].size(1);
    for (int64_t i = 0; i < g; ++i)
      std::memcpy(in + i * hs, X + order[g0 + i] * ldx, hs * sizeof(float));
    gemm_serial(in, hs, 1, Wr[r].data_ptr<float>(), p, out, p, g, p, hs);
    for (int64_t i = 0; i < g; ++i) {
      float* y = Y + dst_row(order[g0 + i]) * hs;
      const float* o = out + i * p;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) y[q] += o[q];
    }
  }
}

// The edge operand [U_f ; W_mh] (h + ms, h): per edge one product gives U_f h_k and W_mh h_k.
Tensor edge_weight(const Tensor& U_f, const Transform& tr) {
  return tr.kind == Summand::kMult ? at::cat({U_f, tr.W_mh}, 0) : U_f;
}

// Forward, bottom-up (Tai eqs 2-8; Tran eqs 2, 4 for the summand of h~_j).
void forward_impl(const Tensor& wx, const Tensor& h, const Tensor& c, const Tensor& gates,
                  const Tensor& h_tilde, const Tensor& fgate, const Tensor& tc,
                  const Tensor& edge_src, const Tensor& edge_dst, at::IntArrayRef off,
                  at::IntArrayRef eoff, const Tensor& U_iou, const Tensor& U_f,
                  const Transform& tr) {
  check_layout(wx, h, edge_src, edge_dst, off, eoff, U_iou, U_f, tr);
  const int64_t hs = h.size(1), GW = U_iou.size(0), WW = GW + hs, ms = tr.ms();
  const bool gated = GW == 3 * hs;
  const float* WX = wx.data_ptr<float>();
  float* H = h.data_ptr<float>();
  float* Cs = c.data_ptr<float>();
  float* G = gates.data_ptr<float>();
  float* HT = h_tilde.data_ptr<float>();
  float* F = fgate.data_ptr<float>();
  float* T = tc.data_ptr<float>();
  const int64_t* src = edge_src.data_ptr<int64_t>();
  const int64_t* dst = edge_dst.data_ptr<int64_t>();
  const Tensor Uiou_t = padded_operand(U_iou.t());           // (h, G h padded)
  const Tensor Ue_t = padded_operand(edge_weight(U_f, tr).t());  // (h, h + ms padded)
  const int64_t pg = Uiou_t.size(1), pe = Ue_t.size(1);
  const int64_t rows = max_level_rows(off), erows = max_level_rows(eoff);
  Tensor piou = at::empty({rows, pg}, wx.options());  // U_iou h~_j of a level
  Tensor hk = at::empty({erows, hs}, wx.options());   // h_k per edge of a level
  Tensor pe_buf = at::empty({erows, pe}, wx.options());  // [U_f h_k | W_mh h_k] per edge
  float* PIOU = piou.data_ptr<float>();
  float* HK = hk.data_ptr<float>();
  float* PE = pe_buf.data_ptr<float>();
  // mult: W_hm^T and the level's W_hm M_j; full: W_hh[r]^T and per-relation scratch
  Tensor Whm_t, pht;
  std::vector<Tensor> Whh_t;
  Tensor gin, gout;
  if (tr.kind == Summand::kMult) {
    Whm_t = padded_operand(tr.W_hm.t());  // (ms, h padded)
    pht = at::empty({rows, Whm_t.size(1)}, wx.options());
  } else if (tr.kind == Summand::kFull) {
    for (int64_t r = 0; r < tr.W_hh.size(0); ++r)
      Whh_t.push_back(padded_operand(tr.W_hh[r].t()));  // (h, h padded)
    gin = at::empty({erows, hs}, wx.options());
    gout = at::empty({erows, round_up(hs, kTile)}, wx.options());
  }
  std::vector<int64_t> grp, order;

  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  for (int64_t lvl = 0; lvl < num_levels; ++lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    const int64_t ea = eoff[lvl], ne = eoff[lvl + 1] - ea;
    std::memset(HT + a * hs, 0, m * hs * sizeof(float));
    if (tr.kind == Summand::kMult)
      std::memset(tr.msum.data_ptr<float>() + a * ms, 0, m * ms * sizeof(float));
    for (int64_t q = 0; q < ne; ++q)  // h_k of each edge
      std::memcpy(HK + q * hs, H + src[ea + q] * hs, hs * sizeof(float));
    if (ne > 0)  // U_f h_k (Tai eq 4) and, mult, W_mh h_k (Tran eq 4) per edge
      gemm(HK, hs, 1, Ue_t.data_ptr<float>(), pe, PE, pe, ne, pe, hs);
    if (ne > 0 && tr.kind == Summand::kSum) {
      for (int64_t q = 0; q < ne; ++q) {  // h~_j = sum_k h_k (Tai eq 2)
        const float* hk_row = HK + q * hs;
        float* ht = HT + dst[ea + q] * hs;
#pragma omp simd
        for (int64_t p = 0; p < hs; ++p) ht[p] += hk_row[p];
      }
    } else if (ne > 0 && tr.kind == Summand::kMult) {
      const float* S = tr.s.data_ptr<float>();
      float* A = tr.a.data_ptr<float>();
      float* M = tr.msum.data_ptr<float>();
      for (int64_t q = 0; q < ne; ++q) {  // M_j = sum_k (W_mr e_jk) (.) (W_mh h_k) (eq 4)
        const float* wmh = PE + q * pe + hs;
        const float* s = S + (ea + q) * ms;
        float* arow = A + (ea + q) * ms;
        float* mj = M + dst[ea + q] * ms;
#pragma omp simd
        for (int64_t p = 0; p < ms; ++p) {
          arow[p] = wmh[p];
          mj[p] += s[p] * wmh[p];
        }
      }
      const int64_t ph = Whm_t.size(1);  // h~_j = W_hm M_j (eq 4)
      float* PHT = pht.data_ptr<float>();
      gemm(M + a * ms, ms, 1, Whm_t.data_ptr<float>(), ph, PHT, ph, m, ph, ms);
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(HT + (a + r) * hs, PHT + r * ph, hs * sizeof(float));
    } else if (ne > 0) {  // full: h~_j = sum_k W_hh[r(j,k)] h_k (Tran eq 2)
      group_by_relation(tr.rel.data_ptr<int64_t>() + ea, ne, tr.W_hh.size(0), grp, order);
      per_relation(HK, hs, Whh_t, grp, order, gin.data_ptr<float>(), gout.data_ptr<float>(),
                   hs, HT, [&](int64_t q) { return dst[ea + q]; });
    }
    if (ne > 0)  // U_iou h~_j (Tai eqs 3, 5, 6)
      gemm(HT + a * hs, hs, 1, Uiou_t.data_ptr<float>(), pg, PIOU, pg, m, pg, hs);
    for (int64_t r = 0; r < m; ++r) {  // i, (o,) u (eqs 3, 5, 6) and i (.) u (eq 7)
      const int64_t j = a + r;
      const float* w = WX + j * WW;
      const float* pre = PIOU + r * pg;
      float* g = G + j * GW;
      float* cj = Cs + j * hs;
      if (ne > 0) {
#pragma omp simd
        for (int64_t p = 0; p < GW; ++p) g[p] = w[p] + pre[p];
      } else {
        std::memcpy(g, w, GW * sizeof(float));
      }
      activate_gates(g, cj, hs, gated);
    }
    for (int64_t q = 0; q < ne; ++q) {  // f_jk (eq 4), + f_jk (.) c_k (eq 7)
      const int64_t j = dst[ea + q];
      const float* wf = WX + j * WW + GW;
      const float* pre = PE + q * pe;
      const float* ck = Cs + src[ea + q] * hs;
      float* f = F + (ea + q) * hs;
      float* cj = Cs + j * hs;
#pragma omp simd
      for (int64_t p = 0; p < hs; ++p) {
        f[p] = sigmoid_f(wf[p] + pre[p]);
        cj[p] += f[p] * ck[p];
      }
    }
    for (int64_t j = a; j < a + m; ++j)  // h_j = o (.) tanh(c_j) or tanh(c_j) (eq 8)
      output_state(G + j * GW, Cs + j * hs, T + j * hs, H + j * hs, hs, gated);
  }
}

// Backward, top-down. dh, dc (N+1, h) hold dL/dh, dL/dc of the outputs and receive the
// children's contributions; dgates (N, G h) and dfgate (E, h + ms) receive the gradients of
// the pre-activations of i, (o,) u and of f_jk (and, mult, of W_mh h_k).
void backward_impl(const Tensor& dh, const Tensor& dc, const Tensor& dgates,
                   const Tensor& dfgate, const Tensor& gates, const Tensor& c, const Tensor& tc,
                   const Tensor& fgate, const Tensor& edge_src, const Tensor& edge_dst,
                   at::IntArrayRef off, at::IntArrayRef eoff, const Tensor& U_iou,
                   const Tensor& U_f, const Transform& tr) {
  check_layout(dgates, dh, edge_src, edge_dst, off, eoff, U_iou, U_f, tr);
  const int64_t hs = dh.size(1), GW = U_iou.size(0), ms = tr.ms(), DW = hs + ms;
  const bool gated = GW == 3 * hs;
  TORCH_CHECK(dfgate.is_contiguous() && dfgate.size(1) == DW,
              "childsum_levels: dfgate must be (E, h + m)");
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
  const Tensor Uiou = padded_operand(U_iou);           // (G h, h padded)
  const Tensor Ue = padded_operand(edge_weight(U_f, tr));  // (h + ms, h padded)
  const int64_t ph = Uiou.size(1);
  const int64_t rows = max_level_rows(off), erows = max_level_rows(eoff);
  Tensor dht = at::empty({rows, ph}, dgates.options());   // dL/dh~_j of a level
  Tensor dhk = at::empty({erows, ph}, dgates.options());  // U_f^T d pre_f (+ W_mh^T da) per edge
  float* DHT = dht.data_ptr<float>();
  float* DHK = dhk.data_ptr<float>();
  Tensor Whm, dm;  // mult: W_hm, the level's W_hm^T dL/dh~_j
  std::vector<Tensor> Whh;
  Tensor gin, gout;
  if (tr.kind == Summand::kMult) {
    Whm = padded_operand(tr.W_hm);  // (h, ms padded)
    dm = at::empty({rows, Whm.size(1)}, dgates.options());
  } else if (tr.kind == Summand::kFull) {
    for (int64_t r = 0; r < tr.W_hh.size(0); ++r) Whh.push_back(padded_operand(tr.W_hh[r]));
    gin = at::empty({erows, hs}, dgates.options());
    gout = at::empty({erows, ph}, dgates.options());
  }
  std::vector<int64_t> grp, order;

  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  for (int64_t lvl = num_levels - 1; lvl >= 0; --lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    const int64_t ea = eoff[lvl], ne = eoff[lvl + 1] - ea;
    for (int64_t j = a; j < a + m; ++j)  // eqs 8, 7 -> 3, (5,) 6
      gates_backward(G + j * GW, T + j * hs, DH + j * hs, DC + j * hs, DG + j * GW, hs, gated);
    if (tr.kind != Summand::kSum)
      std::memset(tr.dht.data_ptr<float>() + a * hs, 0, m * hs * sizeof(float));
    if (ne == 0) continue;
    for (int64_t q = ea; q < ea + ne; ++q) {  // eq 7 -> c_k and f_jk (eq 4)
      const float* dcj = DC + dst[q] * hs;
      const float* f = F + q * hs;
      const float* ck = Cs + src[q] * hs;
      float* dck = DC + src[q] * hs;
      float* df = DF + q * DW;
#pragma omp simd
      for (int64_t p = 0; p < hs; ++p) {
        df[p] = dcj[p] * ck[p] * f[p] * (1.0f - f[p]);
        dck[p] += dcj[p] * f[p];
      }
    }
    // eqs 3, 5, 6 -> h~_j
    gemm(DG + a * GW, GW, 1, Uiou.data_ptr<float>(), ph, DHT, ph, m, ph, GW);
    if (tr.kind == Summand::kSum) {  // h~_j -> every child's h_k (Tai eq 2)
      for (int64_t q = 0; q < ne; ++q) {
        const float* dt = DHT + (dst[ea + q] - a) * ph;
        float* dhk_row = DH + src[ea + q] * hs;
#pragma omp simd
        for (int64_t p = 0; p < hs; ++p) dhk_row[p] += dt[p];
      }
    } else {
      float* DHTO = tr.dht.data_ptr<float>();
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(DHTO + (a + r) * hs, DHT + r * ph, hs * sizeof(float));
    }
    if (tr.kind == Summand::kMult) {  // h~_j = W_hm M_j -> M_j -> s_jk, W_mh h_k (eq 4)
      const int64_t pm = Whm.size(1);
      float* DM = dm.data_ptr<float>();
      gemm(DHT, ph, 1, Whm.data_ptr<float>(), pm, DM, pm, m, pm, hs);
      const float* S = tr.s.data_ptr<float>();
      const float* A = tr.a.data_ptr<float>();
      float* DS = tr.ds.data_ptr<float>();
      for (int64_t q = ea; q < ea + ne; ++q) {
        const float* dmj = DM + (dst[q] - a) * pm;
        const float* s = S + q * ms;
        const float* arow = A + q * ms;
        float* ds = DS + q * ms;
        float* da = DF + q * DW + hs;
#pragma omp simd
        for (int64_t p = 0; p < ms; ++p) {
          ds[p] = dmj[p] * arow[p];
          da[p] = dmj[p] * s[p];
        }
      }
    } else if (tr.kind == Summand::kFull) {  // h~_j -> W_hh[r]^T dL/dh~_j per child (eq 2)
      group_by_relation(tr.rel.data_ptr<int64_t>() + ea, ne, tr.W_hh.size(0), grp, order);
      // rows of DHT by the edge's parent; gather them per relation into gin
      const int64_t R = tr.W_hh.size(0);
      float* GIN = gin.data_ptr<float>();
      float* GOUT = gout.data_ptr<float>();
      for (int64_t r = 0; r < R; ++r) {
        const int64_t g0 = grp[r], g = grp[r + 1] - g0;
        if (g == 0) continue;
        for (int64_t i = 0; i < g; ++i)
          std::memcpy(GIN + i * hs, DHT + (dst[ea + order[g0 + i]] - a) * ph,
                      hs * sizeof(float));
        gemm_serial(GIN, hs, 1, Whh[r].data_ptr<float>(), ph, GOUT, ph, g, ph, hs);
        for (int64_t i = 0; i < g; ++i) {
          float* y = DH + src[ea + order[g0 + i]] * hs;
          const float* o = GOUT + i * ph;
#pragma omp simd
          for (int64_t p = 0; p < hs; ++p) y[p] += o[p];
        }
      }
    }
    // eq 4 (U_f) and, mult, W_mh -> h_k: one product over the level's edges
    gemm(DF + ea * DW, DW, 1, Ue.data_ptr<float>(), ph, DHK, ph, ne, ph, DW);
    for (int64_t q = 0; q < ne; ++q) {
      const float* dk = DHK + q * ph;
      float* dhk_row = DH + src[ea + q] * hs;
#pragma omp simd
      for (int64_t p = 0; p < hs; ++p) dhk_row[p] += dk[p];
    }
  }
}

// ---------------------------------------------------------------- the ops
void childsum_forward(const Tensor& wx, const Tensor& h, const Tensor& c, const Tensor& gates,
                      const Tensor& h_tilde, const Tensor& fgate, const Tensor& tc,
                      const Tensor& edge_src, const Tensor& edge_dst, at::IntArrayRef off,
                      at::IntArrayRef eoff, const Tensor& U_iou, const Tensor& U_f) {
  forward_impl(wx, h, c, gates, h_tilde, fgate, tc, edge_src, edge_dst, off, eoff, U_iou, U_f,
               Transform{});
}

void childsum_backward(const Tensor& dh, const Tensor& dc, const Tensor& dgates,
                       const Tensor& dfgate, const Tensor& gates, const Tensor& c,
                       const Tensor& tc, const Tensor& fgate, const Tensor& edge_src,
                       const Tensor& edge_dst, at::IntArrayRef off, at::IntArrayRef eoff,
                       const Tensor& U_iou, const Tensor& U_f) {
  backward_impl(dh, dc, dgates, dfgate, gates, c, tc, fgate, edge_src, edge_dst, off, eoff,
                U_iou, U_f, Transform{});
}

Transform mult(const Tensor& s, const Tensor& a, const Tensor& msum, const Tensor& W_mh,
               const Tensor& W_hm) {
  Transform tr;
  tr.kind = Summand::kMult;
  tr.s = s;
  tr.a = a;
  tr.msum = msum;
  tr.W_mh = W_mh.contiguous();
  tr.W_hm = W_hm.contiguous();
  return tr;
}

void mtree_forward(const Tensor& wx, const Tensor& h, const Tensor& c, const Tensor& gates,
                   const Tensor& h_tilde, const Tensor& fgate, const Tensor& tc,
                   const Tensor& edge_src, const Tensor& edge_dst, at::IntArrayRef off,
                   at::IntArrayRef eoff, const Tensor& U_iou, const Tensor& U_f,
                   const Tensor& s, const Tensor& a, const Tensor& msum, const Tensor& W_mh,
                   const Tensor& W_hm) {
  TORCH_CHECK(msum.is_contiguous() && msum.size(0) == wx.size(0) &&
                  msum.size(1) == W_mh.size(0),
              "mtree_levels: msum must be (N, m)");
  forward_impl(wx, h, c, gates, h_tilde, fgate, tc, edge_src, edge_dst, off, eoff, U_iou, U_f,
               mult(s, a, msum, W_mh, W_hm));
}

void mtree_backward(const Tensor& dh, const Tensor& dc, const Tensor& dgates,
                    const Tensor& dfgate, const Tensor& gates, const Tensor& c, const Tensor& tc,
                    const Tensor& fgate, const Tensor& edge_src, const Tensor& edge_dst,
                    at::IntArrayRef off, at::IntArrayRef eoff, const Tensor& U_iou,
                    const Tensor& U_f, const Tensor& s, const Tensor& a, const Tensor& W_mh,
                    const Tensor& W_hm, const Tensor& dht, const Tensor& ds) {
  TORCH_CHECK(dht.is_contiguous() && dht.size(0) == dgates.size(0) && dht.size(1) == dh.size(1) &&
                  ds.is_contiguous() && ds.sizes() == s.sizes(),
              "mtree_levels: dht (N, h) and ds (E, m) expected");
  Transform tr = mult(s, a, Tensor(), W_mh, W_hm);
  tr.dht = dht;
  tr.ds = ds;
  backward_impl(dh, dc, dgates, dfgate, gates, c, tc, fgate, edge_src, edge_dst, off, eoff,
                U_iou, U_f, tr);
}

Transform full(const Tensor& edge_rel, const Tensor& W_hh) {
  Transform tr;
  tr.kind = Summand::kFull;
  tr.rel = edge_rel;
  tr.W_hh = W_hh.contiguous();
  return tr;
}

void mtree_full_forward(const Tensor& wx, const Tensor& h, const Tensor& c, const Tensor& gates,
                        const Tensor& h_tilde, const Tensor& fgate, const Tensor& tc,
                        const Tensor& edge_src, const Tensor& edge_dst, at::IntArrayRef off,
                        at::IntArrayRef eoff, const Tensor& U_iou, const Tensor& U_f,
                        const Tensor& edge_rel, const Tensor& W_hh) {
  forward_impl(wx, h, c, gates, h_tilde, fgate, tc, edge_src, edge_dst, off, eoff, U_iou, U_f,
               full(edge_rel, W_hh));
}

void mtree_full_backward(const Tensor& dh, const Tensor& dc, const Tensor& dgates,
                         const Tensor& dfgate, const Tensor& gates, const Tensor& c,
                         const Tensor& tc, const Tensor& fgate, const Tensor& edge_src,
                         const Tensor& edge_dst, at::IntArrayRef off, at::IntArrayRef eoff,
                         const Tensor& U_iou, const Tensor& U_f, const Tensor& edge_rel,
                         const Tensor& W_hh, const Tensor& dht) {
  TORCH_CHECK(dht.is_contiguous() && dht.size(0) == dgates.size(0) && dht.size(1) == dh.size(1),
              "mtree_full_levels: dht (N, h) expected");
  Transform tr = full(edge_rel, W_hh);
  tr.dht = dht;
  backward_impl(dh, dc, dgates, dfgate, gates, c, tc, fgate, edge_src, edge_dst, off, eoff,
                U_iou, U_f, tr);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnn_treelstm, m) {
  m.def(
      "childsum_forward(Tensor wx, Tensor(a!) h, Tensor(b!) c, Tensor(c!) gates, "
      "Tensor(d!) h_tilde, Tensor(e!) fgate, Tensor(f!) tc, Tensor edge_src, Tensor edge_dst, "
      "int[] offsets, int[] edge_offsets, Tensor U_iou, Tensor U_f) -> ()");
  m.def(
      "childsum_backward(Tensor(a!) dh, Tensor(b!) dc, Tensor(c!) dgates, Tensor(d!) dfgate, "
      "Tensor gates, Tensor c, Tensor tc, Tensor fgate, Tensor edge_src, Tensor edge_dst, "
      "int[] offsets, int[] edge_offsets, Tensor U_iou, Tensor U_f) -> ()");
  m.def(
      "mtree_forward(Tensor wx, Tensor(a!) h, Tensor(b!) c, Tensor(c!) gates, "
      "Tensor(d!) h_tilde, Tensor(e!) fgate, Tensor(f!) tc, Tensor edge_src, Tensor edge_dst, "
      "int[] offsets, int[] edge_offsets, Tensor U_iou, Tensor U_f, Tensor s, Tensor(g!) a, "
      "Tensor(h!) msum, Tensor W_mh, Tensor W_hm) -> ()");
  m.def(
      "mtree_backward(Tensor(a!) dh, Tensor(b!) dc, Tensor(c!) dgates, Tensor(d!) dfgate, "
      "Tensor gates, Tensor c, Tensor tc, Tensor fgate, Tensor edge_src, Tensor edge_dst, "
      "int[] offsets, int[] edge_offsets, Tensor U_iou, Tensor U_f, Tensor s, Tensor a, "
      "Tensor W_mh, Tensor W_hm, Tensor(e!) dht, Tensor(f!) ds) -> ()");
  m.def(
      "mtree_full_forward(Tensor wx, Tensor(a!) h, Tensor(b!) c, Tensor(c!) gates, "
      "Tensor(d!) h_tilde, Tensor(e!) fgate, Tensor(f!) tc, Tensor edge_src, Tensor edge_dst, "
      "int[] offsets, int[] edge_offsets, Tensor U_iou, Tensor U_f, Tensor edge_rel, "
      "Tensor W_hh) -> ()");
  m.def(
      "mtree_full_backward(Tensor(a!) dh, Tensor(b!) dc, Tensor(c!) dgates, Tensor(d!) dfgate, "
      "Tensor gates, Tensor c, Tensor tc, Tensor fgate, Tensor edge_src, Tensor edge_dst, "
      "int[] offsets, int[] edge_offsets, Tensor U_iou, Tensor U_f, Tensor edge_rel, "
      "Tensor W_hh, Tensor(e!) dht) -> ()");
}

// CPU kernels registered apart from the schemas, so the ops get fake (meta) kernels from
// Python (native.register_fakes) and torch.compile can trace them
TORCH_LIBRARY_IMPL(gnn_treelstm, CPU, m) {
  m.impl("childsum_forward", &childsum_forward);
  m.impl("childsum_backward", &childsum_backward);
  m.impl("mtree_forward", &mtree_forward);
  m.impl("mtree_backward", &mtree_backward);
  m.impl("mtree_full_forward", &mtree_full_forward);
  m.impl("mtree_full_backward", &mtree_full_backward);
}

