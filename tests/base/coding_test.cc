#include "base/coding.h"

#include <gtest/gtest.h>

#include "base/dtype.h"

namespace dgrr {
namespace {

TEST(Coding, LittleEndianByteOrder) {
  uint8_t buf[8];
  EncodeFixed32(buf, 0x04030201u);
  EXPECT_EQ(buf[0], 1);
  EXPECT_EQ(buf[3], 4);
  EncodeFixed64(buf, 0x0807060504030201ull);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(buf[i], i + 1);
  EXPECT_EQ(DecodeFixed64(buf), 0x0807060504030201ull);
  EncodeFixed16(buf, 0xbeef);
  EXPECT_EQ(DecodeFixed16(buf), 0xbeef);
}

TEST(Coding, RoundTripsExtremes) {
  uint8_t buf[8];
  for (uint64_t v : {0ull, 1ull, 0xffffffffffffffffull, 0x8000000000000000ull}) {
    EncodeFixed64(buf, v);
    EXPECT_EQ(DecodeFixed64(buf), v);
  }
  EXPECT_EQ(Hex64(0xdeadbeef), "0x00000000deadbeef");
  EXPECT_EQ(Hex32(0xbeef), "0x0000beef");
}

TEST(DType, NamesAndSizesRoundTrip) {
  for (uint8_t v = 0; v <= kMaxDTypeValue; ++v) {
    auto t = static_cast<DType>(v);
    auto parsed = ParseDType(DTypeName(t));
    ASSERT_TRUE(parsed.has_value()) << int(v);
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_FALSE(ParseDType("f31").has_value());
  EXPECT_FALSE(IsValidDType(kMaxDTypeValue + 1));
}

}  // namespace
}  // namespace dgrr
