// The reference GPT's layers: each a pair of plain forward and backward
// functions over arrays of one example (one sequence), in the manner of llm.c's
// train_gpt2.c. Convention: T time (sequence length), C channels, OC output
// channels, V vocabulary, NH heads, hs = C/NH head size. Arguments are outputs
// first, then inputs, then dimensions; each array's shape is written beside it.
//
// Templated on the scalar S so the same code runs in float (training) and in
// double (finite-difference gradient checks). Backward functions ACCUMULATE
// (+=) into their gradient outputs, so a tensor used twice (the tied token
// embedding, the residual stream) collects both contributions; the caller
// zeroes the example's gradient buffers first. Every sum runs in one fixed,
// documented order (docs/model.md), so results never depend on threads, and
// every product that is added to something is one fma (model/numerics.h:
// Fma(a, b, c) = round(a * b + c); the double path keeps a * b + c).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <type_traits>
#include <vector>

#include "model/det_math.h"
#include "model/matmul.h"

namespace dgrr::model {

inline constexpr double kLayerNormEps = 1e-5;

// ---------------------------------------------------------------- embeddings
template <typename S>
void EncoderForward(S* out,              // [T,C]
                    const uint8_t* tokens,  // [T]
                    const S* wte,        // [V,C]
                    const S* wpe,        // [maxT,C]
                    int T, int C) {
  for (int t = 0; t < T; ++t) {
    const S* tok = wte + static_cast<size_t>(tokens[t]) * C;
    const S* pos = wpe + static_cast<size_t>(t) * C;
    for (int c = 0; c < C; ++c) out[t * C + c] = tok[c] + pos[c];
  }
}

template <typename S>
void EncoderBackward(S* dwte,               // [V,C] accumulated
                     S* dwpe,               // [maxT,C] accumulated
                     const S* dout,         // [T,C]
                     const uint8_t* tokens, // [T]
                     int T, int C) {
  for (int t = 0; t < T; ++t) {  // ascending t: a token seen twice sums in time order
    S* dtok = dwte + static_cast<size_t>(tokens[t]) * C;
    S* dpos = dwpe + static_cast<size_t>(t) * C;
    for (int c = 0; c < C; ++c) {
      dtok[c] += dout[t * C + c];
      dpos[c] += dout[t * C + c];
    }
  }
}

// ---------------------------------------------------------------- layernorm
// Each row's sums run over c ascending in one chain; kLayerNormRows rows run
// side by side (their chains interleaved, each still in its own order), so
// the adds' latency overlaps instead of bounding the loop. The same bits as
// one row at a time.
inline constexpr int kLayerNormRows = 8;

template <int R, typename S>
[[gnu::always_inline]] inline void LayerNormForwardRows(S* out, S* mean, S* rstd, const S* inp,
                                                        const S* weight, const S* bias, int C) {
  S sum[R], sq[R], m[R], s[R];
DGRR_UNROLL_8
  for (int r = 0; r < R; ++r) sum[r] = sq[r] = 0;
  for (int c = 0; c < C; ++c) {
DGRR_UNROLL_8
    for (int r = 0; r < R; ++r) sum[r] += inp[r * C + c];
  }
DGRR_UNROLL_8
  for (int r = 0; r < R; ++r) m[r] = sum[r] / static_cast<S>(C);
  for (int c = 0; c < C; ++c) {
DGRR_UNROLL_8
    for (int r = 0; r < R; ++r) {
      const S d = inp[r * C + c] - m[r];
      sq[r] = Fma(d, d, sq[r]);
    }
  }
DGRR_UNROLL_8
  for (int r = 0; r < R; ++r) s[r] = S(1) / Sqrt(sq[r] / static_cast<S>(C) + static_cast<S>(kLayerNormEps));
  for (int r = 0; r < R; ++r) {
    const S* x = inp + r * C;
    for (int c = 0; c < C; ++c) out[r * C + c] = Fma((x[c] - m[r]) * s[r], weight[c], bias[c]);
    mean[r] = m[r];
    rstd[r] = s[r];
  }
}

template <typename S>
void LayerNormForward(S* out,        // [T,C]
                      S* mean,       // [T]
                      S* rstd,       // [T]
                      const S* inp,  // [T,C]
                      const S* weight, const S* bias,  // [C], [C]
                      int T, int C) {
  int t = 0;
  for (; t + kLayerNormRows <= T; t += kLayerNormRows) {
    LayerNormForwardRows<kLayerNormRows>(out + t * C, mean + t, rstd + t, inp + t * C, weight, bias, C);
  }
  for (; t < T; ++t) LayerNormForwardRows<1>(out + t * C, mean + t, rstd + t, inp + t * C, weight, bias, C);
}

// One row's elementwise backward; the scalars arrive by value. The three
// outputs are different buffers (an input gradient, a parameter's weight and
// bias gradients) and none is an input: __restrict lets the loop vectorise.
template <typename S>
[[gnu::always_inline]] inline void LayerNormBackwardRowElements(S* __restrict dx, S* __restrict dweight, S* __restrict dbias, const S* x,
                                                                const S* dy, const S* weight, const S mr,
                                                                const S sr, const S dm, const S dnm, int C) {
  for (int c = 0; c < C; ++c) {
    const S norm = (x[c] - mr) * sr;
    const S dnorm = weight[c] * dy[c];
    dbias[c] += dy[c];
    dweight[c] = Fma(norm, dy[c], dweight[c]);
    dx[c] = Fma(Fma(-norm, dnm, dnorm - dm), sr, dx[c]);
  }
}

// Rows [0, R) of the backward: the two reductions per row (mean of dnorm,
// mean of dnorm * norm, c ascending) side by side, then each row's
// elementwise part in ascending row order (dweight and dbias sum over rows
// ascending).
template <int R, typename S>
[[gnu::always_inline]] inline void LayerNormBackwardRows(S* dinp, S* dweight, S* dbias, const S* dout,
                                                         const S* inp, const S* weight, const S* mean,
                                                         const S* rstd, int C) {
  S dnorm_mean[R], dnorm_norm_mean[R];
DGRR_UNROLL_8
  for (int r = 0; r < R; ++r) dnorm_mean[r] = dnorm_norm_mean[r] = 0;
  for (int c = 0; c < C; ++c) {
DGRR_UNROLL_8
    for (int r = 0; r < R; ++r) {
      const S norm = (inp[r * C + c] - mean[r]) * rstd[r];
      const S dnorm = weight[c] * dout[r * C + c];
      dnorm_mean[r] += dnorm;
      dnorm_norm_mean[r] = Fma(dnorm, norm, dnorm_norm_mean[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    // The row's scalars in locals: a store through dx, dweight or dbias
    // cannot change them, so the loop below vectorises.
    const S dm = dnorm_mean[r] / static_cast<S>(C);
    const S dnm = dnorm_norm_mean[r] / static_cast<S>(C);
    const S mr = mean[r], sr = rstd[r];
    const S* x = inp + r * C;
    const S* dy = dout + r * C;
    S* dx = dinp + r * C;
    LayerNormBackwardRowElements(dx, dweight, dbias, x, dy, weight, mr, sr, dm, dnm, C);
  }
}

template <typename S>
void LayerNormBackward(S* dinp,          // [T,C] accumulated
                       S* dweight, S* dbias,  // [C], [C] accumulated
                       const S* dout,    // [T,C]
                       const S* inp,     // [T,C]
                       const S* weight,  // [C]
                       const S* mean, const S* rstd,  // [T], [T]
                       int T, int C) {
  int t = 0;
  for (; t + kLayerNormRows <= T; t += kLayerNormRows) {
    LayerNormBackwardRows<kLayerNormRows>(dinp + t * C, dweight, dbias, dout + t * C, inp + t * C, weight,
                                          mean + t, rstd + t, C);
  }
  for (; t < T; ++t) {
    LayerNormBackwardRows<1>(dinp + t * C, dweight, dbias, dout + t * C, inp + t * C, weight, mean + t,
                             rstd + t, C);
  }
}

// ---------------------------------------------------------------- matmul
// out = inp . weight + bias. The weight is stored [C,OC] (input-major) so the
// forward is one Gemm whose vector lanes run along OC. Per element:
// (sum over c ascending) + bias.
template <typename S>
void MatmulForward(S* out,           // [T,OC]
                   const S* inp,     // [T,C]
                   const S* weight,  // [C,OC]
                   const S* bias,    // [OC] or nullptr
                   int T, int C, int OC) {
  Gemm(out, inp, weight, T, C, OC, /*accumulate=*/false);
  if (bias == nullptr) return;
  for (int t = 0; t < T; ++t) {
    for (int o = 0; o < OC; ++o) out[t * OC + o] += bias[o];
  }
}

template <typename S>
void MatmulBackward(S* dinp,           // [T,C] accumulated
                    S* dweight,        // [C,OC] accumulated
                    S* dbias,          // [OC] accumulated, or nullptr
                    const S* dout,     // [T,OC]
                    const S* inp,      // [T,C]
                    const S* weight,   // [C,OC]
                    int T, int C, int OC) {
  // dinp += dout . weight^T  (sum over oc ascending)
  GemmTransB(dinp, dout, weight, T, OC, C, /*accumulate=*/true);
  // dweight += inp^T . dout  (sum over t ascending)
  GemmTransA(dweight, inp, dout, C, T, OC, /*accumulate=*/true);
  if (dbias == nullptr) return;
  for (int t = 0; t < T; ++t) {
    for (int o = 0; o < OC; ++o) dbias[o] += dout[t * OC + o];
  }
}

// ---------------------------------------------------------------- LM head
// logits = inp . wte^T: the head shares the token embedding [V,C].
template <typename S>
void LmHeadForward(S* logits,      // [T,V]
                   const S* inp,   // [T,C]
                   const S* wte,   // [V,C]
                   int T, int C, int V) {
  GemmTransB(logits, inp, wte, T, C, V, /*accumulate=*/false);
}

template <typename S>
void LmHeadBackward(S* dinp,          // [T,C] accumulated
                    S* dwte,          // [V,C] accumulated
                    const S* dlogits, // [T,V]
                    const S* inp,     // [T,C]
                    const S* wte,     // [V,C]
                    int T, int C, int V) {
  Gemm(dinp, dlogits, wte, T, V, C, /*accumulate=*/true);  // sum over v ascending
  GemmTransA(dwte, dlogits, inp, V, T, C, /*accumulate=*/true);  // sum over t ascending
}

// keep ? scaled : +0.0, as an AND of the bit pattern with an all-ones or
// all-zeros mask: no condition in the loop, so it vectorises at every width
// (a product the source computes only under a condition is not vectorised),
// with the same result bit for bit.
template <typename S>
S KeepOrZero(uint8_t keep, S scaled) {
  using Bits = std::conditional_t<sizeof(S) == 4, uint32_t, uint64_t>;
  const Bits mask = Bits(0) - static_cast<Bits>(keep != 0);
  return std::bit_cast<S>(std::bit_cast<Bits>(scaled) & mask);
}

// ---------------------------------------------------------------- attention
// Products whose left factor A is causal: c[m][n] = sum of A(m,k) * B(k,n)
// over the k a causal row m has, in ascending k, starting from +0.0 (c is
// written, not accumulated). A(m,k) = a[m*a_rs + k*a_cs], B(k,n) =
// b[k*b_rs + n], c[m*ldc + n]. Terms outside the triangle are never formed
// (not even as 0 * B, which would turn an infinite B into NaN). Rows go in
// blocks of kCausalRows: the rectangle of k that every row of a block has
// runs through the blocked Gemm; the triangle at the block's diagonal is a
// loop over k that continues each row's sum from the float the product
// stored, so every element sees exactly the ascending-k sum of the plain loop.
inline constexpr int kCausalRows = 16;

// c[n] += A(k) * B(k,n) for k in [k0, k1) ascending, over the columns from n0
// in chunks of W: a chunk's partial sums stay in registers across k instead
// of being stored and reloaded per term. Returns where the chunks stopped.
template <int W, typename S>
int CausalRowChunks(S* c, const S* a, std::ptrdiff_t a_cs, const S* b, std::ptrdiff_t b_rs,
                    int k0, int k1, int n0, int N) {
  for (; n0 + W <= N; n0 += W) {
    S acc[W];
    for (int j = 0; j < W; ++j) acc[j] = c[n0 + j];
    for (int k = k0; k < k1; ++k) {
      const S ak = a[k * a_cs];
      const S* bk = b + k * b_rs + n0;
      for (int j = 0; j < W; ++j) acc[j] = Fma(ak, bk[j], acc[j]);
    }
    for (int j = 0; j < W; ++j) c[n0 + j] = acc[j];
  }
  return n0;
}

// One row of a causal product's diagonal triangle: chunks of 32 columns,
// then 16, then single columns.
template <typename S>
void CausalRowTerms(S* c, const S* a, std::ptrdiff_t a_cs, const S* b, std::ptrdiff_t b_rs,
                    int k0, int k1, int N) {
  int n0 = CausalRowChunks<32>(c, a, a_cs, b, b_rs, k0, k1, 0, N);
  n0 = CausalRowChunks<16>(c, a, a_cs, b, b_rs, k0, k1, n0, N);
  CausalRowChunks<1>(c, a, a_cs, b, b_rs, k0, k1, n0, N);
}

// k <= m (a lower-triangular A: attention probabilities times values).
template <typename S>
void CausalProductLower(S* c, int ldc, const S* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_cs,
                        const S* b, std::ptrdiff_t b_rs, int T, int N) {
  for (int r0 = 0; r0 < T; r0 += kCausalRows) {
    const int r1 = std::min(T, r0 + kCausalRows);
    GemmStrided(c + static_cast<size_t>(r0) * ldc, ldc, a + r0 * a_rs, a_rs, a_cs, b, b_rs, 1,
                r1 - r0, r0, N, /*accumulate=*/false);  // k < r0
    for (int m = r0; m < r1; ++m) {  // k in [r0, m]
      CausalRowTerms(c + static_cast<size_t>(m) * ldc, a + m * a_rs, a_cs, b, b_rs, r0, m + 1, N);
    }
  }
}

// k >= m (an upper-triangular A: a causal matrix read transposed).
template <typename S>
void CausalProductUpper(S* c, int ldc, const S* a, std::ptrdiff_t a_rs, std::ptrdiff_t a_cs,
                        const S* b, std::ptrdiff_t b_rs, int T, int N) {
  for (int r0 = 0; r0 < T; r0 += kCausalRows) {
    const int r1 = std::min(T, r0 + kCausalRows);
    for (int m = r0; m < r1; ++m) {  // k in [m, r1)
      S* cm = c + static_cast<size_t>(m) * ldc;
      for (int n = 0; n < N; ++n) cm[n] = S(0);
      CausalRowTerms(cm, a + m * a_rs, a_cs, b, b_rs, m, r1, N);
    }
    GemmStrided(c + static_cast<size_t>(r0) * ldc, ldc, a + r0 * a_rs + r1 * a_cs, a_rs, a_cs,
                b + r1 * b_rs, b_rs, 1, r1 - r0, T - r1, N, /*accumulate=*/true);  // k >= r1
  }
}

// Causal multi-head self-attention over qkv = [q | k | v] per time step.
// preatt holds the scaled scores, att the softmax probabilities (zero above
// the diagonal); when dropout is active, att_used = att * keep * keep_scale is
// what multiplies v, otherwise att_used == att.
template <typename S>
void AttentionForward(S* out,              // [T,C]
                      S* preatt,           // [NH,T,T]
                      S* att,              // [NH,T,T]
                      S* att_dropped,      // [NH,T,T] or nullptr (no dropout)
                      const S* qkv,        // [T,3C]
                      const uint8_t* keep, // [NH,T,T] or nullptr
                      S keep_scale, int T, int C, int NH) {
  const int hs = C / NH;
  const S scale = S(1) / Sqrt(static_cast<S>(hs));
  const int C3 = 3 * C;
  for (int h = 0; h < NH; ++h) {
    // Every score q_t . k_t2 at once, lanes along t2 (each dot product still
    // sums i ascending from 0); only t2 <= t is used below.
    S* pre_head = preatt + static_cast<size_t>(h) * T * T;
    GemmStrided(pre_head, T, qkv + h * hs, C3, 1, qkv + C + h * hs, 1, C3, T, hs, T,
                /*accumulate=*/false);
    for (int t = 0; t < T; ++t) {
      S* pre_row = preatt + (static_cast<size_t>(h) * T + t) * T;
      S* att_row = att + (static_cast<size_t>(h) * T + t) * T;
      for (int t2 = 0; t2 <= t; ++t2) pre_row[t2] = pre_row[t2] * scale;
      S max_score = -INFINITY;
      for (int t2 = 0; t2 <= t; ++t2) {
        if (pre_row[t2] > max_score) max_score = pre_row[t2];
      }
      // The exponentials first (independent: they vectorise), then their
      // sum in ascending t2.
      for (int t2 = 0; t2 <= t; ++t2) att_row[t2] = Exp(pre_row[t2] - max_score);
      S denom = 0;
      for (int t2 = 0; t2 <= t; ++t2) denom += att_row[t2];
      for (int t2 = 0; t2 <= t; ++t2) att_row[t2] = att_row[t2] / denom;
      for (int t2 = t + 1; t2 < T; ++t2) pre_row[t2] = att_row[t2] = 0;
      if (att_dropped != nullptr) {
        S* drop_row = att_dropped + (static_cast<size_t>(h) * T + t) * T;
        const uint8_t* keep_row = keep + (static_cast<size_t>(h) * T + t) * T;
        for (int t2 = 0; t2 < T; ++t2) drop_row[t2] = KeepOrZero(keep_row[t2], att_row[t2] * keep_scale);
      }
    }
    // y_t = sum over t2 <= t ascending of att_used[t][t2] * v_t2.
    const S* used = (att_dropped != nullptr ? att_dropped : att) + static_cast<size_t>(h) * T * T;
    CausalProductLower(out + h * hs, C, used, T, 1, qkv + 2 * C + h * hs, C3, T, hs);
  }
}

// dqkv is written (every element of it: attention is its only contribution).
// datt is workspace: on return it holds d loss / d(q . k), dpreatt * scale.
template <typename S>
void AttentionBackward(S* dqkv,              // [T,3C] written
                       S* datt,              // [NH,T,T] workspace, see above
                       S* dpreatt,           // [NH,T,T] written: d loss / d preatt
                       const S* dout,        // [T,C]
                       const S* qkv,         // [T,3C]
                       const S* att,         // [NH,T,T]
                       const S* att_dropped, // [NH,T,T] or nullptr
                       const uint8_t* keep,  // [NH,T,T] or nullptr
                       S keep_scale, int T, int C, int NH) {
  const int hs = C / NH;
  const S scale = S(1) / Sqrt(static_cast<S>(hs));
  const int C3 = 3 * C;
  for (int h = 0; h < NH; ++h) {
    const size_t head = static_cast<size_t>(h) * T * T;
    // d loss / d att_used[t][t2] = dy_t . v_t2 for every pair at once (lanes
    // along t2, each sum over i ascending from 0); t2 > t is discarded.
    GemmStrided(datt + head, T, dout + h * hs, C, 1, qkv + 2 * C + h * hs, 1, C3, T, hs, T,
                /*accumulate=*/false);
    for (int t = 0; t < T; ++t) {
      const size_t row = head + static_cast<size_t>(t) * T;
      const S* att_row = att + row;
      S* datt_row = datt + row;
      S* dpre_row = dpreatt + row;
      if (keep != nullptr) {
        for (int t2 = 0; t2 <= t; ++t2) datt_row[t2] = KeepOrZero(keep[row + t2], datt_row[t2] * keep_scale);
      }
      // Through the softmax: dpre = att * (datt - sum(att * datt)).
      S weighted = 0;
      for (int t2 = 0; t2 <= t; ++t2) weighted = Fma(att_row[t2], datt_row[t2], weighted);
      for (int t2 = 0; t2 <= t; ++t2) dpre_row[t2] = att_row[t2] * (datt_row[t2] - weighted);
      for (int t2 = t + 1; t2 < T; ++t2) dpre_row[t2] = 0;
      // Through pre = scale * (q . k): the score gradient, kept in datt.
      for (int t2 = 0; t2 <= t; ++t2) datt_row[t2] = dpre_row[t2] * scale;
    }
    // Each sum in the order the per-pair loops used: dq_t over t2 <= t
    // ascending; dk_t2 and dv_t2 over t >= t2 ascending.
    const S* dscores = datt + head;
    const S* used = (att_dropped != nullptr ? att_dropped : att) + head;
    CausalProductLower(dqkv + h * hs, C3, dscores, T, 1, qkv + C + h * hs, C3, T, hs);
    CausalProductUpper(dqkv + C + h * hs, C3, dscores, 1, T, qkv + h * hs, C3, T, hs);
    CausalProductUpper(dqkv + 2 * C + h * hs, C3, used, 1, T, dout + h * hs, C, T, hs);
  }
}

// ---------------------------------------------------------------- GELU
// GeluAt and GeluGradAt, the element functions host loops and device
// kernels share, are in model/det_math.h.

template <typename S>
void GeluForward(S* out, const S* inp, size_t N) {  // out [N], inp [N]
  for (size_t i = 0; i < N; ++i) out[i] = GeluAt(inp[i]);
}

// The backward layers below add into their input gradients; with
// accumulate = false they write what adding into a zeroed buffer gives
// (0 + x, so a -0 comes out +0 exactly as it would), without the zeroing.
template <typename S>
void GeluBackward(S* dinp, const S* inp, const S* dout, size_t N,
                  bool accumulate = true) {  // dinp [N] accumulated
  if (!accumulate) {
    for (size_t i = 0; i < N; ++i) dinp[i] = Fma(GeluGradAt(inp[i]), dout[i], S(0));
    return;
  }
  for (size_t i = 0; i < N; ++i) dinp[i] = Fma(GeluGradAt(inp[i]), dout[i], dinp[i]);
}

// ---------------------------------------------------------------- residual, dropout
template <typename S>
void ResidualForward(S* out, const S* inp1, const S* inp2, size_t N) {  // all [N]
  for (size_t i = 0; i < N; ++i) out[i] = inp1[i] + inp2[i];
}

template <typename S>
void ResidualBackward(S* dinp1, S* dinp2, const S* dout, size_t N,
                      bool accumulate = true) {  // accumulated
  if (!accumulate) {
    for (size_t i = 0; i < N; ++i) {
      dinp1[i] = S(0) + dout[i];
      dinp2[i] = S(0) + dout[i];
    }
    return;
  }
  for (size_t i = 0; i < N; ++i) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}

// Inverted dropout: kept elements are scaled by keep_scale = 1/(1-p).
template <typename S>
void DropoutForward(S* out, const S* inp, const uint8_t* keep, S keep_scale, size_t N) {
  for (size_t i = 0; i < N; ++i) out[i] = KeepOrZero(keep[i], inp[i] * keep_scale);
}

template <typename S>
void DropoutBackward(S* dinp, const S* dout, const uint8_t* keep, S keep_scale, size_t N,
                     bool accumulate = true) {
  if (!accumulate) {
    for (size_t i = 0; i < N; ++i) dinp[i] = S(0) + KeepOrZero(keep[i], dout[i] * keep_scale);
    return;
  }
  for (size_t i = 0; i < N; ++i) dinp[i] += KeepOrZero(keep[i], dout[i] * keep_scale);
}

// ---------------------------------------------------------------- loss
// Softmax cross-entropy per position: losses[t] = logsumexp(logits[t]) - logits[t][target].
template <typename S>
void CrossEntropyForward(S* probs,         // [T,V]
                         S* losses,        // [T]
                         const S* logits,  // [T,V]
                         const uint8_t* targets,  // [T]
                         int T, int V) {
  for (int t = 0; t < T; ++t) {
    const S* row = logits + t * V;
    S* p = probs + t * V;
    S max_logit = row[0];
    for (int v = 1; v < V; ++v) max_logit = row[v] > max_logit ? row[v] : max_logit;
    for (int v = 0; v < V; ++v) p[v] = Exp(row[v] - max_logit);
    S denom = 0;
    for (int v = 0; v < V; ++v) denom += p[v];  // ascending v
    for (int v = 0; v < V; ++v) p[v] = p[v] / denom;
    losses[t] = Log(denom) - (row[targets[t]] - max_logit);
  }
}

// dlogits[t] += (probs[t] - onehot(target)) * dlosses[t].
template <typename S>
void CrossEntropyBackward(S* dlogits,      // [T,V] accumulated
                          const S* probs,  // [T,V]
                          const uint8_t* targets,  // [T]
                          const S* dlosses,  // [T]
                          int T, int V, bool accumulate = true) {
  for (int t = 0; t < T; ++t) {
    for (int v = 0; v < V; ++v) {
      const S indicator = v == targets[t] ? S(1) : S(0);
      const S into = accumulate ? dlogits[t * V + v] : S(0);
      dlogits[t * V + v] = Fma(probs[t * V + v] - indicator, dlosses[t], into);
    }
  }
}

}  // namespace dgrr::model
