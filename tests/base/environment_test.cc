// The environment lock (base/environment.h). setenv that adds a variable may
// move the environ array and free the old one while an unlocked getenv in
// another thread walks it: without the lock, the race below ends in SIGSEGV
// within a few thousand additions (every one of five tries of a plain
// getenv/setenv version of it crashed on the 2-core development machine).
#include "base/environment.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace dgrr {
namespace {

TEST(EnvironmentTest, ReadsWhileAnotherThreadAddsVariablesDoNotCrash) {
  ASSERT_TRUE(GetEnv("PATH").has_value());
  std::atomic<bool> done{false};
  std::atomic<int> bad_reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        if (GetEnv("DGRR_ENVIRONMENT_TEST_NEVER_SET")) ++bad_reads;
        if (GetEnvOrEmpty("PATH").empty()) ++bad_reads;
      }
    });
  }
  const std::string prefix = "DGRR_ENVIRONMENT_TEST_" + std::to_string(::getpid()) + "_";
  for (int i = 0; i < 5000; ++i) SetEnvIfUnset(prefix + std::to_string(i), std::to_string(i));
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad_reads.load(), 0);
  EXPECT_EQ(GetEnvOrEmpty((prefix + "4999").c_str()), "4999");
  for (int i = 0; i < 5000; ++i) ::unsetenv((prefix + std::to_string(i)).c_str());
}

TEST(EnvironmentTest, SetEnvIfUnsetKeepsAValueAlreadyThere) {
  const std::string name = "DGRR_ENVIRONMENT_TEST_KEEP_" + std::to_string(::getpid());
  EXPECT_FALSE(GetEnv(name.c_str()).has_value());
  SetEnvIfUnset(name, "first");
  SetEnvIfUnset(name, "second");
  EXPECT_EQ(GetEnvOrEmpty(name.c_str()), "first");
  ::unsetenv(name.c_str());
  EXPECT_EQ(GetEnvOrEmpty(name.c_str()), "");
}

}  // namespace
}  // namespace dgrr
