// trace_format/shape_text.h: the one way dgrr's text outputs write a shape.
#include "trace_format/shape_text.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/coding.h"

namespace dgrr::trace {
namespace {

TEST(ShapeTextTest, WritesDimsInBrackets) {
  EXPECT_EQ(ShapeText(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(ShapeText(std::vector<int64_t>{8}), "[8]");
  EXPECT_EQ(ShapeText(std::vector<int64_t>{2, 16, 64}), "[2,16,64]");
  EXPECT_EQ(ShapeText(std::vector<uint64_t>{3, 4}), "[3,4]");
}

TEST(ShapeTextTest, RecordShowsTheDimsThatFitAndMarksTheRest) {
  BoundaryRecord r;
  const uint64_t small[] = {4, 5};
  ASSERT_TRUE(SetShape(&r, small, 2).ok());
  EXPECT_EQ(StoredDims(r), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(ShapeText(r), "[4,5]");
  EXPECT_EQ(ShapeText(r, LongShape::kDigest), "[4,5]");

  BoundaryRecord scalar;
  ASSERT_TRUE(SetShape(&scalar, nullptr, 0).ok());
  EXPECT_EQ(ShapeText(scalar), "[]");

  const uint64_t full[] = {1, 2, 3, 4, 5, 6};  // exactly kInlineDims: all stored
  ASSERT_TRUE(SetShape(&r, full, 6).ok());
  EXPECT_EQ(ShapeText(r), "[1,2,3,4,5,6]");

  const uint64_t seven[] = {1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE(SetShape(&r, seven, 7).ok());
  EXPECT_EQ(StoredDims(r), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(ShapeText(r), "[1,2,3,4,5,...]");
  EXPECT_EQ(ShapeText(r, LongShape::kDigest),
            "[1,2,3,4,5,...(ndim 7, digest " + Hex64(ShapeDigest(seven, 7)) + ")]");
}

}  // namespace
}  // namespace dgrr::trace
