// The reference model's device kernels, each written once as a DGRR_HD
// per-thread function of its grid coordinates, so that the CPU can run them
// (model/grid.h's emulator, `--device cuda-sim`) and nvcc can compile them
// into __global__ entry points (model/kernels_cuda.cu, `--device cuda`).
//
// Every launch is one-dimensional: thread g = blockIdx.x * blockDim.x +
// threadIdx.x computes ONE output element, or one row where the CPU layers
// (model/layers.h) compute a row in a fixed order, and returns when g is past
// the kernel's thread count. A thread runs the same sequence of float
// operations, in the same order, as the CPU code does for that element (each
// product term one fma, model/numerics.h; the element functions of
// model/det_math.h), so the results are bitwise the CPU's by construction;
// tests/model/kernels_test.cc checks each kernel against the CPU layer on
// random inputs and odd sizes. No kernel uses shared memory, barriers or
// atomics: no thread reads what another thread of the same launch writes.
//
// Pointers are the device's (on `cuda-sim`, host memory). Each kernel is a
// struct of its arguments with threads() (how many threads the launch needs)
// and At(g), the body of thread g.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/adamw_update.h"
#include "model/det_math.h"
#include "model/numerics.h"
#include "rng/philox_stream.h"
#include "rng/stream_id.h"

namespace dgrr::model::kernels {

// CUDA's dim3 and the coordinates one thread sees (blockIdx, threadIdx,
// blockDim, gridDim); only .x is used by these kernels.
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct ThreadCoords {
  Dim3 block_idx, thread_idx, block_dim, grid_dim;
};

// Threads per block of every launch.
inline constexpr unsigned kBlockThreads = 128;

DGRR_HD inline size_t GlobalThread(const ThreadCoords& c) {
  return static_cast<size_t>(c.block_idx.x) * c.block_dim.x + c.thread_idx.x;
}

// Runs kernel k's body for the thread at coordinates c (every launcher, host
// or device, calls this).
template <typename K>
DGRR_HD inline void RunThread(const K& k, const ThreadCoords& c) {
  const size_t g = GlobalThread(c);
  if (g < k.threads()) k.At(g);
}

// round(a * b + c) in double (the gradient norm's sum of squares).
DGRR_HD inline double FmaD(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return __builtin_fma(a, b, c);
#endif
}

// keep ? scaled : +0.0 on the bit pattern, as model/layers.h's KeepOrZero.
DGRR_HD inline float KeepOrZeroF(uint8_t keep, float scaled) {
  const uint32_t mask = 0u - static_cast<uint32_t>(keep != 0);
  return BitsFloat(FloatBits(scaled) & mask);
}

// A matrix inside a batch of matrices: element (m, k) of batch (b1, b2) is
// p[b1*bs1 + b2*bs2 + m*rs + k*cs].
template <typename P>
struct View {
  P* p = nullptr;
  ptrdiff_t rs = 0, cs = 1, bs1 = 0, bs2 = 0;
  DGRR_HD P* At(size_t b1, size_t b2, size_t m, size_t k) const {
    return p + static_cast<ptrdiff_t>(b1) * bs1 + static_cast<ptrdiff_t>(b2) * bs2 +
           static_cast<ptrdiff_t>(m) * rs + static_cast<ptrdiff_t>(k) * cs;
  }
};

// ------------------------------------------------------------------ products
// c(m,n) = (accumulate ? c(m,n) : +0.0) + A(m,0)B(0,n) + ... + A(m,K-1)B(K-1,n),
// left to right, each term one fma (model/matmul.h's contract), then + bias[n]
// where bias is given (model/layers.h MatmulForward: the product, then the
// bias added). Batched over nb1 x nb2 matrices. One thread per element.
struct GemmKernel {
  View<float> c;
  View<const float> a, b;
  const float* bias = nullptr;
  int M = 0, K = 0, N = 0;
  size_t nb1 = 1, nb2 = 1;
  bool accumulate = false;
  DGRR_HD size_t threads() const { return nb1 * nb2 * static_cast<size_t>(M) * N; }
  DGRR_HD void At(size_t g) const {
    const size_t n = g % N, m = (g / N) % M, q = g / (static_cast<size_t>(M) * N);
    const size_t b2 = q % nb2, b1 = q / nb2;
    float* out = c.At(b1, b2, m, n);
    const float* ap = a.At(b1, b2, m, 0);
    const float* bp = b.At(b1, b2, 0, n);
    float acc = accumulate ? *out : 0.0f;
    for (int k = 0; k < K; ++k) acc = Fma(ap[k * a.cs], bp[k * b.rs], acc);
    if (bias != nullptr) acc = acc + bias[n];
    *out = acc;
  }
};

// A causal product (model/layers.h CausalProductLower/Upper): c(m,n) = sum of
// A(m,k) B(k,n) over k <= m (lower) or k >= m (upper, k < T), ascending k,
// from +0.0, each term one fma; terms outside the triangle never formed.
struct CausalProductKernel {
  View<float> c;
  View<const float> a, b;
  int T = 0, N = 0;
  size_t nb1 = 1, nb2 = 1;
  bool lower = true;
  DGRR_HD size_t threads() const { return nb1 * nb2 * static_cast<size_t>(T) * N; }
  DGRR_HD void At(size_t g) const {
    const size_t n = g % N, m = (g / N) % T, q = g / (static_cast<size_t>(T) * N);
    const size_t b2 = q % nb2, b1 = q / nb2;
    const int k0 = lower ? 0 : static_cast<int>(m), k1 = lower ? static_cast<int>(m) + 1 : T;
    const float* ap = a.At(b1, b2, m, 0);
    const float* bp = b.At(b1, b2, 0, n);
    float acc = 0.0f;
    for (int k = k0; k < k1; ++k) acc = Fma(ap[k * a.cs], bp[k * b.rs], acc);
    *c.At(b1, b2, m, n) = acc;
  }
};

// dbias[o] of example e (at grad + e*grad_stride) += dout[t][o] over the
// example's t ascending. One thread per (e, o).
struct BiasGradKernel {
  float* dbias = nullptr;
  size_t grad_stride = 0;
  const float* dout = nullptr;  // [count*T, OC]
  int T = 0, OC = 0;
  size_t count = 0;
  DGRR_HD size_t threads() const { return count * OC; }
  DGRR_HD void At(size_t g) const {
    const size_t o = g % OC, e = g / OC;
    float* d = dbias + e * grad_stride + o;
    const float* dy = dout + e * T * static_cast<size_t>(OC) + o;
    float acc = *d;
    for (int t = 0; t < T; ++t) acc = acc + dy[static_cast<size_t>(t) * OC];
    *d = acc;
  }
};

// ------------------------------------------------------------------ embeddings
// out[r][c] = wte[token][c] + wpe[t][c], row r = e*T + t, token =
// tokens[e*(T+1) + t]. One thread per element.
struct EncoderForwardKernel {
  float* out = nullptr;
  const uint8_t* tokens = nullptr;
  const float *wte = nullptr, *wpe = nullptr;
  int T = 0, C = 0;
  size_t count = 0;
  DGRR_HD size_t threads() const { return count * T * static_cast<size_t>(C); }
  DGRR_HD void At(size_t g) const {
    const size_t c = g % C, r = g / C, t = r % T, e = r / T;
    const size_t token = tokens[e * (T + 1) + t];
    out[g] = wte[token * C + c] + wpe[t * C + c];
  }
};

// dwte[v][c] of example e += dout[t][c] for each t (ascending) whose token is
// v: one thread per (e, v, c), so a token seen twice sums in time order.
struct EncoderBackwardWteKernel {
  float* dwte = nullptr;  // example 0's; example e's at + e*grad_stride
  size_t grad_stride = 0;
  const float* dout = nullptr;  // [count*T, C]
  const uint8_t* tokens = nullptr;
  int T = 0, C = 0, V = 0;
  size_t count = 0;
  DGRR_HD size_t threads() const { return count * V * static_cast<size_t>(C); }
  DGRR_HD void At(size_t g) const {
    const size_t c = g % C, v = (g / C) % V, e = g / (static_cast<size_t>(C) * V);
    float* d = dwte + e * grad_stride + v * C + c;
    const uint8_t* tok = tokens + e * (T + 1);
    const float* dy = dout + e * T * static_cast<size_t>(C) + c;
    float acc = *d;
    for (int t = 0; t < T; ++t) {
      if (tok[t] == v) acc = acc + dy[static_cast<size_t>(t) * C];
    }
    *d = acc;
  }
};

// dwpe[t][c] of example e += dout[t][c]. One thread per element.
struct EncoderBackwardWpeKernel {
  float* dwpe = nullptr;
  size_t grad_stride = 0;
  const float* dout = nullptr;
  int T = 0, C = 0;
  size_t count = 0;
  DGRR_HD size_t threads() const { return count * T * static_cast<size_t>(C); }
  DGRR_HD void At(size_t g) const {
    const size_t tc = g % (static_cast<size_t>(T) * C), e = g / (static_cast<size_t>(T) * C);
    float* d = dwpe + e * grad_stride + tc;
    *d = *d + dout[g];
  }
};

// ------------------------------------------------------------------ layernorm
// One thread per row, the CPU's per-row sequence (LayerNormForwardRows): the
// sum over c ascending, the mean, the squares' fma chain, rstd, then each
// output fma((x - m) * s, w, b).
struct LayerNormForwardKernel {
  float *out = nullptr, *mean = nullptr, *rstd = nullptr;
  const float *inp = nullptr, *weight = nullptr, *bias = nullptr;
  size_t rows = 0;
  int C = 0;
  DGRR_HD size_t threads() const { return rows; }
  DGRR_HD void At(size_t r) const {
    const float* x = inp + r * C;
    float sum = 0.0f;
    for (int c = 0; c < C; ++c) sum = sum + x[c];
    const float m = sum / static_cast<float>(C);
    float sq = 0.0f;
    for (int c = 0; c < C; ++c) {
      const float d = x[c] - m;
      sq = Fma(d, d, sq);
    }
    const float s = 1.0f / Sqrt(sq / static_cast<float>(C) + static_cast<float>(1e-5));
    float* y = out + r * C;
    for (int c = 0; c < C; ++c) y[c] = Fma((x[c] - m) * s, weight[c], bias[c]);
    mean[r] = m;
    rstd[r] = s;
  }
};

// The input gradient, one thread per row: the row's two means (c ascending),
// then dx[c] += (dnorm - dm - norm * dnm) * rstd as the CPU's fma sequence.
struct LayerNormBackwardInputKernel {
  float* dinp = nullptr;  // accumulated
  const float *dout = nullptr, *inp = nullptr, *weight = nullptr, *mean = nullptr,
              *rstd = nullptr;
  size_t rows = 0;
  int C = 0;
  DGRR_HD size_t threads() const { return rows; }
  DGRR_HD void At(size_t r) const {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    const float mr = mean[r], sr = rstd[r];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = 0; c < C; ++c) {
      const float norm = (x[c] - mr) * sr;
      const float dnorm = weight[c] * dy[c];
      dnorm_mean = dnorm_mean + dnorm;
      dnorm_norm_mean = Fma(dnorm, norm, dnorm_norm_mean);
    }
    const float dm = dnorm_mean / static_cast<float>(C);
    const float dnm = dnorm_norm_mean / static_cast<float>(C);
    float* dx = dinp + r * C;
    for (int c = 0; c < C; ++c) {
      const float norm = (x[c] - mr) * sr;
      const float dnorm = weight[c] * dy[c];
      dx[c] = Fma(Fma(-norm, dnm, dnorm - dm), sr, dx[c]);
    }
  }
};

// The weight and bias gradients of example e, one thread per (e, c): the
// example's rows ascending, as the CPU's row loop adds them.
struct LayerNormBackwardParamsKernel {
  float *dweight = nullptr, *dbias = nullptr;  // example 0's; + e*grad_stride
  size_t grad_stride = 0;
  const float *dout = nullptr, *inp = nullptr, *mean = nullptr, *rstd = nullptr;
  int T = 0, C = 0;
  size_t count = 0;
  DGRR_HD size_t threads() const { return count * C; }
  DGRR_HD void At(size_t g) const {
    const size_t c = g % C, e = g / C;
    float* dw = dweight + e * grad_stride + c;
    float* db = dbias + e * grad_stride + c;
    float w = *dw, b = *db;
    for (int t = 0; t < T; ++t) {
      const size_t r = e * T + t;
      const float norm = (inp[r * C + c] - mean[r]) * rstd[r];
      const float dy = dout[r * C + c];
      b = b + dy;
      w = Fma(norm, dy, w);
    }
    *dw = w;
    *db = b;
  }
};

// ------------------------------------------------------------------ attention
// The softmax of one causal row (e, h, t) of the scores the product left in
// preatt (model/layers.h AttentionForward): scale, max, exponentials, their
// sum in ascending t2, the division, zeros above the diagonal, then the
// dropped probabilities where dropout is on. One thread per row.
struct SoftmaxForwardKernel {
  float *preatt = nullptr, *att = nullptr, *att_dropped = nullptr;  // [count*NH*T, T]
  const uint8_t* keep = nullptr;                                    // same shape, or null
  float keep_scale = 1.0f, scale = 1.0f;
  int T = 0;
  size_t rows = 0;  // count * NH * T
  DGRR_HD size_t threads() const { return rows; }
  DGRR_HD void At(size_t row) const {
    const int t = static_cast<int>(row % T);
    float* pre = preatt + row * T;
    float* a = att + row * T;
    for (int t2 = 0; t2 <= t; ++t2) pre[t2] = pre[t2] * scale;
    float max_score = -INFINITY;
    for (int t2 = 0; t2 <= t; ++t2) {
      if (pre[t2] > max_score) max_score = pre[t2];
    }
    for (int t2 = 0; t2 <= t; ++t2) a[t2] = ExpF(pre[t2] - max_score);
    float denom = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) denom = denom + a[t2];
    for (int t2 = 0; t2 <= t; ++t2) a[t2] = a[t2] / denom;
    for (int t2 = t + 1; t2 < T; ++t2) pre[t2] = a[t2] = 0.0f;
    if (att_dropped != nullptr) {
      float* d = att_dropped + row * T;
      const uint8_t* k = keep + row * T;
      for (int t2 = 0; t2 < T; ++t2) d[t2] = KeepOrZeroF(k[t2], a[t2] * keep_scale);
    }
  }
};

// Through the softmax for one row (AttentionBackward's row loop): datt holds
// dy . v for every pair on entry and the score gradient on return.
struct SoftmaxBackwardKernel {
  float *datt = nullptr, *dpreatt = nullptr;
  const float* att = nullptr;
  const uint8_t* keep = nullptr;  // or null
  float keep_scale = 1.0f, scale = 1.0f;
  int T = 0;
  size_t rows = 0;
  DGRR_HD size_t threads() const { return rows; }
  DGRR_HD void At(size_t row) const {
    const int t = static_cast<int>(row % T);
    const float* a = att + row * T;
    float* d = datt + row * T;
    float* dpre = dpreatt + row * T;
    if (keep != nullptr) {
      const uint8_t* k = keep + row * T;
      for (int t2 = 0; t2 <= t; ++t2) d[t2] = KeepOrZeroF(k[t2], d[t2] * keep_scale);
    }
    float weighted = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) weighted = Fma(a[t2], d[t2], weighted);
    for (int t2 = 0; t2 <= t; ++t2) dpre[t2] = a[t2] * (d[t2] - weighted);
    for (int t2 = t + 1; t2 < T; ++t2) dpre[t2] = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) d[t2] = dpre[t2] * scale;
  }
};

// ------------------------------------------------------------------ elementwise
struct GeluForwardKernel {
  float* out = nullptr;
  const float* inp = nullptr;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t i) const { out[i] = GeluAt(inp[i]); }
};

struct GeluBackwardKernel {  // dinp accumulated
  float* dinp = nullptr;
  const float *inp = nullptr, *dout = nullptr;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t i) const { dinp[i] = Fma(GeluGradAt(inp[i]), dout[i], dinp[i]); }
};

struct ResidualForwardKernel {
  float* out = nullptr;
  const float *inp1 = nullptr, *inp2 = nullptr;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t i) const { out[i] = inp1[i] + inp2[i]; }
};

struct ResidualBackwardKernel {  // both accumulated
  float *dinp1 = nullptr, *dinp2 = nullptr;
  const float* dout = nullptr;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t i) const {
    dinp1[i] = dinp1[i] + dout[i];
    dinp2[i] = dinp2[i] + dout[i];
  }
};

struct DropoutForwardKernel {
  float* out = nullptr;
  const float* inp = nullptr;
  const uint8_t* keep = nullptr;
  float keep_scale = 1.0f;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t i) const { out[i] = KeepOrZeroF(keep[i], inp[i] * keep_scale); }
};

struct DropoutBackwardKernel {  // dinp accumulated
  float* dinp = nullptr;
  const float* dout = nullptr;
  const uint8_t* keep = nullptr;
  float keep_scale = 1.0f;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t i) const { dinp[i] = dinp[i] + KeepOrZeroF(keep[i], dout[i] * keep_scale); }
};

// The keep masks of `count` examples at one dropout site, `per_example`
// elements each: element i of example e is draw i of the Philox stream
// (dropout, {step, first_example + e, layer, site}) compared with the
// threshold (rng::FillDropoutKeepMask's convention, drawn per element at its
// counter instead of in sequence). One thread per element.
struct DropoutMaskKernel {
  uint8_t* keep = nullptr;
  uint64_t seed = 0, step = 0, first_example = 0, layer = 0, site = 0, threshold = 0;
  size_t per_example = 0, count = 0;
  DGRR_HD size_t threads() const { return per_example * count; }
  DGRR_HD void At(size_t g) const {
    const size_t i = g % per_example, e = g / per_example;
    if (threshold > 0xFFFFFFFFull) {
      keep[g] = 1;
      return;
    }
    const uint64_t coords[4] = {step, first_example + e, layer, site};
    rng::PhiloxStream s(rng::DeriveStreamId(seed, rng::Purpose::kDropout, coords, 4), i);
    keep[g] = s.NextU32() < static_cast<uint32_t>(threshold) ? 1 : 0;
  }
};

// ------------------------------------------------------------------ loss
// One row of softmax cross-entropy (CrossEntropyForward's per-t body).
struct CrossEntropyForwardKernel {
  float *probs = nullptr, *losses = nullptr;
  const float* logits = nullptr;
  const uint8_t* tokens = nullptr;  // windows of T + 1; targets are t + 1
  int T = 0, V = 0;
  size_t rows = 0;
  DGRR_HD size_t threads() const { return rows; }
  DGRR_HD void At(size_t r) const {
    const size_t e = r / T, t = r % T;
    const float* row = logits + r * V;
    float* p = probs + r * V;
    float max_logit = row[0];
    for (int v = 1; v < V; ++v) max_logit = row[v] > max_logit ? row[v] : max_logit;
    for (int v = 0; v < V; ++v) p[v] = ExpF(row[v] - max_logit);
    float denom = 0.0f;
    for (int v = 0; v < V; ++v) denom = denom + p[v];
    for (int v = 0; v < V; ++v) p[v] = p[v] / denom;
    const uint8_t target = tokens[e * (T + 1) + t + 1];
    losses[r] = LogF(denom) - (row[target] - max_logit);
  }
};

// An example's loss: its T token losses summed in ascending t, divided by T.
struct MeanLossKernel {
  float* out = nullptr;
  const float* losses = nullptr;
  int T = 0;
  size_t count = 0;
  DGRR_HD size_t threads() const { return count; }
  DGRR_HD void At(size_t e) const {
    float sum = 0.0f;
    for (int t = 0; t < T; ++t) sum = sum + losses[e * T + t];
    out[e] = sum / static_cast<float>(T);
  }
};

// dlogits[r][v] = fma(probs - onehot(target), 1/T, dlogits) (dlogits zeroed
// first: CrossEntropyBackward accumulating into zeros, dlosses = 1/T).
struct CrossEntropyBackwardKernel {
  float* dlogits = nullptr;
  const float* probs = nullptr;
  const uint8_t* tokens = nullptr;
  float dloss = 0.0f;
  int T = 0, V = 0;
  size_t count = 0;
  DGRR_HD size_t threads() const { return count * T * static_cast<size_t>(V); }
  DGRR_HD void At(size_t g) const {
    const size_t v = g % V, r = g / V, e = r / T, t = r % T;
    const float indicator = v == tokens[e * (T + 1) + t + 1] ? 1.0f : 0.0f;
    dlogits[g] = Fma(probs[g] - indicator, dloss, dlogits[g]);
  }
};

// ------------------------------------------------------------------ buffers
struct FillKernel {
  float* out = nullptr;
  float value = 0.0f;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t i) const { out[i] = value; }
};

// The index of the last of `count` (>= 1) table entries, sorted by `key`,
// whose key is at most g; 0 when none is. A binary search one thread runs:
// the kernels below find their entry with it.
template <typename T>
DGRR_HD inline size_t LastAtOrBefore(const T* table, size_t count, size_t g, size_t T::*key) {
  size_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (table[mid].*key <= g) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Zeroes many ranges of floats in one launch: range r is ranges[r].n floats
// at ranges[r].p, and the threads of range r are [first, first + n), where
// first is the sum of the ranges before it. One thread per float.
struct ZeroRange {
  float* p = nullptr;
  size_t n = 0, first = 0;
};
struct ZeroRangesKernel {
  const ZeroRange* ranges = nullptr;  // kernel memory
  size_t range_count = 0;
  size_t total = 0;  // the sum of the ranges' n
  DGRR_HD size_t threads() const { return total; }
  DGRR_HD void At(size_t g) const {
    if (range_count == 0) return;
    const ZeroRange& r = ranges[LastAtOrBefore(ranges, range_count, g, &ZeroRange::first)];
    if (g >= r.first && g - r.first < r.n) r.p[g - r.first] = 0.0f;
  }
};

// ------------------------------------------------------------------ the batch
// The canonical tree sum (runtime/tree_reduce.h) of `count` buffers at
// base + i*stride, per element, left in buffer 0 (the others clobbered, as
// TreeReduceInPlace leaves them). The tree whose node [lo, hi) splits at lo +
// the largest power of two below hi - lo is the one that sums neighbours at
// distance 1, then 2, 4, ...: at width w the partial sum at i (a multiple of
// 2w) takes the one at i + w, when there is one. One thread per element.
struct TreeSumKernel {
  float* base = nullptr;
  size_t stride = 0, count = 0, n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t k) const {
    for (size_t w = 1; w < count; w *= 2) {
      for (size_t i = 0; i + w < count; i += 2 * w) {
        base[i * stride + k] = base[i * stride + k] + base[(i + w) * stride + k];
      }
    }
  }
};

// out[k] = in[k] / divisor (the batch mean: a division, one rounding).
struct DivideKernel {
  float* out = nullptr;
  const float* in = nullptr;
  float divisor = 1.0f;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t k) const { out[k] = in[k] / divisor; }
};

// The gradient's sum of squares in double, ascending index, one fma per
// square (ClipGradientsByGlobalNorm): one chain, so one thread. A GPU
// thread issues in order and a load placed after the chain's fmas waits for
// them, so the thread loads the next kBatch gradients before it adds the
// current ones: the loads' latency hides behind the chain instead of adding
// to it. The same fmas in the same order as the plain loop (tested on the
// emulator against the CPU's ClipGradientsByGlobalNorm, for lengths around
// the batch). Not timed on a GPU yet: DGRR_KERNEL_TIMES will say.
struct SumOfSquaresKernel {
  static constexpr size_t kBatch = 32;
  double* out = nullptr;
  const float* grad = nullptr;
  size_t n = 0;
  DGRR_HD size_t threads() const { return 1; }
  DGRR_HD static void AddSquares(const float (&batch)[kBatch], double& sum) {
#if defined(__CUDACC__)
#pragma unroll
#else
#pragma GCC unroll 32
#endif
    for (size_t j = 0; j < kBatch; ++j) {
      const double g = static_cast<double>(batch[j]);
      sum = FmaD(g, g, sum);
    }
  }
  DGRR_HD static void Load(float (&batch)[kBatch], const float* from) {
#if defined(__CUDACC__)
#pragma unroll
#else
#pragma GCC unroll 32
#endif
    for (size_t j = 0; j < kBatch; ++j) batch[j] = from[j];
  }
  DGRR_HD void At(size_t) const {
    double sum = 0.0;
    size_t i = 0;
    if (n >= kBatch) {
      float current[kBatch];
      Load(current, grad);
      // current holds [i - kBatch, i).
      for (i = kBatch; i + kBatch <= n; i += kBatch) {
        float next[kBatch];
        Load(next, grad + i);
        AddSquares(current, sum);
#if defined(__CUDACC__)
#pragma unroll
#else
#pragma GCC unroll 32
#endif
        for (size_t j = 0; j < kBatch; ++j) current[j] = next[j];
      }
      AddSquares(current, sum);
    }
    for (; i < n; ++i) {
      const double g = static_cast<double>(grad[i]);
      sum = FmaD(g, g, sum);
    }
    *out = sum;
  }
};

struct ScaleKernel {  // grad[k] *= scale
  float* grad = nullptr;
  float scale = 1.0f;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t k) const { grad[k] = grad[k] * scale; }
};

// One tensor's AdamW update (AdamWUpdateAt), one thread per element.
struct AdamWKernel {
  float *p = nullptr, *m = nullptr, *v = nullptr;
  const float* g = nullptr;
  AdamWCoefficients k{};
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t i) const { AdamWUpdateAt(k, p[i], m[i], v[i], g[i]); }
};

// AdamW over every tensor at once: segment s covers elements [begin, end)
// with its tensor's coefficients (the weight decay differs by tensor).
// Segments are sorted and do not overlap; an element outside every segment
// is left alone. One thread per element, the element's update exactly
// AdamWKernel's.
struct AdamWSegment {
  size_t begin = 0, end = 0;
  AdamWCoefficients k{};
};
struct AdamWSegmentsKernel {
  float *p = nullptr, *m = nullptr, *v = nullptr;
  const float* g = nullptr;
  const AdamWSegment* segments = nullptr;  // kernel memory
  size_t segment_count = 0;
  size_t n = 0;
  DGRR_HD size_t threads() const { return n; }
  DGRR_HD void At(size_t i) const {
    if (segment_count == 0) return;
    const AdamWSegment& s = segments[LastAtOrBefore(segments, segment_count, i, &AdamWSegment::begin)];
    if (i < s.begin || i >= s.end) return;
    AdamWUpdateAt(s.k, p[i], m[i], v[i], g[i]);
  }
};

// Every kernel type, for the launchers' explicit instantiations (the CUDA
// launcher defines GemmKernel's launch apart: it may go to cuBLAS).
#define DGRR_MODEL_KERNELS(X) X(GemmKernel) DGRR_MODEL_KERNELS_BUT_GEMM(X)
#define DGRR_MODEL_KERNELS_BUT_GEMM(X)                                                          \
  X(CausalProductKernel) X(BiasGradKernel) X(EncoderForwardKernel)                               \
  X(EncoderBackwardWteKernel) X(EncoderBackwardWpeKernel) X(LayerNormForwardKernel)             \
  X(LayerNormBackwardInputKernel) X(LayerNormBackwardParamsKernel) X(SoftmaxForwardKernel)      \
  X(SoftmaxBackwardKernel) X(GeluForwardKernel) X(GeluBackwardKernel) X(ResidualForwardKernel)  \
  X(ResidualBackwardKernel) X(DropoutForwardKernel) X(DropoutBackwardKernel)                     \
  X(DropoutMaskKernel) X(CrossEntropyForwardKernel) X(MeanLossKernel)                            \
  X(CrossEntropyBackwardKernel) X(FillKernel) X(TreeSumKernel) X(DivideKernel)                   \
  X(SumOfSquaresKernel) X(ScaleKernel) X(AdamWKernel) X(AdamWSegmentsKernel) X(ZeroRangesKernel)

}  // namespace dgrr::model::kernels
