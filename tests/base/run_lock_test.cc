// RunLock: one holder at a time, refused at once with the holder's pid, and
// never blocked by a holder that was killed.
#include "base/run_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace dgrr {
namespace {

namespace fs = std::filesystem;

class RunLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("dgrr_run_lock_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(RunLockTest, OneHolderAtATimeAndTheSecondIsToldWho) {
  auto first = RunLock::Acquire(dir_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = RunLock::Acquire(dir_);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsIOError()) << second.status().ToString();
  EXPECT_NE(second.status().message().find(dir_), std::string::npos);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(::getpid())), std::string::npos)
      << second.status().message();
  // Moving keeps it held; destroying releases it.
  RunLock moved = std::move(first).value();
  EXPECT_FALSE(RunLock::Acquire(dir_).ok());
  { RunLock gone = std::move(moved); }
  EXPECT_TRUE(RunLock::Acquire(dir_).ok());
}

TEST_F(RunLockTest, AHolderKilledBySigkillDoesNotBlock) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    auto held = RunLock::Acquire(dir_);
    const char c = held.ok() ? 'y' : 'n';
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    ::pause();  // holds the lock until killed
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  auto refused = RunLock::Acquire(dir_);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("pid " + std::to_string(child)), std::string::npos)
      << refused.status().message();
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  // The kernel released the lock with the holder; the directory is as it was.
  EXPECT_TRUE(fs::is_empty(dir_));
  auto after = RunLock::Acquire(dir_);
  EXPECT_TRUE(after.ok()) << after.status().ToString();
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(RunLockTest, AChildForkedWhileTheLockIsHeldDoesNotKeepIt) {
  // A DataLoader worker or any other forked child: alive after the parent
  // released the lock, it must not hold the run.
  int go[2], running[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(running), 0);
  pid_t child;
  {
    auto held = RunLock::Acquire(dir_);
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    child = ::fork();
    if (child == 0) {
      // fork() has returned here, so the child's fork handlers have run.
      if (::write(running[1], "r", 1) != 1) ::_exit(2);
      char c;
      ssize_t n = ::read(go[0], &c, 1);  // stays alive until the parent says
      ::_exit(n == 1 ? 0 : 1);
    }
    char r = 0;
    ASSERT_EQ(::read(running[0], &r, 1), 1);
    // While the parent holds it, it is held.
    EXPECT_FALSE(RunLock::Acquire(dir_).ok());
  }
  auto again = RunLock::Acquire(dir_);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(go[0]);
  ::close(go[1]);
  ::close(running[0]);
  ::close(running[1]);
}

TEST_F(RunLockTest, LockingWritesNothingAndTouchesNoFileOfTheUsers) {
  // A user's own file named like a lock, and a link out of the directory:
  // neither is opened, let alone truncated.
  { std::ofstream(dir_ + "/lock") << "my notes\n"; }
  const std::string outside = dir_ + "_outside";
  { std::ofstream(outside) << "keep\n"; }
  fs::create_symlink(outside, dir_ + "/dgrr.lock");
  {
    auto lock = RunLock::Acquire(dir_);
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
    EXPECT_FALSE(RunLock::Acquire(dir_).ok());
  }
  std::ifstream notes(dir_ + "/lock"), kept(outside);
  std::string a, b;
  std::getline(notes, a);
  std::getline(kept, b);
  EXPECT_EQ(a, "my notes");
  EXPECT_EQ(b, "keep");
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 2u);
  fs::remove(outside);
}

TEST_F(RunLockTest, AMissingDirectoryIsAnError) {
  auto lock = RunLock::Acquire(dir_ + "/absent");
  EXPECT_FALSE(lock.ok());
  EXPECT_FALSE(fs::exists(dir_ + "/absent"));
}

}  // namespace
}  // namespace dgrr
