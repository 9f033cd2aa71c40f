// The example client, run as a separate program: twice with the same
// settings and with 1, 2 and 4 threads. Every record of every trace must be
// identical apart from the run id and the host timestamps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "trace_format/reader.h"
#include "tests/support/timeless_records.h"

namespace {

namespace fs = std::filesystem;
using dgrr::trace::Record;

fs::path TestDir() {
  return fs::temp_directory_path() / ("dgrr_example_test_" + std::to_string(::getpid()));
}

int RunExample(const std::string& out, int threads, const std::string& extra = "") {
  std::string cmd = std::string(MLP_REGRESSION_BIN) + " --out " + out + " --steps 12 --batch 24" +
                    " --threads " + std::to_string(threads) + " " + extra + " > /dev/null";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<Record> RecordsWithoutTimes(const std::string& run_dir) {
  return dgrr::test_support::TimelessRecords(run_dir + "/rank0.trace");
}

TEST(MlpRegressionExample, TracesAgreeAcrossRunsAndThreadCounts) {
  const fs::path dir = TestDir();
  fs::remove_all(dir);
  ASSERT_EQ(RunExample((dir / "a").string(), 1), 0);
  ASSERT_EQ(RunExample((dir / "b").string(), 1), 0);
  ASSERT_EQ(RunExample((dir / "t2").string(), 2), 0);
  ASSERT_EQ(RunExample((dir / "t4").string(), 4), 0);
  const auto a = RecordsWithoutTimes((dir / "a").string());
  ASSERT_GT(a.size(), 12u * 24u * 2u) << "every example's boundaries are recorded";
  for (const char* other : {"b", "t2", "t4"}) {
    const auto b = RecordsWithoutTimes((dir / other).string());
    ASSERT_EQ(a.size(), b.size()) << other;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(a[i].body == b[i].body) << "run " << other << " differs at record " << i;
    }
  }
  fs::remove_all(dir);
}

TEST(MlpRegressionExample, ADifferentSeedChangesTheTrace) {
  const fs::path dir = TestDir() / "seed";
  fs::remove_all(dir);
  ASSERT_EQ(RunExample((dir / "a").string(), 2), 0);
  ASSERT_EQ(RunExample((dir / "b").string(), 2, "--seed 2"), 0);
  const auto a = RecordsWithoutTimes((dir / "a").string());
  const auto b = RecordsWithoutTimes((dir / "b").string());
  ASSERT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += !(a[i].body == b[i].body);
  EXPECT_GT(differ, a.size() / 2) << "the test above would pass vacuously if seeds did nothing";
  fs::remove_all(dir);
}

TEST(MlpRegressionExample, RefusesExistingRunAndBadArguments) {
  const fs::path dir = TestDir() / "refuse";
  fs::remove_all(dir);
  ASSERT_EQ(RunExample(dir.string(), 1), 0);
  EXPECT_EQ(RunExample(dir.string(), 1, "2>/dev/null"), 1) << "existing run without --overwrite";
  EXPECT_EQ(RunExample(dir.string(), 1, "--overwrite"), 0);
  EXPECT_EQ(RunExample(dir.string(), 0, "--overwrite 2>/dev/null"), 1);
  fs::remove_all(TestDir());
}

}  // namespace
