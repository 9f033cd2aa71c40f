// TensorRef validation and FingerprintTensor.
#include "fingerprint/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace dgrr {
namespace {

TEST(TensorRefTest, MakeDerivesBytesFromShape) {
  std::vector<float> values(24, 1.5f);
  StatusOr<TensorRef> t = MakeTensorRef(values.data(), DType::kF32, {2, 3, 4});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->bytes, 96u);
  EXPECT_EQ(t->ndim, 3);
  EXPECT_EQ(t->DebugString(), "f32[2,3,4] 96 bytes");
  StatusOr<Fingerprint> fp = FingerprintTensor(*t);
  ASSERT_TRUE(fp.ok());
  EXPECT_EQ(*fp, FingerprintBytes(values.data(), 96));
}

TEST(TensorRefTest, ScalarAndEmptyTensors) {
  const double scalar = 2.0;
  StatusOr<TensorRef> s = MakeTensorRef(&scalar, DType::kF64, {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->bytes, 8u);
  // A zero-sized tensor may have a null pointer; its fingerprint is the empty one.
  StatusOr<TensorRef> empty = MakeTensorRef(nullptr, DType::kBF16, {0, 7});
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->bytes, 0u);
  StatusOr<Fingerprint> fp = FingerprintTensor(*empty);
  ASSERT_TRUE(fp.ok());
  EXPECT_EQ(*fp, FingerprintBytes(nullptr, 0));
}

TEST(TensorRefTest, BytesRefCoversRawBuffers) {
  const uint8_t raw[5] = {1, 2, 3, 4, 5};
  const TensorRef t = MakeBytesRef(raw, 5);
  EXPECT_TRUE(t.Validate().ok());
  EXPECT_EQ(t.dtype, DType::kUnknown);
  StatusOr<Fingerprint> fp = FingerprintTensor(t);
  ASSERT_TRUE(fp.ok());
  EXPECT_EQ(fp->xor64, 0x0504030201ull);
}

void ExpectInvalid(const TensorRef& t, const std::string& needle) {
  const Status status = t.Validate();
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
  StatusOr<Fingerprint> fp = FingerprintTensor(t);
  EXPECT_TRUE(fp.status().IsInvalidArgument());
  EXPECT_NE(fp.status().message().find(needle), std::string::npos) << fp.status().message();
}

TEST(TensorRefTest, ValidateNamesEachProblem) {
  std::vector<int32_t> values(6);
  TensorRef t = MakeTensorRef(values.data(), DType::kI32, {2, 3}).value();

  TensorRef null_data = t;
  null_data.data = nullptr;
  ExpectInvalid(null_data, "null");

  TensorRef too_many_dims = t;
  too_many_dims.ndim = kMaxTensorDims + 1;
  ExpectInvalid(too_many_dims, "ndim 9");
  TensorRef negative_ndim = t;
  negative_ndim.ndim = -1;
  ExpectInvalid(negative_ndim, "ndim -1");

  TensorRef negative_dim = t;
  negative_dim.dims[1] = -3;
  ExpectInvalid(negative_dim, "dim 1 is negative");

  TensorRef wrong_bytes = t;
  wrong_bytes.bytes = 23;
  ExpectInvalid(wrong_bytes, "bytes 23 != 6 elements * 4 bytes");

  TensorRef huge = t;
  huge.ndim = 3;
  huge.dims[0] = huge.dims[1] = huge.dims[2] = std::numeric_limits<int64_t>::max();
  ExpectInvalid(huge, "2^64");

  TensorRef huge_bytes = t;
  huge_bytes.ndim = 1;
  huge_bytes.dims[0] = std::numeric_limits<int64_t>::max();
  ExpectInvalid(huge_bytes, "overflows");
}

TEST(TensorRefTest, MakeRejectsBadShapes) {
  int32_t x = 0;
  EXPECT_TRUE(MakeTensorRef(&x, DType::kI32, {1, -1}).status().IsInvalidArgument());
  EXPECT_TRUE(MakeTensorRef(&x, DType::kUnknown, {1}).status().IsInvalidArgument());
  EXPECT_TRUE(
      MakeTensorRef(&x, DType::kI32, {1, 1, 1, 1, 1, 1, 1, 1, 1}).status().IsInvalidArgument());
  EXPECT_TRUE(MakeTensorRef(nullptr, DType::kI32, {1}).status().IsInvalidArgument());
}

TEST(TensorRefTest, UnknownDTypeSkipsSizeCheck) {
  uint8_t raw[3] = {};
  TensorRef t = MakeBytesRef(raw, 3);
  t.ndim = 2;
  t.dims[0] = 7;
  t.dims[1] = 9;  // shape of raw bytes is informational
  EXPECT_TRUE(t.Validate().ok());
}

}  // namespace
}  // namespace dgrr
