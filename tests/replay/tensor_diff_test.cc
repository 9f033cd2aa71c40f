// Element-wise comparison of tensor dumps: ULP distances across zero, at the
// signed zeros, NaN, infinity and denormals; indices; unpaired and mismatched
// datasets.
#include "replay/tensor_diff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/coding.h"

namespace dgrr::replay {
namespace {

uint64_t F32(float f) { return FloatBits(f); }
uint64_t F64(double d) { return DoubleBits(d); }

TEST(UlpDistance, Float32) {
  const float one = 1.0f;
  EXPECT_EQ(UlpDistance(DType::kF32, F32(one), F32(std::nextafter(one, 2.0f))), 1u);
  EXPECT_EQ(UlpDistance(DType::kF32, F32(one), F32(one)), 0u);
  // The signed zeros are the same point; the denormals next to them one step away.
  const float denorm = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(UlpDistance(DType::kF32, F32(0.0f), F32(-0.0f)), 0u);
  EXPECT_EQ(UlpDistance(DType::kF32, F32(0.0f), F32(denorm)), 1u);
  EXPECT_EQ(UlpDistance(DType::kF32, F32(-0.0f), F32(denorm)), 1u);
  EXPECT_EQ(UlpDistance(DType::kF32, F32(-denorm), F32(denorm)), 2u);
  // Across zero: both magnitudes walk down to it.
  EXPECT_EQ(UlpDistance(DType::kF32, F32(-1.0f), F32(1.0f)), 2u * 0x3f800000u);
  // Denormal to the smallest normal: every denormal in between.
  EXPECT_EQ(UlpDistance(DType::kF32, F32(denorm), F32(std::numeric_limits<float>::min())), 0x7fffffu);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(UlpDistance(DType::kF32, F32(std::numeric_limits<float>::max()), F32(inf)), 1u);
  EXPECT_EQ(UlpDistance(DType::kF32, F32(-inf), F32(inf)), 2u * 0x7f800000u);
  // A mantissa bit flip moves by exactly 2^bit.
  EXPECT_EQ(UlpDistance(DType::kF32, F32(0.75f), FloatBits(0.75f) ^ (1u << 20)), 1u << 20);
  EXPECT_FALSE(UlpDistance(DType::kF32, F32(std::nanf("")), F32(1.0f)));
  EXPECT_FALSE(UlpDistance(DType::kF32, F32(1.0f), 0xffc00001u));
  EXPECT_FALSE(UlpDistance(DType::kI32, 1, 2)) << "integers have no ULP";
}

TEST(UlpDistance, Float64And16BitFormats) {
  EXPECT_EQ(UlpDistance(DType::kF64, F64(1.0), F64(std::nextafter(1.0, 2.0))), 1u);
  const double dmax = std::numeric_limits<double>::max();
  EXPECT_EQ(UlpDistance(DType::kF64, F64(-dmax), F64(dmax)), 2u * 0x7fefffffffffffffull)
      << "the widest distance still fits";
  EXPECT_EQ(UlpDistance(DType::kF64, F64(-0.0), F64(0.0)), 0u);
  EXPECT_FALSE(UlpDistance(DType::kF64, F64(std::nan("")), F64(0.0)));
  // f16: 1.0 = 0x3c00; bf16: 1.0 = 0x3f80.
  EXPECT_EQ(UlpDistance(DType::kF16, 0x3c00, 0x3c01), 1u);
  EXPECT_EQ(UlpDistance(DType::kF16, 0x8001, 0x0001), 2u);
  EXPECT_FALSE(UlpDistance(DType::kF16, 0x7c01, 0x3c00)) << "f16 NaN";
  EXPECT_EQ(UlpDistance(DType::kF16, 0x7bff, 0x7c00), 1u) << "max to inf";
  EXPECT_EQ(UlpDistance(DType::kBF16, 0x3f80, 0xbf80), 2u * 0x3f80);
  EXPECT_FALSE(UlpDistance(DType::kBF16, 0x7fc0, 0x3f80)) << "bf16 NaN";
}

TEST(ElementValue, DecodesEveryFormat) {
  EXPECT_EQ(ElementValue(DType::kF16, 0x3c00), 1.0);
  EXPECT_EQ(ElementValue(DType::kF16, 0xc000), -2.0);
  EXPECT_EQ(ElementValue(DType::kF16, 0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(ElementValue(DType::kF16, 0x7bff), 65504.0);
  EXPECT_TRUE(std::isinf(ElementValue(DType::kF16, 0x7c00)));
  EXPECT_EQ(ElementValue(DType::kBF16, 0x3f80), 1.0);
  EXPECT_EQ(ElementValue(DType::kF32, F32(0.1f)), static_cast<double>(0.1f));
  EXPECT_EQ(ElementValue(DType::kF64, F64(0.1)), 0.1);
  EXPECT_EQ(ElementValue(DType::kI8, 0xff), -1.0);
  EXPECT_EQ(ElementValue(DType::kI32, 0xfffffffe), -2.0);
  EXPECT_EQ(ElementValue(DType::kU32, 0xfffffffe), 4294967294.0);
}

TEST(UnravelIndex, RowMajor) {
  EXPECT_EQ(UnravelIndex(5, {2, 3}), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(UnravelIndex(23, {2, 3, 4}), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(UnravelIndex(13, {2, 3, 4}), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_TRUE(UnravelIndex(0, {}).empty());
}

std::vector<uint8_t> Floats(std::vector<float> v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(DiffTensors, CountsFiguresAndFirstIndices) {
  const float inf = std::numeric_limits<float>::infinity();
  const float denorm = std::numeric_limits<float>::denorm_min();
  //            [0,0]  [0,1]  [0,2]   [1,0]          [1,1]   [1,2]
  auto a = Floats({1.0f, 2.0f, 0.0f, std::nanf(""), -denorm, 3.0f});
  auto b = Floats({1.0f, 2.5f, -0.0f, 1.0f, denorm, 3.0f});
  TensorPairDiff d = DiffTensors("t", DType::kF32, {2, 3}, a, b, 10);
  EXPECT_EQ(d.stats.elements, 6u);
  EXPECT_EQ(d.stats.differing, 4u) << "2.5, the signed zero, the NaN pair and the denormals";
  EXPECT_EQ(d.stats.nan_pairs, 1u);
  EXPECT_TRUE(d.stats.has_ulp);
  EXPECT_EQ(d.stats.max_abs, 0.5);
  EXPECT_EQ(d.stats.max_ulp, 1u << 21) << "2.0 -> 2.5 is 0.5 in steps of 2^-22";
  ASSERT_EQ(d.first.size(), 4u);
  EXPECT_EQ(d.first[0].index, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(d.first[1].index, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(d.first[1].a_bits, 0u);
  EXPECT_EQ(d.first[1].b_bits, 0x80000000u);
  EXPECT_EQ(d.first[2].index, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(d.first[3].index, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(d.first[3].flat_index, 4u);

  EXPECT_EQ(DiffTensors("t", DType::kF32, {2, 3}, a, b, 1).first.size(), 1u) << "--first 1";
  auto big = DiffTensors("t", DType::kF32, {2}, Floats({std::numeric_limits<float>::max(), 0.0f}),
                         Floats({inf, 0.0f}), 10);
  EXPECT_TRUE(std::isinf(big.stats.max_abs));
  EXPECT_EQ(big.stats.max_ulp, 1u);
  auto same = DiffTensors("t", DType::kF32, {2, 3}, a, a, 10);
  EXPECT_EQ(same.stats.differing, 0u) << "a NaN equals itself bitwise";
  EXPECT_TRUE(same.first.empty());
}

TEST(DiffTensors, IntegersHaveExactAbsoluteDifferencesAndNoUlp) {
  std::vector<uint8_t> a(8), b(8);
  const int32_t av[2] = {-5, 100}, bv[2] = {7, 100};
  std::memcpy(a.data(), av, 8);
  std::memcpy(b.data(), bv, 8);
  auto d = DiffTensors("i", DType::kI32, {2}, a, b, 10);
  EXPECT_EQ(d.stats.differing, 1u);
  EXPECT_EQ(d.stats.max_abs, 12.0);
  EXPECT_FALSE(d.stats.has_ulp);
  std::vector<uint8_t> u0(8, 0), umax(8, 0xff);
  EXPECT_EQ(DiffTensors("u", DType::kU64, {1}, u0, umax, 1).stats.max_abs, 18446744073709551615.0);
  std::vector<uint8_t> t0 = {1, 2, 3}, t1 = {1, 200, 3};
  auto bytes = DiffTensors("tok", DType::kU8, {3}, t0, t1, 5);
  EXPECT_EQ(bytes.stats.max_abs, 198.0);
  EXPECT_EQ(bytes.first[0].index, std::vector<int64_t>{1});
}

checkpoint::DumpedTensor Tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                std::vector<uint8_t> data) {
  checkpoint::DumpedTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

TEST(DiffTensorDumps, PairsByNameAndReportsWhatCannotBeCompared) {
  checkpoint::TensorDump a, b;
  a.tensors = {Tensor("ex0", DType::kF32, {2}, Floats({1, 2})), Tensor("ex1", DType::kF32, {2}, Floats({1, 2})),
               Tensor("ex2", DType::kF32, {2}, Floats({1, 2})), Tensor("ex3", DType::kF32, {1, 2}, Floats({1, 2})),
               Tensor("only_a", DType::kU8, {1}, {1})};
  b.tensors = {Tensor("ex0", DType::kF32, {2}, Floats({1, 2})), Tensor("ex1", DType::kF32, {2}, Floats({1, 3})),
               Tensor("ex2", DType::kI32, {2}, Floats({1, 2})), Tensor("ex3", DType::kF32, {2, 1}, Floats({1, 2})),
               Tensor("only_b", DType::kU8, {1}, {1})};
  TensorDumpDiff d = DiffTensorDumps(a, b, 5);
  ASSERT_EQ(d.pairs.size(), 2u);
  EXPECT_EQ(d.pairs[0].stats.differing, 0u);
  EXPECT_EQ(d.pairs[1].stats.differing, 1u);
  EXPECT_EQ(d.total.elements, 4u);
  EXPECT_EQ(d.total.differing, 1u);
  EXPECT_EQ(d.total.max_ulp, 1u << 22) << "2.0 -> 3.0";
  EXPECT_EQ(d.only_in_a, std::vector<std::string>{"only_a"});
  EXPECT_EQ(d.only_in_b, std::vector<std::string>{"only_b"});
  ASSERT_EQ(d.mismatched.size(), 2u);
  EXPECT_EQ(d.mismatched[0].name, "ex2");
  EXPECT_EQ(d.mismatched[0].reason, "dtype f32 vs i32");
  EXPECT_EQ(d.mismatched[1].reason, "shape [1, 2] vs [2, 1]");
  EXPECT_FALSE(d.identical());
  EXPECT_TRUE(DiffTensorDumps(a, a, 5).identical());
}

}  // namespace
}  // namespace dgrr::replay
