#include "base/status.h"

#include <gtest/gtest.h>

namespace dgrr {
namespace {

TEST(Status, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(ExitCodeFor(s), kExitOk);
}

TEST(Status, CodesMapToDocumentedExitCodes) {
  EXPECT_EQ(ExitCodeFor(Status::InvalidArgument("x")), 1);
  EXPECT_EQ(ExitCodeFor(Status::IOError("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::NotFound("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::Corruption("x")), 3);
  EXPECT_EQ(ExitCodeFor(Status::Divergence("x")), 4);
  EXPECT_EQ(ExitCodeFor(Status::IntegrityFailure("x")), 5);
}

TEST(Status, PrefixKeepsCode) {
  Status s = Status::Corruption("record 3: bad crc").WithPrefix("a.trace");
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.message(), "a.trace: record 3: bad crc");
  EXPECT_EQ(s.ToString(), "Corruption: a.trace: record 3: bad crc");
}

StatusOr<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Status UseHalf(int x, int* out) {
  DGRR_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::OK();
}

TEST(StatusOr, ValueOrStatus) {
  int out = 0;
  EXPECT_TRUE(UseHalf(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status s = UseHalf(7, &out);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(out, 4);
}

}  // namespace
}  // namespace dgrr
