#include "base/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "tests/support/temp_dir_test.h"

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

TEST_F(FileTest, WriteIfChangedLeavesAnIdenticalFileAlone) {
  const std::string p = Path("env.json");
  auto inode = [&p] {
    struct stat st;
    EXPECT_EQ(::stat(p.c_str(), &st), 0);
    return st.st_ino;
  };
  ASSERT_TRUE(WriteFileAtomicallyIfChanged(p, "same").ok());  // absent: written
  EXPECT_EQ(*ReadFileToString(p), "same");
  const ino_t first = inode();
  ASSERT_TRUE(WriteFileAtomicallyIfChanged(p, "same").ok());
  EXPECT_EQ(inode(), first) << "an identical file is not replaced";
  ASSERT_TRUE(WriteFileAtomicallyIfChanged(p, "sam").ok());  // a prefix is a change
  EXPECT_EQ(*ReadFileToString(p), "sam");
  ASSERT_TRUE(WriteFileAtomicallyIfChanged(p, "same, and longer").ok());
  EXPECT_EQ(*ReadFileToString(p), "same, and longer");
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

// Bounded input: what is not a regular file is refused before a byte is read,
// and a FIFO with no writer does not block the open.
TEST_F(FileTest, NonRegularFilesAreRefusedWithoutBlocking) {
  const std::string fifo = Path("config.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  for (const std::string& path : {fifo, dir_.string(), std::string("/dev/zero")}) {
    SCOPED_TRACE(path);
    auto whole = ReadFileToString(path);
    ASSERT_FALSE(whole.ok());
    EXPECT_TRUE(whole.status().IsCorruption()) << whole.status().ToString();
    EXPECT_NE(whole.status().message().find(path + ": "), std::string::npos);
    EXPECT_NE(whole.status().message().find("not a regular file"), std::string::npos);
    auto random = OpenRandomAccessFile(path);
    ASSERT_FALSE(random.ok());
    EXPECT_TRUE(random.status().IsCorruption());
    auto fd = OpenRegularFileDescriptor(path);
    EXPECT_FALSE(fd.ok());
  }
  ASSERT_EQ(::symlink("/dev/zero", Path("zero.json").c_str()), 0);
  EXPECT_TRUE(ReadFileToString(Path("zero.json")).status().IsCorruption()) << "a link is followed, then refused";
}

TEST_F(FileTest, ReadCapRefusesLargerFiles) {
  const std::string p = Path("big.json");
  ASSERT_TRUE(WriteFileAtomically(p, std::string(1000, 'x')).ok());
  EXPECT_TRUE(ReadFileToString(p, 1000).ok());
  auto over = ReadFileToString(p, 999);
  ASSERT_FALSE(over.ok());
  EXPECT_TRUE(over.status().IsCorruption());
  EXPECT_NE(over.status().message().find("999-byte limit"), std::string::npos) << over.status().ToString();
  EXPECT_EQ(kDefaultReadCapBytes, kMaxJsonFileBytes);
}

TEST_F(FileTest, FilesWhoseSizeIsUnknownAreReadWhole) {
  auto status = ReadFileToString("/proc/self/status");  // fstat says 0 bytes
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_NE(status->find("Name:"), std::string::npos);
  EXPECT_NE(status->find("VmRSS:"), std::string::npos) << "read past the first buffer";
  EXPECT_TRUE(ReadFileToString("/proc/self/status", 16).status().IsCorruption());
}

TEST_F(FileTest, ListRenameRemove) {
  ASSERT_TRUE(WriteFileAtomically(Path("b"), "1").ok());
  ASSERT_TRUE(WriteFileAtomically(Path("a"), "2").ok());
  ASSERT_TRUE(RenameFile(Path("b"), Path("c")).ok());
  EXPECT_EQ(*ListDirectory(dir_.string()), (std::vector<std::string>{"a", "c"}));
  ASSERT_TRUE(RemoveFile(Path("a")).ok());
  EXPECT_TRUE(RemoveFile(Path("a")).ok()) << "removing a missing file is not an error";
  EXPECT_EQ(*ListDirectory(dir_.string()), (std::vector<std::string>{"c"}));
  EXPECT_TRUE(ListDirectory(Path("missing")).status().IsNotFound());
}

TEST(MemoryFile, ReadsLikeAFile) {
  auto file = NewMemoryFile("mem.trace", "0123456789");
  char buf[8];
  EXPECT_EQ(*file->Read(6, 8, buf), 4u);
  EXPECT_EQ(std::string(buf, 4), "6789");
  EXPECT_EQ(*file->Read(10, 8, buf), 0u);
  EXPECT_EQ(*file->Read(99, 8, buf), 0u);
  EXPECT_EQ(*file->Size(), 10u);
  EXPECT_EQ(file->path(), "mem.trace");
}

TEST(FaultSpec, ParsesTheTestHookSyntax) {
  auto spec = FaultSpec::Parse("rename:2:ENOSPC:/ckpt/");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_FALSE(spec->any_op);
  EXPECT_EQ(spec->op, FileOp::kRename);
  EXPECT_EQ(spec->nth, 2u);
  EXPECT_EQ(spec->error, ENOSPC);
  EXPECT_EQ(spec->path_contains, "/ckpt/");
  EXPECT_FALSE(spec->short_write);
  spec = FaultSpec::Parse("append+short:0:5");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->short_write);
  EXPECT_EQ(spec->nth, 0u);
  EXPECT_EQ(spec->error, 5);
  EXPECT_TRUE(spec->path_contains.empty());
  spec = FaultSpec::Parse("any:1:EIO:C:/odd:path");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->any_op);
  EXPECT_EQ(spec->path_contains, "C:/odd:path");
  for (const char* bad : {"", "rename", "rename:1", "renam:1:EIO", "rename:x:EIO", "rename:1:EWHAT",
                          "append+long:1:EIO", "rename:-1:EIO", "rename:1:0"}) {
    EXPECT_FALSE(FaultSpec::Parse(bad).ok()) << bad;
  }
}

class FaultInjectorTest : public FileTest {};

TEST_F(FaultInjectorTest, FailsOnlyTheNthMatchingCall) {
  FaultInjectingFileSystem injector;
  ScopedFileSystemOverride use(&injector);
  FaultSpec spec;
  spec.any_op = false;
  spec.op = FileOp::kAppend;
  spec.path_contains = "b.log";
  spec.nth = 2;
  spec.error = ENOSPC;
  injector.SetFault(spec);
  auto a = OpenWritableFile(Path("a.log"), true);
  auto b = OpenWritableFile(Path("b.log"), true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->Append("x", 1).ok());
  EXPECT_TRUE((*b)->Append("1", 1).ok());
  EXPECT_TRUE((*a)->Append("x", 1).ok()) << "another path does not count";
  Status s = (*b)->Append("2", 1);
  EXPECT_TRUE(s.IsIOError());
  EXPECT_EQ(s.message(), Path("b.log") + ": write: " + std::strerror(ENOSPC));
  EXPECT_TRUE((*b)->Append("3", 1).ok()) << "only the nth fails";
  EXPECT_EQ(injector.injected(), 1u);
  EXPECT_EQ(injector.calls(FileOp::kAppend), 5u);
  EXPECT_EQ(injector.calls(FileOp::kOpenWrite), 2u);
  EXPECT_EQ(injector.calls(), 7u);
  EXPECT_EQ(ReadBytes(Path("b.log")), "13");
}

TEST_F(FaultInjectorTest, ShortWriteLandsHalfThenFails) {
  FaultInjectingFileSystem injector;
  ScopedFileSystemOverride use(&injector);
  auto spec = FaultSpec::Parse("append+short:1:ENOSPC");
  ASSERT_TRUE(spec.ok());
  injector.SetFault(*spec);
  auto f = OpenWritableFile(Path("s.bin"), true);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE((*f)->Append("abcdefgh", 8).ok());
  EXPECT_TRUE((*f)->Close().ok());
  EXPECT_EQ(ReadBytes(Path("s.bin")), "abcd");
}

TEST_F(FaultInjectorTest, EveryCallFailsWhenNthIsZero) {
  FaultInjectingFileSystem injector;
  ScopedFileSystemOverride use(&injector);
  auto spec = FaultSpec::Parse("any:0:EIO");
  ASSERT_TRUE(spec.ok());
  injector.SetFault(*spec);
  EXPECT_FALSE(WriteFileAtomically(Path("x"), "1").ok());
  EXPECT_FALSE(ReadFileToString(Path("x")).ok());
  EXPECT_FALSE(CreateDirectories(Path("d")).ok());
  EXPECT_FALSE(SyncDirectory(dir_.string()).ok());
  injector.ClearFault();
  EXPECT_TRUE(WriteFileAtomically(Path("x"), "1").ok());
  EXPECT_EQ(EntryCount(), 1u);
}

TEST_F(FaultInjectorTest, OverrideIsScoped) {
  FileSystem* before = FileSystem::Default();
  {
    FaultInjectingFileSystem injector;
    ScopedFileSystemOverride use(&injector);
    EXPECT_EQ(FileSystem::Default(), &injector);
  }
  EXPECT_EQ(FileSystem::Default(), before);
}

TEST_F(FileTest, AScratchDirectoryOfAKilledProcessIsRemovedByTheNextOne) {
  int channel[2];
  ASSERT_EQ(::pipe(channel), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    // Dies without running the destructor, as a SIGKILLed replay would.
    auto scratch = ScratchDirectory::Create("dgrr-replay", dir_);
    const std::string path = scratch.ok() ? scratch->path() : "";
    if (::write(channel[1], path.data(), path.size()) < 0) ::_exit(1);
    ::_exit(0);
  }
  ::close(channel[1]);
  char buf[4096] = {};
  const ssize_t n = ::read(channel[0], buf, sizeof buf - 1);
  ::close(channel[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_GT(n, 0);
  const std::string left_behind(buf, static_cast<size_t>(n));
  ASSERT_TRUE(std::filesystem::is_directory(left_behind));
  EXPECT_NE(left_behind.find("dgrr-replay-" + std::to_string(child) + "-"), std::string::npos) << left_behind;
  // One of a live process (this one), and one of another prefix, stay.
  const std::string live = Path("dgrr-replay-" + std::to_string(::getpid()) + "-abcdef");
  const std::string other = Path("dgrr-bisect-" + std::to_string(child) + "-abcdef");
  std::filesystem::create_directories(live);
  std::filesystem::create_directories(other);
  {
    auto next = ScratchDirectory::Create("dgrr-replay", dir_);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    EXPECT_FALSE(std::filesystem::exists(left_behind));
    EXPECT_TRUE(std::filesystem::is_directory(next->path()));
  }
  EXPECT_TRUE(std::filesystem::is_directory(live));
  EXPECT_TRUE(std::filesystem::is_directory(other));
}

}  // namespace
}  // namespace dgrr
