// Teng & Zhang (2017) level loops for float32 CPU tensors: the head lexicon (eqs 9-10, and the
// heuristic heads of Table 3) bottom-up, the peephole binary cell of ConTree(+Lex) (eqs 11,
// 12, 5, 1; baseline eqs 5-8) bottom-up, and the top-down cell (eqs 14-15) top-down; each with
// its backward loop. Per level: one gather, the level-sized products of common.h, one or two
// fused element-wise passes. The declarations these loops accelerate are head_combine,
// lex_node_update (gnn_treelstm/cells/lexicalized.py) and topdown_node_update
// (gnn_treelstm/cells/topdown.py); tests/cells/test_registry.py holds the loops to them.
//
// Layout (the caller, gnn_treelstm/kernels/fused_teng.py, prepares it). Rows are in schedule
// order (level l = rows off[l]:off[l+1]); state buffers have N + 1 rows, row N is the zero
// padding row that a missing child / a root's parent reads.
//   head:    x (N+1, X): on entry the leaves' word vectors in the level-0 rows; on exit every
//            row's head lexicon x_t. z (N, X): the gate z_t of eq 10 (gate mode only).
//            slots (N, 2): children rows by position (N: missing). mode 0 gate, 1 left,
//            2 right, 3 average. Wz (X, 2X) = [W_zx^L | W_zx^R], bz (X,).
//   lex:     xt (N, 5h) input terms, gate columns i, fl, fr, g, o; gates (N, 5h): activated.
//            h, c (N+1, h); tc (N, h) = tanh(c_t); slots (N, 2); U_h (5h, 2h), U_c (3h, 2h),
//            W_co (h, h).
//   topdown: xt (N, 4h) input terms i, f, g, o; gates (N, 4h): activated. parent (N,) the
//            parent's row (N: root), side (N,) 0 = L, 1 = R (roots 0). U_h (4h, 2h),
//            U_c (2h, 2h) with column blocks [L | R], W_co (2, h, h).
#include <torch/library.h>

#include "common.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using at::Tensor;
using namespace gnn_treelstm_native;

inline float teng_tanh(float x) { return 2.0f * sigmoid_f(2.0f * x) - 1.0f; }

void check_common(const char* who, const Tensor& rows, const Tensor& state, int64_t n,
                  at::IntArrayRef off) {
  TORCH_CHECK(rows.device().is_cpu() && rows.scalar_type() == at::kFloat &&
                  state.scalar_type() == at::kFloat,
              who, ": float32 CPU tensors only");
  TORCH_CHECK(rows.is_contiguous() && state.is_contiguous(), who,
              ": contiguous buffers expected");
  TORCH_CHECK(off.size() >= 1 && off.front() == 0 && off.back() == n, who,
              ": offsets must run from 0 to N");
  TORCH_CHECK(state.size(0) == n + 1, who, ": state buffers need N + 1 rows");
  TORCH_CHECK(rows.size(0) == n, who, ": row buffers need N rows");
}

void check_index(const char* who, const Tensor& t, int64_t n, int64_t cols) {
  TORCH_CHECK(t.scalar_type() == at::kLong && t.is_contiguous() && t.size(0) == n &&
                  (cols == 0 ? t.dim() == 1 : (t.dim() == 2 && t.size(1) == cols)),
              who, ": index tensors must be contiguous int64 of N rows");
}

// z_t for mode (left: 1, right: 0, average: 1/2) so that x_t = z x^L + (1 - z) x^R (eq 9 form).
inline float fixed_z(int64_t mode) { return mode == 1 ? 1.0f : (mode == 2 ? 0.0f : 0.5f); }

// ================================================================ head lexicon (eqs 9-10)
void teng_head_forward(const Tensor& x, const Tensor& z, const Tensor& slots,
                       at::IntArrayRef off, int64_t mode, const Tensor& Wz, const Tensor& bz) {
  const int64_t n = slots.size(0), X = x.size(1);
  check_common("teng_head", z.numel() ? z : x.narrow(0, 0, n), x, n, off);
  check_index("teng_head", slots, n, 2);
  TORCH_CHECK(mode >= 0 && mode <= 3, "teng_head: mode must be 0..3");
  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  if (num_levels <= 1) return;
  float* XB = x.data_ptr<float>();
  const int64_t* S = slots.data_ptr<int64_t>();
  const int64_t rows = max_level_rows(off, 1);
  Tensor WzT, xs, pre;
  float *Z = nullptr, *XS = nullptr, *P = nullptr;
  const float* BZ = nullptr;
  int64_t Xp = 0;
  if (mode == 0) {
    TORCH_CHECK(Wz.size(0) == X && Wz.size(1) == 2 * X && bz.numel() == X && z.size(0) == n &&
                    z.size(1) == X && bz.is_contiguous(),
                "teng_head: W_z must be (X, 2X), b_z (X,), z (N, X)");
    WzT = padded_operand(Wz.t());  // (2X, Xp)
    Xp = WzT.size(1);
    xs = at::empty({rows, 2 * X}, x.options());  // [x^L, x^R] of a level
    pre = at::empty({rows, Xp}, x.options());    // W_z [x^L; x^R]
    Z = z.data_ptr<float>();
    XS = xs.data_ptr<float>();
    P = pre.data_ptr<float>();
    BZ = bz.data_ptr<float>();
  }
  const float zc = fixed_z(mode);
  for (int64_t lvl = 1; lvl < num_levels; ++lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    if (mode == 0) {
      for (int64_t r = 0; r < m; ++r)
        for (int64_t s = 0; s < 2; ++s)
          std::memcpy(XS + (2 * r + s) * X, XB + S[(a + r) * 2 + s] * X, X * sizeof(float));
      gemm(XS, 2 * X, 1, WzT.data_ptr<float>(), Xp, P, Xp, m, Xp, 2 * X);  // eq 10
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = a + r;
      const float* xl = XB + S[2 * j] * X;
      const float* xr = XB + S[2 * j + 1] * X;
      float* xt = XB + j * X;
      if (mode == 0) {
        float* zj = Z + j * X;
        const float* p = P + r * Xp;
#pragma omp simd
        for (int64_t q = 0; q < X; ++q) {
          zj[q] = sigmoid_f(p[q] + BZ[q]);                    // eq 10
          xt[q] = zj[q] * xl[q] + (1.0f - zj[q]) * xr[q];     // eq 9
        }
      } else {
#pragma omp simd
        for (int64_t q = 0; q < X; ++q) xt[q] = zc * xl[q] + (1.0f - zc) * xr[q];
      }
    }
  }
}

// dx (N+1, X): on entry dL/dx_t of every row; the children's terms are added level by level,
// top-down, so on exit the level-0 rows hold dL/d(word vector). dpre (N, X): d pre-activation
// of z_t (gate mode; rows of levels >= 1).
void teng_head_backward(const Tensor& dx, const Tensor& dpre, const Tensor& x, const Tensor& z,
                        const Tensor& slots, at::IntArrayRef off, int64_t mode,
                        const Tensor& Wz) {
  const int64_t n = slots.size(0), X = x.size(1);
  check_common("teng_head", dpre.numel() ? dpre : dx.narrow(0, 0, n), dx, n, off);
  check_index("teng_head", slots, n, 2);
  TORCH_CHECK(x.is_contiguous() && x.size(0) == n + 1 && dx.size(1) == X,
              "teng_head: x must be the forward's (N + 1, X) buffer");
  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  if (num_levels <= 1) return;
  float* DX = dx.data_ptr<float>();
  const float* XB = x.data_ptr<float>();
  const int64_t* S = slots.data_ptr<int64_t>();
  Tensor Wzp, dxs;
  float *DP = nullptr, *DXS = nullptr;
  const float* Z = nullptr;
  int64_t X2p = 0;
  if (mode == 0) {
    TORCH_CHECK(z.is_contiguous() && z.size(0) == n && dpre.size(0) == n &&
                    Wz.size(0) == X && Wz.size(1) == 2 * X,
                "teng_head: z, dpre (N, X), W_z (X, 2X) expected");
    Wzp = padded_operand(Wz);  // (X, 2Xp)
    X2p = Wzp.size(1);
    dxs = at::empty({max_level_rows(off, 1), X2p}, dx.options());
    DP = dpre.data_ptr<float>();
    DXS = dxs.data_ptr<float>();
    Z = z.data_ptr<float>();
  }
  const float zc = fixed_z(mode);
  for (int64_t lvl = num_levels - 1; lvl >= 1; --lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = a + r;
      const float* dxt = DX + j * X;
      float* dl = DX + S[2 * j] * X;
      float* dr = DX + S[2 * j + 1] * X;
      if (mode == 0) {
        const float* xl = XB + S[2 * j] * X;
        const float* xr = XB + S[2 * j + 1] * X;
        const float* zj = Z + j * X;
        float* dp = DP + j * X;
#pragma omp simd
        for (int64_t q = 0; q < X; ++q) {
          dp[q] = dxt[q] * (xl[q] - xr[q]) * zj[q] * (1.0f - zj[q]);  // eqs 9 -> 10
          dl[q] += dxt[q] * zj[q];
          dr[q] += dxt[q] * (1.0f - zj[q]);
        }
      } else {
#pragma omp simd
        for (int64_t q = 0; q < X; ++q) {
          dl[q] += zc * dxt[q];
          dr[q] += (1.0f - zc) * dxt[q];
        }
      }
    }
    if (mode != 0) continue;
    // eq 10 -> [x^L; x^R]: (m, X) @ (X, 2Xp)
    gemm(DP + a * X, X, 1, Wzp.data_ptr<float>(), X2p, DXS, X2p, m, X2p, X);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t s = 0; s < 2; ++s) {
        float* d = DX + S[(a + r) * 2 + s] * X;
        const float* src = DXS + r * X2p + s * X;
#pragma omp simd
        for (int64_t q = 0; q < X; ++q) d[q] += src[q];
      }
  }
}

// ================================================================ ConTree(+Lex) cell, bottom-up
void check_lex(const Tensor& rows, const Tensor& h, const Tensor& slots, at::IntArrayRef off,
               const Tensor& U_h, const Tensor& U_c, const Tensor& W_co) {
  const int64_t n = slots.size(0), hs = h.size(1);
  check_common("teng_lex", rows, h, n, off);
  check_index("teng_lex", slots, n, 2);
  TORCH_CHECK(rows.size(1) == 5 * hs && U_h.size(0) == 5 * hs && U_h.size(1) == 2 * hs &&
                  U_c.size(0) == 3 * hs && U_c.size(1) == 2 * hs && W_co.size(0) == hs &&
                  W_co.size(1) == hs,
              "teng_lex: U_h (5h, 2h), U_c (3h, 2h), W_co (h, h), rows (N, 5h) expected");
}

// Forward (eqs 11, 12, 5, 1). Writes gates (activated), h, c, tc.
void teng_lex_forward(const Tensor& xt, const Tensor& gates, const Tensor& h, const Tensor& c,
                      const Tensor& tc, const Tensor& slots, at::IntArrayRef off,
                      const Tensor& U_h, const Tensor& U_c, const Tensor& W_co) {
  check_lex(xt, h, slots, off, U_h, U_c, W_co);
  TORCH_CHECK(gates.is_contiguous() && c.is_contiguous() && tc.is_contiguous(),
              "teng_lex: contiguous buffers expected");
  const int64_t hs = h.size(1), C = 5 * hs;
  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  if (num_levels == 0) return;
  const float* XT = xt.data_ptr<float>();
  float* G = gates.data_ptr<float>();
  float* H = h.data_ptr<float>();
  float* Cs = c.data_ptr<float>();
  float* T = tc.data_ptr<float>();
  const int64_t* S = slots.data_ptr<int64_t>();
  const Tensor UhT = padded_operand(U_h.t());    // (2h, P5): [h^L; h^R] -> i, fl, fr, g, o
  const Tensor UcT = padded_operand(U_c.t());    // (2h, P3): [c^L; c^R] -> i, fl, fr
  const Tensor WcoT = padded_operand(W_co.t());  // (h, P1)
  const int64_t P5 = UhT.size(1), P3 = UcT.size(1), P1 = WcoT.size(1);
  const int64_t rows = max_level_rows(off);
  Tensor hk = at::empty({rows, 2 * hs}, xt.options()), ck = at::empty({rows, 2 * hs}, xt.options());
  Tensor p5 = at::empty({rows, P5}, xt.options()), p3 = at::empty({rows, P3}, xt.options());
  Tensor p1 = at::empty({rows, P1}, xt.options());
  float *HK = hk.data_ptr<float>(), *CK = ck.data_ptr<float>();
  float *PH = p5.data_ptr<float>(), *PC = p3.data_ptr<float>(), *PO = p1.data_ptr<float>();

  for (int64_t lvl = 0; lvl < num_levels; ++lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    if (lvl > 0) {  // the recurrent terms: Σ_N W_h*^N h^N, Σ_N W_c*^N c^N
      for (int64_t r = 0; r < m; ++r)
        for (int64_t s = 0; s < 2; ++s) {
          const int64_t k = S[(a + r) * 2 + s];
          std::memcpy(HK + (2 * r + s) * hs, H + k * hs, hs * sizeof(float));
          std::memcpy(CK + (2 * r + s) * hs, Cs + k * hs, hs * sizeof(float));
        }
      gemm(HK, 2 * hs, 1, UhT.data_ptr<float>(), P5, PH, P5, m, P5, 2 * hs);
      gemm(CK, 2 * hs, 1, UcT.data_ptr<float>(), P3, PC, P3, m, P3, 2 * hs);
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = a + r;
      float* g = G + j * C;
      const float* x = XT + j * C;
      if (lvl > 0) {
        const float* ph = PH + r * P5;
        const float* pc = PC + r * P3;
#pragma omp simd
        for (int64_t q = 0; q < 3 * hs; ++q) g[q] = x[q] + (ph[q] + pc[q]);
#pragma omp simd
        for (int64_t q = 3 * hs; q < C; ++q) g[q] = x[q] + ph[q];
      } else {  // leaves: no children
        std::memcpy(g, x, C * sizeof(float));
      }
      const float* cl = Cs + S[2 * j] * hs;
      const float* cr = Cs + S[2 * j + 1] * hs;
      float* cj = Cs + j * hs;
      float *gi = g, *gl = g + hs, *gr = g + 2 * hs, *gg = g + 3 * hs;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) {
        gi[q] = sigmoid_f(gi[q]);   // eq 11 (i)
        gl[q] = sigmoid_f(gl[q]);   // eq 11 (f^L)
        gr[q] = sigmoid_f(gr[q]);   // eq 11 (f^R)
        gg[q] = teng_tanh(gg[q]);   // eq 12
        cj[q] = gl[q] * cl[q] + gr[q] * cr[q] + gi[q] * gg[q];  // eq 5
      }
    }
    // the output gate's peephole on the new cell: W_co c_t (eq 11)
    gemm(Cs + a * hs, hs, 1, WcoT.data_ptr<float>(), P1, PO, P1, m, P1, hs);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = a + r;
      float* o = G + j * C + 4 * hs;
      const float* po = PO + r * P1;
      const float* cj = Cs + j * hs;
      float* t = T + j * hs;
      float* hj = H + j * hs;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) {
        o[q] = sigmoid_f(o[q] + po[q]);  // eq 11 (o)
        t[q] = teng_tanh(cj[q]);
        hj[q] = o[q] * t[q];  // eq 1
      }
    }
  }
}

// Backward, top-down. dh, dc (N+1, h): dL/dh, dL/dc of the outputs on entry; the children's
// terms are added level by level. dgates (N, 5h): d pre-activations i, fl, fr, g, o.
void teng_lex_backward(const Tensor& dgates, const Tensor& dh, const Tensor& dc,
                       const Tensor& gates, const Tensor& c, const Tensor& tc,
                       const Tensor& slots, at::IntArrayRef off, const Tensor& U_h,
                       const Tensor& U_c, const Tensor& W_co) {
  check_lex(dgates, dh, slots, off, U_h, U_c, W_co);
  TORCH_CHECK(dc.is_contiguous() && gates.is_contiguous() && c.is_contiguous() &&
                  tc.is_contiguous() && gates.sizes() == dgates.sizes(),
              "teng_lex: backward buffers must match the forward's");
  const int64_t hs = dh.size(1), C = 5 * hs;
  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  if (num_levels == 0) return;
  float* DG = dgates.data_ptr<float>();
  float* DH = dh.data_ptr<float>();
  float* DC = dc.data_ptr<float>();
  const float* G = gates.data_ptr<float>();
  const float* Cs = c.data_ptr<float>();
  const float* T = tc.data_ptr<float>();
  const int64_t* S = slots.data_ptr<int64_t>();
  const Tensor Uhp = padded_operand(U_h);    // (5h, Q2)
  const Tensor Ucp = padded_operand(U_c);    // (3h, Q2)
  const Tensor Wcop = padded_operand(W_co);  // (h, P1)
  const int64_t Q2 = Uhp.size(1), P1 = Wcop.size(1);
  const int64_t rows = max_level_rows(off);
  Tensor e1 = at::empty({rows, P1}, dh.options());
  Tensor dhs = at::empty({rows, Q2}, dh.options()), dcs = at::empty({rows, Q2}, dh.options());
  float *E = e1.data_ptr<float>(), *DHS = dhs.data_ptr<float>(), *DCS = dcs.data_ptr<float>();

  for (int64_t lvl = num_levels - 1; lvl >= 0; --lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    for (int64_t r = 0; r < m; ++r) {  // d pre_o (eqs 1, 11)
      const int64_t j = a + r;
      const float* o = G + j * C + 4 * hs;
      const float* t = T + j * hs;
      const float* dhj = DH + j * hs;
      float* dpo = DG + j * C + 4 * hs;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) dpo[q] = dhj[q] * t[q] * o[q] * (1.0f - o[q]);
    }
    // peephole W_co c_t -> c_t: (m, h) @ (h, P1)
    gemm(DG + a * C + 4 * hs, C, 1, Wcop.data_ptr<float>(), P1, E, P1, m, P1, hs);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = a + r;
      const float* g = G + j * C;
      const float *gi = g, *gl = g + hs, *gr = g + 2 * hs, *gg = g + 3 * hs, *o = g + 4 * hs;
      const float* t = T + j * hs;
      const float* dhj = DH + j * hs;
      const float* e = E + r * P1;
      const float* cl = Cs + S[2 * j] * hs;
      const float* cr = Cs + S[2 * j + 1] * hs;
      float* dcl = DC + S[2 * j] * hs;
      float* dcr = DC + S[2 * j + 1] * hs;
      float* dcj = DC + j * hs;
      float* dg = DG + j * C;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) {
        dcj[q] += dhj[q] * o[q] * (1.0f - t[q] * t[q]) + e[q];  // dL/dc_t (eqs 1, 11)
        dg[q] = dcj[q] * gg[q] * gi[q] * (1.0f - gi[q]);                  // d pre_i (eq 5)
        dg[hs + q] = dcj[q] * cl[q] * gl[q] * (1.0f - gl[q]);             // d pre_fl
        dg[2 * hs + q] = dcj[q] * cr[q] * gr[q] * (1.0f - gr[q]);         // d pre_fr
        dg[3 * hs + q] = dcj[q] * gi[q] * (1.0f - gg[q] * gg[q]);         // d pre_g
        dcl[q] += dcj[q] * gl[q];                                         // eq 5 -> c^L
        dcr[q] += dcj[q] * gr[q];                                         // eq 5 -> c^R
      }
    }
    if (lvl == 0) break;
    // eqs 11-12 -> [h^L; h^R] and [c^L; c^R]: (m, 5h) @ (5h, Q2), (m, 3h) @ (3h, Q2)
    gemm(DG + a * C, C, 1, Uhp.data_ptr<float>(), Q2, DHS, Q2, m, Q2, 5 * hs);
    gemm(DG + a * C, C, 1, Ucp.data_ptr<float>(), Q2, DCS, Q2, m, Q2, 3 * hs);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t k = S[(a + r) * 2 + s];
        float* dhk = DH + k * hs;
        float* dck = DC + k * hs;
        const float* sh = DHS + r * Q2 + s * hs;
        const float* sc = DCS + r * Q2 + s * hs;
#pragma omp simd
        for (int64_t q = 0; q < hs; ++q) {
          dhk[q] += sh[q];
          dck[q] += sc[q];
        }
      }
  }
}

// ================================================================ top-down cell (eqs 14-15)
void check_topdown(const Tensor& rows, const Tensor& h, const Tensor& parent, const Tensor& side,
                   at::IntArrayRef off, const Tensor& U_h, const Tensor& U_c,
                   const Tensor& W_co) {
  const int64_t n = parent.size(0), hs = h.size(1);
  check_common("teng_topdown", rows, h, n, off);
  check_index("teng_topdown", parent, n, 0);
  check_index("teng_topdown", side, n, 0);
  TORCH_CHECK(rows.size(1) == 4 * hs && U_h.size(0) == 4 * hs && U_h.size(1) == 2 * hs &&
                  U_c.size(0) == 2 * hs && U_c.size(1) == 2 * hs && W_co.dim() == 3 &&
                  W_co.size(0) == 2 && W_co.size(1) == hs && W_co.size(2) == hs,
              "teng_topdown: U_h (4h, 2h), U_c (2h, 2h), W_co (2, h, h), rows (N, 4h) expected");
}

// The level's local rows sorted by side (stable): idx[0:mL] side L, idx[mL:m] side R.
int64_t by_side(const int64_t* side, int64_t a, int64_t m, std::vector<int64_t>& idx) {
  int64_t k = 0;
  for (int64_t r = 0; r < m; ++r)
    if (side[a + r] == 0) idx[k++] = a + r;
  const int64_t mL = k;
  for (int64_t r = 0; r < m; ++r)
    if (side[a + r] != 0) idx[k++] = a + r;
  return mL;
}

// Forward, top-down (eqs 14-15). Writes gates (activated), h, c, tc.
void teng_topdown_forward(const Tensor& xt, const Tensor& gates, const Tensor& h,
                          const Tensor& c, const Tensor& tc, const Tensor& parent,
                          const Tensor& side, at::IntArrayRef off, const Tensor& U_h,
                          const Tensor& U_c, const Tensor& W_co) {
  check_topdown(xt, h, parent, side, off, U_h, U_c, W_co);
  TORCH_CHECK(gates.is_contiguous() && c.is_contiguous() && tc.is_contiguous(),
              "teng_topdown: contiguous buffers expected");
  const int64_t hs = h.size(1), C = 4 * hs;
  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  if (num_levels == 0) return;
  const float* XT = xt.data_ptr<float>();
  float* G = gates.data_ptr<float>();
  float* H = h.data_ptr<float>();
  float* Cs = c.data_ptr<float>();
  float* T = tc.data_ptr<float>();
  const int64_t* PAR = parent.data_ptr<int64_t>();
  const int64_t* SIDE = side.data_ptr<int64_t>();
  Tensor UhT[2], UcT[2], WcoT[2];  // per side N: (W_h*^N)^T (h, P4), (W_c*^N)^T, (W_co^N)^T
  for (int64_t s = 0; s < 2; ++s) {
    UhT[s] = padded_operand(U_h.narrow(1, s * hs, hs).t());
    UcT[s] = padded_operand(U_c.narrow(1, s * hs, hs).t());
    WcoT[s] = padded_operand(W_co.select(0, s).t());
  }
  const int64_t P4 = UhT[0].size(1), P2 = UcT[0].size(1), P1 = WcoT[0].size(1);
  const int64_t rows = max_level_rows(off);
  auto opt = xt.options();
  Tensor hp = at::empty({rows, hs}, opt), cp = at::empty({rows, hs}, opt);
  Tensor cb = at::empty({rows, hs}, opt);
  Tensor p4 = at::empty({rows, P4}, opt), p2 = at::empty({rows, P2}, opt);
  Tensor p1 = at::empty({rows, P1}, opt);
  float *HP = hp.data_ptr<float>(), *CP = cp.data_ptr<float>(), *CB = cb.data_ptr<float>();
  float *PH = p4.data_ptr<float>(), *PC = p2.data_ptr<float>(), *PO = p1.data_ptr<float>();
  std::vector<int64_t> idx(rows);

  for (int64_t lvl = 0; lvl < num_levels; ++lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    const int64_t mL = by_side(SIDE, a, m, idx);
    const int64_t r0[2] = {0, mL}, ms[2] = {mL, m - mL};
    if (lvl > 0) {  // W_h*^N h_{t-1}, W_c*^N c_{t-1} with the node's side N
      for (int64_t r = 0; r < m; ++r) {
        const int64_t p = PAR[idx[r]];
        std::memcpy(HP + r * hs, H + p * hs, hs * sizeof(float));
        std::memcpy(CP + r * hs, Cs + p * hs, hs * sizeof(float));
      }
      for (int64_t s = 0; s < 2; ++s) {
        if (ms[s] == 0) continue;
        gemm(HP + r0[s] * hs, hs, 1, UhT[s].data_ptr<float>(), P4, PH + r0[s] * P4, P4, ms[s],
             P4, hs);
        gemm(CP + r0[s] * hs, hs, 1, UcT[s].data_ptr<float>(), P2, PC + r0[s] * P2, P2, ms[s],
             P2, hs);
      }
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = idx[r];
      float* g = G + j * C;
      const float* x = XT + j * C;
      if (lvl > 0) {
        const float* ph = PH + r * P4;
        const float* pc = PC + r * P2;
#pragma omp simd
        for (int64_t q = 0; q < 2 * hs; ++q) g[q] = x[q] + (ph[q] + pc[q]);
#pragma omp simd
        for (int64_t q = 2 * hs; q < C; ++q) g[q] = x[q] + ph[q];
      } else {  // roots: no predecessor
        std::memcpy(g, x, C * sizeof(float));
      }
      const float* cprev = Cs + PAR[j] * hs;
      float* cj = Cs + j * hs;
      float* cbr = CB + r * hs;
      float *gi = g, *gf = g + hs, *gg = g + 2 * hs;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) {
        gi[q] = sigmoid_f(gi[q]);  // eq 15 (i)
        gf[q] = sigmoid_f(gf[q]);  // eq 15 (f)
        gg[q] = teng_tanh(gg[q]);  // eq 14 (g)
        cj[q] = gf[q] * cprev[q] + gi[q] * gg[q];  // eq 14 (c)
        cbr[q] = cj[q];
      }
    }
    for (int64_t s = 0; s < 2; ++s) {  // W_co^N c_t (eq 15)
      if (ms[s] == 0) continue;
      gemm(CB + r0[s] * hs, hs, 1, WcoT[s].data_ptr<float>(), P1, PO + r0[s] * P1, P1, ms[s], P1,
           hs);
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = idx[r];
      float* o = G + j * C + 3 * hs;
      const float* po = PO + r * P1;
      const float* cj = Cs + j * hs;
      float* t = T + j * hs;
      float* hj = H + j * hs;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) {
        o[q] = sigmoid_f(o[q] + po[q]);  // eq 15 (o)
        t[q] = teng_tanh(cj[q]);
        hj[q] = o[q] * t[q];  // eq 14 (h)
      }
    }
  }
}

// Backward, bottom-up over the down levels (deepest first). dh, dc (N+1, h) as for the lex
// cell, the parent receiving each child's terms; dgates (N, 4h): d pre-activations i, f, g, o.
void teng_topdown_backward(const Tensor& dgates, const Tensor& dh, const Tensor& dc,
                           const Tensor& gates, const Tensor& c, const Tensor& tc,
                           const Tensor& parent, const Tensor& side, at::IntArrayRef off,
                           const Tensor& U_h, const Tensor& U_c, const Tensor& W_co) {
  check_topdown(dgates, dh, parent, side, off, U_h, U_c, W_co);
  TORCH_CHECK(dc.is_contiguous() && gates.is_contiguous() && c.is_contiguous() &&
                  tc.is_contiguous() && gates.sizes() == dgates.sizes(),
              "teng_topdown: backward buffers must match the forward's");
  const int64_t hs = dh.size(1), C = 4 * hs;
  const int64_t num_levels = static_cast<int64_t>(off.size()) - 1;
  if (num_levels == 0) return;
  float* DG = dgates.data_ptr<float>();
  float* DH = dh.data_ptr<float>();
  float* DC = dc.data_ptr<float>();
  const float* G = gates.data_ptr<float>();
  const float* Cs = c.data_ptr<float>();
  const float* T = tc.data_ptr<float>();
  const int64_t* PAR = parent.data_ptr<int64_t>();
  const int64_t* SIDE = side.data_ptr<int64_t>();
  Tensor Uhp[2], Ucp[2], Wcop[2];  // per side: W_h*^N (4h, P1), W_c*^N (2h, P1), W_co^N
  for (int64_t s = 0; s < 2; ++s) {
    Uhp[s] = padded_operand(U_h.narrow(1, s * hs, hs));
    Ucp[s] = padded_operand(U_c.narrow(1, s * hs, hs));
    Wcop[s] = padded_operand(W_co.select(0, s));
  }
  const int64_t P1 = Uhp[0].size(1);
  const int64_t rows = max_level_rows(off);
  auto opt = dh.options();
  Tensor dpo = at::empty({rows, hs}, opt), e1 = at::empty({rows, P1}, opt);
  Tensor dgb = at::empty({rows, C}, opt);
  Tensor dhp = at::empty({rows, P1}, opt), dcp = at::empty({rows, P1}, opt);
  float *DPO = dpo.data_ptr<float>(), *E = e1.data_ptr<float>(), *DGB = dgb.data_ptr<float>();
  float *DHP = dhp.data_ptr<float>(), *DCP = dcp.data_ptr<float>();
  std::vector<int64_t> idx(rows);

  for (int64_t lvl = num_levels - 1; lvl >= 0; --lvl) {
    const int64_t a = off[lvl], m = off[lvl + 1] - a;
    const int64_t mL = by_side(SIDE, a, m, idx);
    const int64_t r0[2] = {0, mL}, ms[2] = {mL, m - mL};
    for (int64_t r = 0; r < m; ++r) {  // d pre_o (eqs 14-15)
      const int64_t j = idx[r];
      const float* o = G + j * C + 3 * hs;
      const float* t = T + j * hs;
      const float* dhj = DH + j * hs;
      float* d = DPO + r * hs;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) d[q] = dhj[q] * t[q] * o[q] * (1.0f - o[q]);
    }
    for (int64_t s = 0; s < 2; ++s) {  // W_co^N c_t -> c_t
      if (ms[s] == 0) continue;
      gemm(DPO + r0[s] * hs, hs, 1, Wcop[s].data_ptr<float>(), P1, E + r0[s] * P1, P1, ms[s], P1,
           hs);
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t j = idx[r];
      const float* g = G + j * C;
      const float *gi = g, *gf = g + hs, *gg = g + 2 * hs, *o = g + 3 * hs;
      const float* t = T + j * hs;
      const float* dhj = DH + j * hs;
      const float* e = E + r * P1;
      const float* cprev = Cs + PAR[j] * hs;
      float* dcprev = DC + PAR[j] * hs;
      float* dcj = DC + j * hs;
      float* dg = DG + j * C;
      float* db = DGB + r * C;
      const float* d = DPO + r * hs;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) {
        dcj[q] += dhj[q] * o[q] * (1.0f - t[q] * t[q]) + e[q];  // dL/dc_t
        const float di = dcj[q] * gg[q] * gi[q] * (1.0f - gi[q]);
        const float df = dcj[q] * cprev[q] * gf[q] * (1.0f - gf[q]);
        const float dgg = dcj[q] * gi[q] * (1.0f - gg[q] * gg[q]);
        dg[q] = db[q] = di;
        dg[hs + q] = db[hs + q] = df;
        dg[2 * hs + q] = db[2 * hs + q] = dgg;
        dg[3 * hs + q] = db[3 * hs + q] = d[q];
        dcprev[q] += dcj[q] * gf[q];  // eq 14 -> c_{t-1}
      }
    }
    if (lvl == 0) break;
    for (int64_t s = 0; s < 2; ++s) {  // eqs 14-15 -> h_{t-1}, c_{t-1}
      if (ms[s] == 0) continue;
      gemm(DGB + r0[s] * C, C, 1, Uhp[s].data_ptr<float>(), P1, DHP + r0[s] * P1, P1, ms[s], P1,
           4 * hs);
      gemm(DGB + r0[s] * C, C, 1, Ucp[s].data_ptr<float>(), P1, DCP + r0[s] * P1, P1, ms[s], P1,
           2 * hs);
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t p = PAR[idx[r]];
      float* dhk = DH + p * hs;
      float* dck = DC + p * hs;
      const float* sh = DHP + r * P1;
      const float* sc = DCP + r * P1;
#pragma omp simd
      for (int64_t q = 0; q < hs; ++q) {
        dhk[q] += sh[q];
        dck[q] += sc[q];
      }
    }
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnn_treelstm, m) {
  m.def(
      "teng_head_forward(Tensor(a!) x, Tensor(b!) z, Tensor slots, int[] offsets, int mode, "
      "Tensor Wz, Tensor bz) -> ()");
  m.def(
      "teng_head_backward(Tensor(a!) dx, Tensor(b!) dpre, Tensor x, Tensor z, Tensor slots, "
      "int[] offsets, int mode, Tensor Wz) -> ()");
  m.def(
      "teng_lex_forward(Tensor xt, Tensor(a!) gates, Tensor(b!) h, Tensor(c!) c, "
      "Tensor(d!) tc, Tensor slots, int[] offsets, Tensor U_h, Tensor U_c, Tensor W_co) -> ()");
  m.def(
      "teng_lex_backward(Tensor(a!) dgates, Tensor(b!) dh, Tensor(c!) dc, Tensor gates, "
      "Tensor c, Tensor tc, Tensor slots, int[] offsets, Tensor U_h, Tensor U_c, "
      "Tensor W_co) -> ()");
  m.def(
      "teng_topdown_forward(Tensor xt, Tensor(a!) gates, Tensor(b!) h, Tensor(c!) c, "
      "Tensor(d!) tc, Tensor parent, Tensor side, int[] offsets, Tensor U_h, Tensor U_c, "
      "Tensor W_co) -> ()");
  m.def(
      "teng_topdown_backward(Tensor(a!) dgates, Tensor(b!) dh, Tensor(c!) dc, Tensor gates, "
      "Tensor c, Tensor tc, Tensor parent, Tensor side, int[] offsets, Tensor U_h, "
      "Tensor U_c, Tensor W_co) -> ()");
}

// CPU kernels (the schemas above have no composite kernel, so torch.library.register_fake
// can describe them for torch.compile).
TORCH_LIBRARY_IMPL(gnn_treelstm, CPU, m) {
  m.impl("teng_head_forward", &teng_head_forward);
  m.impl("teng_head_backward", &teng_head_backward);
  m.impl("teng_lex_forward", &teng_lex_forward);
  m.impl("teng_lex_backward", &teng_lex_backward);
  m.impl("teng_topdown_forward", &teng_topdown_forward);
  m.impl("teng_topdown_backward", &teng_topdown_backward);
}
