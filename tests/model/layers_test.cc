// Every backward function against central finite differences in double.
// Each check defines the scalar loss L = sum(out * R) for a fixed random R, so
// the backward is fed dout = R.
#include "model/layers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "fd_check.h"
#include "model/splitmix.h"

namespace dgrr::model {
namespace {

using testing::CheckGradient;
using testing::Dot;
using testing::RandomDoubles;
using Vec = std::vector<double>;

TEST(LayersGradient, Encoder) {
  const int T = 5, C = 4, V = 7, maxT = 6;
  const uint8_t tokens[T] = {3, 1, 3, 6, 3};  // repeats: gradients must accumulate
  Vec wte = RandomDoubles(V * C, 1), wpe = RandomDoubles(maxT * C, 2), R = RandomDoubles(T * C, 3);
  Vec out(T * C);
  auto loss = [&] {
    EncoderForward(out.data(), tokens, wte.data(), wpe.data(), T, C);
    return Dot(out, R);
  };
  Vec dwte(V * C, 0), dwpe(maxT * C, 0);
  EncoderBackward(dwte.data(), dwpe.data(), R.data(), tokens, T, C);
  CheckGradient("dwte", wte, dwte, loss);
  CheckGradient("dwpe", wpe, dwpe, loss);
  EXPECT_DOUBLE_EQ(dwte[3 * C], R[0] + R[2 * C] + R[4 * C]);
}

TEST(LayersGradient, LayerNorm) {
  const int T = 3, C = 7;
  Vec inp = RandomDoubles(T * C, 4, 2.0), w = RandomDoubles(C, 5), b = RandomDoubles(C, 6);
  Vec R = RandomDoubles(T * C, 7), out(T * C), mean(T), rstd(T);
  auto loss = [&] {
    LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), T, C);
    return Dot(out, R);
  };
  loss();
  Vec dinp(T * C, 0), dw(C, 0), db(C, 0);
  LayerNormBackward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), mean.data(),
                    rstd.data(), T, C);
  CheckGradient("dinp", inp, dinp, loss);
  CheckGradient("dw", w, dw, loss);
  CheckGradient("db", b, db, loss);
}

TEST(LayersGradient, Matmul) {
  const int T = 3, C = 5, OC = 6;
  Vec inp = RandomDoubles(T * C, 8), w = RandomDoubles(C * OC, 9), bias = RandomDoubles(OC, 10);
  Vec R = RandomDoubles(T * OC, 11), out(T * OC);
  for (bool with_bias : {true, false}) {
    auto loss = [&] {
      MatmulForward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, T, C, OC);
      return Dot(out, R);
    };
    Vec dinp(T * C, 0), dw(C * OC, 0), dbias(OC, 0);
    MatmulBackward(dinp.data(), dw.data(), with_bias ? dbias.data() : nullptr, R.data(),
                   inp.data(), w.data(), T, C, OC);
    CheckGradient("dinp", inp, dinp, loss);
    CheckGradient("dw", w, dw, loss);
    if (with_bias) CheckGradient("dbias", bias, dbias, loss);
  }
}

TEST(LayersGradient, LmHead) {
  const int T = 4, C = 5, V = 9;
  Vec inp = RandomDoubles(T * C, 12), wte = RandomDoubles(V * C, 13), R = RandomDoubles(T * V, 14);
  Vec logits(T * V);
  auto loss = [&] {
    LmHeadForward(logits.data(), inp.data(), wte.data(), T, C, V);
    return Dot(logits, R);
  };
  Vec dinp(T * C, 0), dwte(V * C, 0);
  LmHeadBackward(dinp.data(), dwte.data(), R.data(), inp.data(), wte.data(), T, C, V);
  CheckGradient("dinp", inp, dinp, loss);
  CheckGradient("dwte", wte, dwte, loss);
}

void CheckAttention(bool with_dropout) {
  const int T = 5, C = 6, NH = 2;
  Vec qkv = RandomDoubles(T * 3 * C, 15, 1.5), R = RandomDoubles(T * C, 16);
  Vec out(T * C), preatt(NH * T * T), att(NH * T * T), att_dropped(NH * T * T);
  std::vector<uint8_t> keep(NH * T * T);
  SplitMixStream rng(17);
  for (uint8_t& k : keep) k = rng.Below(4) != 0;  // p = 1/4
  const double keep_scale = 1.0 / (1.0 - 0.25);
  double* dropped = with_dropout ? att_dropped.data() : nullptr;
  const uint8_t* mask = with_dropout ? keep.data() : nullptr;
  auto loss = [&] {
    AttentionForward(out.data(), preatt.data(), att.data(), dropped, qkv.data(), mask, keep_scale,
                     T, C, NH);
    return Dot(out, R);
  };
  loss();
  // Causality: the first position attends only to itself.
  EXPECT_DOUBLE_EQ(att[0], 1.0);
  EXPECT_DOUBLE_EQ(att[1], 0.0);
  Vec dqkv(T * 3 * C, 0), datt(NH * T * T), dpreatt(NH * T * T);
  AttentionBackward(dqkv.data(), datt.data(), dpreatt.data(), R.data(), qkv.data(), att.data(),
                    dropped, mask, keep_scale, T, C, NH);
  CheckGradient(with_dropout ? "dqkv (dropout)" : "dqkv", qkv, dqkv, loss);
}

TEST(LayersGradient, Attention) { CheckAttention(false); }
TEST(LayersGradient, AttentionWithDropout) { CheckAttention(true); }

// The causal products against the plain loops the attention used before
// (each sum in ascending k over the causal range only, one fma per term), bit for bit, for
// sizes below, at and across the row block; an infinity outside the causal
// range of A must not reach c (it would as 0 * inf = NaN if those terms were
// formed).
TEST(CausalProduct, EqualsThePlainCausalLoopBitForBit) {
  for (int T : {5, kCausalRows, 2 * kCausalRows + 3}) {
    const int N = 20, ld = N + 3;
    std::vector<float> a(static_cast<size_t>(T) * T), b(static_cast<size_t>(T) * ld);
    SplitMixStream rng(static_cast<uint64_t>(T));
    for (float& x : a) x = static_cast<float>(rng.Below(2001)) / 1000.0f - 1.0f;
    for (float& x : b) x = static_cast<float>(rng.Below(2001)) / 1000.0f - 1.0f;
    for (int m = 0; m < T; ++m) {
      for (int k = m + 1; k < T; ++k) a[static_cast<size_t>(m) * T + k] = INFINITY;
    }
    std::vector<float> lower(static_cast<size_t>(T) * ld, NAN), upper(lower);
    CausalProductLower(lower.data(), ld, a.data(), T, 1, b.data(), ld, T, N);
    // Upper reads A transposed: A(m,k) = a[k*T + m], k >= m.
    CausalProductUpper(upper.data(), ld, a.data(), 1, T, b.data(), ld, T, N);
    for (int m = 0; m < T; ++m) {
      for (int n = 0; n < N; ++n) {
        float want_lower = 0.0f, want_upper = 0.0f;
        for (int k = 0; k <= m; ++k) want_lower = std::fma(a[m * T + k], b[k * ld + n], want_lower);
        for (int k = m; k < T; ++k) want_upper = std::fma(a[k * T + m], b[k * ld + n], want_upper);
        ASSERT_EQ(want_lower, lower[m * ld + n]) << "T " << T << " m " << m << " n " << n;
        ASSERT_EQ(want_upper, upper[m * ld + n]) << "T " << T << " m " << m << " n " << n;
      }
    }
  }
}

TEST(LayersGradient, Gelu) {
  const size_t N = 40;
  Vec inp = RandomDoubles(N, 18, 4.0), R = RandomDoubles(N, 19), out(N);
  auto loss = [&] {
    GeluForward(out.data(), inp.data(), N);
    return Dot(out, R);
  };
  Vec dinp(N, 0);
  GeluBackward(dinp.data(), inp.data(), R.data(), N);
  CheckGradient("dinp", inp, dinp, loss);
}

TEST(LayersGradient, ResidualAndDropout) {
  const size_t N = 12;
  Vec a = RandomDoubles(N, 20), b = RandomDoubles(N, 21), R = RandomDoubles(N, 22), out(N);
  auto residual_loss = [&] {
    ResidualForward(out.data(), a.data(), b.data(), N);
    return Dot(out, R);
  };
  Vec da(N, 0), db(N, 0);
  ResidualBackward(da.data(), db.data(), R.data(), N);
  CheckGradient("residual da", a, da, residual_loss);
  CheckGradient("residual db", b, db, residual_loss);

  std::vector<uint8_t> keep(N);
  for (size_t i = 0; i < N; ++i) keep[i] = i % 3 != 0;
  auto dropout_loss = [&] {
    DropoutForward(out.data(), a.data(), keep.data(), 1.5, N);
    return Dot(out, R);
  };
  dropout_loss();
  EXPECT_EQ(out[0], 0.0);
  EXPECT_DOUBLE_EQ(out[1], a[1] * 1.5);
  Vec dd(N, 0);
  DropoutBackward(dd.data(), R.data(), keep.data(), 1.5, N);
  CheckGradient("dropout", a, dd, dropout_loss);
}

TEST(LayersGradient, CrossEntropy) {
  const int T = 3, V = 11;
  const uint8_t targets[T] = {4, 0, 10};
  Vec logits = RandomDoubles(T * V, 23, 3.0), R = RandomDoubles(T, 24), probs(T * V), losses(T);
  auto loss = [&] {
    CrossEntropyForward(probs.data(), losses.data(), logits.data(), targets, T, V);
    return Dot(losses, R);
  };
  loss();
  double row_sum = 0;
  for (int v = 0; v < V; ++v) row_sum += probs[v];
  EXPECT_NEAR(row_sum, 1.0, 1e-15);
  EXPECT_NEAR(losses[0], -std::log(probs[4]), 1e-14);
  Vec dlogits(T * V, 0);
  CrossEntropyBackward(dlogits.data(), probs.data(), targets, R.data(), T, V);
  CheckGradient("dlogits", logits, dlogits, loss);
}

// accumulate = false writes what adding into a zeroed buffer gives, bit for
// bit, whatever was in the buffer: a -0 input gradient comes out +0 as it
// would from 0 + -0, and the stale contents (NaN here) are never read.
TEST(LayersBackward, WritingEqualsAccumulatingIntoZeros) {
  const size_t N = 64;
  std::vector<float> dout(N), inp(N), probs(N), dlosses = {0.5f, -0.0f, 2.0f, 1.0f};
  std::vector<uint8_t> keep(N);
  for (size_t i = 0; i < N; ++i) {
    dout[i] = i % 7 == 0 ? -0.0f : static_cast<float>(RandomDoubles(1, 300 + i)[0]);
    inp[i] = static_cast<float>(RandomDoubles(1, 500 + i, 4.0)[0]);
    probs[i] = static_cast<float>(i % 16) / 16.0f;
    keep[i] = i % 3 != 0;
  }
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  const std::vector<float> zeros(N, 0.0f), stale(N, NAN);
  {
    auto want = zeros, got = stale;
    GeluBackward(want.data(), inp.data(), dout.data(), N);
    GeluBackward(got.data(), inp.data(), dout.data(), N, /*accumulate=*/false);
    EXPECT_TRUE(same(want, got)) << "gelu";
  }
  {
    auto want1 = zeros, want2 = zeros, got1 = stale, got2 = stale;
    ResidualBackward(want1.data(), want2.data(), dout.data(), N);
    ResidualBackward(got1.data(), got2.data(), dout.data(), N, /*accumulate=*/false);
    EXPECT_TRUE(same(want1, got1) && same(want2, got2)) << "residual";
    EXPECT_FALSE(std::signbit(got1[0])) << "0 + -0 is +0";
  }
  {
    auto want = zeros, got = stale;
    DropoutBackward(want.data(), dout.data(), keep.data(), 1.25f, N);
    DropoutBackward(got.data(), dout.data(), keep.data(), 1.25f, N, /*accumulate=*/false);
    EXPECT_TRUE(same(want, got)) << "dropout";
  }
  {
    const int T = 4, V = 16;
    const uint8_t targets[T] = {3, 0, 15, 7};
    auto want = zeros, got = stale;
    CrossEntropyBackward(want.data(), probs.data(), targets, dlosses.data(), T, V);
    CrossEntropyBackward(got.data(), probs.data(), targets, dlosses.data(), T, V, /*accumulate=*/false);
    EXPECT_TRUE(same(want, got)) << "cross entropy";
  }
}

}  // namespace
}  // namespace dgrr::model
