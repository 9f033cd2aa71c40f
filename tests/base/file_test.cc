#include "base/file.h"

#include <gtest/gtest.h>

#include "tests/support/temp_dir_test.h"
#include <unistd.h>

#include <filesystem>

namespace dgrr {
namespace {

class FileTest : public ::dgrr::test_support::TempDirTest {
 protected:
  size_t EntryCount() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir_),
                                             std::filesystem::directory_iterator()));
  }
};

TEST_F(FileTest, AtomicWriteReplacesWholeFile) {
  const std::string p = Path("a.json");
  ASSERT_TRUE(WriteFileAtomically(p, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(p, "second, longer").ok());
  auto content = ReadFileToString(p);
  ASSERT_TRUE(content.ok());
  EXPECT_EQ(*content, "second, longer");
  EXPECT_EQ(EntryCount(), 1u) << "no temporary file may be left behind";
}

TEST_F(FileTest, FailedFillLeavesNothingAndKeepsOldFile) {
  const std::string p = Path("b.bin");
  ASSERT_TRUE(WriteFileAtomically(p, "old").ok());
  Status s = CommitFileAtomically(p, [](const std::string& tmp) {
    auto f = OpenWritableFile(tmp, true);
    EXPECT_TRUE(f.ok());
    EXPECT_TRUE((*f)->Append("partial", 7).ok());
    return Status::IOError("simulated failure half way");
  });
  EXPECT_TRUE(s.IsIOError());
  EXPECT_EQ(*ReadFileToString(p), "old");
  EXPECT_EQ(EntryCount(), 1u);
}

TEST_F(FileTest, MissingFileIsNotFoundNamingThePath) {
  auto r = ReadFileToString(Path("nope"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound());
  EXPECT_NE(r.status().message().find("nope"), std::string::npos);
}

TEST_F(FileTest, AppendThenTruncate) {
  const std::string p = Path("c.bin");
  auto f = OpenWritableFile(p, true);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append("0123456789", 10).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_FALSE((*f)->Append("x", 1).ok());
  ASSERT_TRUE(TruncateFile(p, 4).ok());
  EXPECT_EQ(*FileSize(p), 4u);
  EXPECT_EQ(*ReadFileToString(p), "0123");
}

TEST_F(FileTest, UnwritableDirectoryIsAnError) {
  auto f = OpenWritableFile(Path("no/such/dir/file"), true);
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
}

}  // namespace
}  // namespace dgrr
