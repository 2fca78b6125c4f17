// Shared pieces of the native level loops (nary_levels.cpp, childsum_levels.cpp): a float32
// exp / sigmoid that vectorises, and the level-sized matrix product. Built by
// gnn_treelstm/kernels/native.py together with the .cpp files of this directory.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace gnn_treelstm_native {

using at::Tensor;

// exp(x) for float32, Cephes' range reduction and polynomial (max error about 1 ulp on
// [-87, 88]); branch-free so that the loops below vectorize.
__attribute__((always_inline)) inline float exp_f(float x) {
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

__attribute__((always_inline)) inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

// ---------------------------------------------------------------- the LSTM node update
// Shared by Child-Sum (Tai et al. eqs 3, 5-8) and N-ary (eqs 9, 11-14); g holds the gate
// columns i, o, u (pre-activations in, activations out), the forget terms are the caller's.

// i, o = sigmoid, u = tanh (as 2 sigma(2z) - 1); c_j = i (.) u (eq 7 / 13 without the
// forget terms).
inline void activate_iou(float* g, float* cj, int64_t hs) {
  float* u = g + 2 * hs;
#pragma omp simd
  for (int64_t q = 0; q < 2 * hs; ++q) g[q] = sigmoid_f(g[q]);
#pragma omp simd
  for (int64_t q = 0; q < hs; ++q) {
    u[q] = 2.0f * sigmoid_f(2.0f * u[q]) - 1.0f;
    cj[q] = g[q] * u[q];
  }
}

// t = tanh(c_j) (kept for the backward), h_j = o (.) t (eq 8 / 14).
inline void output_h(const float* o, const float* cj, float* t, float* hj, int64_t hs) {
#pragma omp simd
  for (int64_t q = 0; q < hs; ++q) {
    t[q] = 2.0f * sigmoid_f(2.0f * cj[q]) - 1.0f;
    hj[q] = o[q] * t[q];
  }
}

// Backward of the two above: dcj += dL/dh_j through h_j (dL/dc_j is then complete), and the
// gradients of the pre-activations of i, o, u into dg[0:3h].
inline void iou_backward(const float* g, const float* t, const float* dhj, float* dcj,
                         float* dg, int64_t hs) {
  const float *i = g, *o = g + hs, *u = g + 2 * hs;
#pragma omp simd
  for (int64_t q = 0; q < hs; ++q) {
    dcj[q] += dhj[q] * o[q] * (1.0f - t[q] * t[q]);         // dL/dc_j
    dg[q] = dcj[q] * u[q] * i[q] * (1.0f - i[q]);           // d pre_i
    dg[hs + q] = dhj[q] * t[q] * o[q] * (1.0f - o[q]);      // d pre_o
    dg[2 * hs + q] = dcj[q] * i[q] * (1.0f - u[q] * u[q]);  // d pre_u
  }
}

// The same node update with or without the output gate: ``gated`` (columns i, o, u, as
// above) or not (columns i, u; Tai et al.'s relatedness models: no eq 5 / 11, and eq 8 / 14
// is h_j = tanh(c_j)).
inline void activate_gates(float* g, float* cj, int64_t hs, bool gated) {
  if (gated) {
    activate_iou(g, cj, hs);
    return;
  }
  float* u = g + hs;
#pragma omp simd
  for (int64_t q = 0; q < hs; ++q) {
    g[q] = sigmoid_f(g[q]);
    u[q] = 2.0f * sigmoid_f(2.0f * u[q]) - 1.0f;
    cj[q] = g[q] * u[q];
  }
}

// t = tanh(c_j), h_j = o (.) t (gated; o at g + hs) or h_j = t.
inline void output_state(const float* g, const float* cj, float* t, float* hj, int64_t hs,
                         bool gated) {
  if (gated) {
    output_h(g + hs, cj, t, hj, hs);
    return;
  }
#pragma omp simd
  for (int64_t q = 0; q < hs; ++q) {
    t[q] = 2.0f * sigmoid_f(2.0f * cj[q]) - 1.0f;
    hj[q] = t[q];
  }
}

// Backward of activate_gates + output_state (as iou_backward; without o: dg[0:2h] = d pre_i,
// d pre_u).
inline void gates_backward(const float* g, const float* t, const float* dhj, float* dcj,
                           float* dg, int64_t hs, bool gated) {
  if (gated) {
    iou_backward(g, t, dhj, dcj, dg, hs);
    return;
  }
  const float *i = g, *u = g + hs;
#pragma omp simd
  for (int64_t q = 0; q < hs; ++q) {
    dcj[q] += dhj[q] * (1.0f - t[q] * t[q]);           // dL/dc_j
    dg[q] = dcj[q] * u[q] * i[q] * (1.0f - i[q]);      // d pre_i
    dg[hs + q] = dcj[q] * i[q] * (1.0f - u[q] * u[q]);  // d pre_u
  }
}

// The most nodes (or edges) of any level from `first` on, at least 1: the rows of a
// per-level scratch buffer.
inline int64_t max_level_rows(at::IntArrayRef off, size_t first = 0) {
  int64_t rows = 1;
  for (size_t l = first; l + 1 < off.size(); ++l) rows = std::max(rows, off[l + 1] - off[l]);
  return rows;
}

// ---------------------------------------------------------------- level-sized products
// C (m, n) = A (m, k) @ B (k, n), row-major, n a multiple of 64 (B is zero-padded), m small
// (one level). A register-blocked kernel written with GCC vector types: a block of 6 rows
// times kVecs vectors of accumulators, sized to the vector registers the build targets
// (-march=native): AVX-512's 32 registers hold 6 x 4 vectors of 16 floats (64 columns),
// AVX2's 16 hold 6 x 2 of 8 (16 columns), SSE's 16 hold 6 x 2 of 4 (8 columns); a 64-column
// tile is swept in 64 / kSub passes. Each output element sums its k products in order
// p = 0, 1, ..., k - 1 whatever the blocking. The column tiles are split over the intra-op
// threads. At level sizes it beats oneDNN's packed products (no per-call dispatch, no weight
// packing; e.g. 7 us against 19 us for 2 x 300 @ 300 x 750 on two AVX-512 cores).
#if defined(__AVX512F__)
constexpr int kLanes = 16, kVecs = 4;
#elif defined(__AVX__)
constexpr int kLanes = 8, kVecs = 2;
#else
constexpr int kLanes = 4, kVecs = 2;
#endif
// loads and stores go through this type (unaligned, may alias float): a memcpy into a vector
// compiles on some targets to narrower moves through the stack, which stall the loop
typedef float vec __attribute__((vector_size(4 * kLanes), aligned(4), may_alias));
constexpr int64_t kTile = 64;
constexpr int64_t kSub = kLanes * kVecs;  // columns of one pass
static_assert(kTile % kSub == 0, "a tile is a whole number of passes");

template <int R>
inline void tile_kernel(const float* A, int64_t sar, int64_t sap, const float* B, int64_t ldb,
                        float* C, int64_t ldc, int64_t k) {
  for (int64_t s = 0; s < kTile; s += kSub) {
    vec acc[R][kVecs];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kVecs; ++v) acc[r][v] = vec{};
    for (int64_t p = 0; p < k; ++p) {
      const float* b = B + p * ldb + s;
      vec bv[kVecs];
      for (int v = 0; v < kVecs; ++v) bv[v] = *reinterpret_cast<const vec*>(b + kLanes * v);
      for (int r = 0; r < R; ++r) {
        const float a = A[r * sar + p * sap];
        for (int v = 0; v < kVecs; ++v) acc[r][v] += a * bv[v];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kVecs; ++v)
        *reinterpret_cast<vec*>(C + r * ldc + s + kLanes * v) = acc[r][v];
  }
}

// C (m, n) = A (m, k) @ B (k, n): A[r, p] at A + r * sar + p * sap (row-major: sar = lda,
// sap = 1; a transposed view: sar = 1, sap = lda), B row-major with n % 64 == 0, C row-major.
// Tasks are (column tile, block of 6 rows) pairs, tile-major, split over the threads.
// Tasks t0..t1 of gemm below (task = column tile * blocks + block of 6 rows).
inline void gemm_tasks(const float* A, int64_t sar, int64_t sap, const float* B, int64_t ldb,
                       float* C, int64_t ldc, int64_t m, int64_t k, int64_t t0, int64_t t1) {
  const int64_t blocks = (m + 5) / 6;
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
}

inline void gemm(const float* A, int64_t sar, int64_t sap, const float* B, int64_t ldb, float* C,
          int64_t ldc, int64_t m, int64_t n, int64_t k) {
  const int64_t tiles = n / kTile, blocks = (m + 5) / 6, tasks = tiles * blocks;
  const int64_t grain = std::max<int64_t>(1, tasks / std::max(1, at::get_num_threads()));
  at::parallel_for(0, tasks, grain, [&](int64_t t0, int64_t t1) {
    gemm_tasks(A, sar, sap, B, ldb, C, ldc, m, k, t0, t1);
  });
}

// gemm on the calling thread only: for many tiny products in a row (a parallel region each
// would cost more than the product, and far more on a loaded machine).
inline void gemm_serial(const float* A, int64_t sar, int64_t sap, const float* B, int64_t ldb,
                        float* C, int64_t ldc, int64_t m, int64_t n, int64_t k) {
  gemm_tasks(A, sar, sap, B, ldb, C, ldc, m, k, 0, (n / kTile) * ((m + 5) / 6));
}

inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// The row-major (k, round_up(n, 64)) copy of the 2-D float32 tensor b (k, n) (any strides:
// a transposed view goes through ATen's blocked copy first), zero columns past n.
inline Tensor padded_operand(const Tensor& b) {
  const int64_t k = b.size(0), n = b.size(1), np = round_up(n, kTile);
  const int64_t s0 = b.stride(0), s1 = b.stride(1);
  Tensor out = at::empty({k, np}, b.options().memory_format(at::MemoryFormat::Contiguous));
  const float* S = b.data_ptr<float>();
  float* O = out.data_ptr<float>();
  for (int64_t p = 0; p < k; ++p) std::memset(O + p * np + n, 0, (np - n) * sizeof(float));
  if (s1 != 1) {  // a transposed view (or any strides): ATen's blocked copy, then rows
    const Tensor bc = b.contiguous();
    const float* B = bc.data_ptr<float>();
    for (int64_t p = 0; p < k; ++p) std::memcpy(O + p * np, B + p * n, n * sizeof(float));
    return out;
  }
  for (int64_t p = 0; p < k; ++p) std::memcpy(O + p * np, S + p * s0, n * sizeof(float));
  return out;
}

// a @ b for 2-D float32 CPU tensors, a row-major (stride(1) == 1) or a transposed view of one
// (stride(0) == 1), b any strides -> (m, n) contiguous. The weight-gradient products of the
// N-ary kernel (a = dgates^T) then need no transposed copy of a.
inline Tensor matmul(const Tensor& a, const Tensor& b) {
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

}  // namespace gnn_treelstm_native
