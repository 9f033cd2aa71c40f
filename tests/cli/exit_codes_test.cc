// Per-command exit codes: every registered command's --help lists exactly the
// codes its registration declares (cli/command.h, the one place they live),
// and what the commands really return on good and bad input stays inside
// those lists (verify never says "divergence", compare does).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "tests/cli/run_captured.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::cli {
namespace {

// The codes under "Exit codes:" in a help text: each line "  N  meaning".
std::vector<int> ListedExitCodes(const std::string& help) {
  std::vector<int> codes;
  const size_t table = help.find("Exit codes:\n");
  if (table == std::string::npos) return codes;
  std::istringstream lines(help.substr(table + 12));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() < 3 || line[0] != ' ' || line[1] != ' ' || !std::isdigit(static_cast<unsigned char>(line[2]))) {
      continue;  // a meaning's continuation line
    }
    codes.push_back(std::stoi(line.substr(2)));
  }
  return codes;
}

// The commands the dgrr binary has: the registry less what tests register
// for themselves (bad_input_test.cc's "test-throw-*", which only throw).
std::vector<Command> ShippedCommands() {
  std::vector<Command> shipped;
  for (const Command& c : AllCommands()) {
    if (c.name.rfind("test-", 0) != 0) shipped.push_back(c);
  }
  return shipped;
}

const std::vector<int>& DeclaredCodes(const std::string& name) {
  const Command* command = FindCommand(name);
  EXPECT_NE(command, nullptr) << name;
  static const std::vector<int> none;
  return command != nullptr ? command->exit_codes : none;
}

bool Declares(const std::string& name, int code) {
  const std::vector<int>& codes = DeclaredCodes(name);
  return std::find(codes.begin(), codes.end(), code) != codes.end();
}

TEST(ExitCodes, EveryCommandsHelpListsExactlyItsDeclaredCodes) {
  ASSERT_GE(ShippedCommands().size(), 11u);
  for (const Command& c : ShippedCommands()) {
    SCOPED_TRACE(c.name);
    // 0, a bad command line (1) and an I/O error or caught exception (2) are
    // possible for every command; the list is ascending without repeats.
    ASSERT_GE(c.exit_codes.size(), 3u);
    EXPECT_EQ(std::vector<int>(c.exit_codes.begin(), c.exit_codes.begin() + 3), (std::vector<int>{0, 1, 2}));
    EXPECT_TRUE(std::is_sorted(c.exit_codes.begin(), c.exit_codes.end()));
    EXPECT_EQ(std::set<int>(c.exit_codes.begin(), c.exit_codes.end()).size(), c.exit_codes.size());

    const CommandOutput help = RunCaptured({c.name, "--help"});
    EXPECT_EQ(help.rc, 0);
    EXPECT_EQ(ListedExitCodes(help.out), c.exit_codes);
    EXPECT_EQ(help.out.find("undocumented"), std::string::npos);
    // `dgrr help NAME` is the same text.
    EXPECT_EQ(RunCaptured({"help", c.name}).out, help.out);
  }
}

TEST(ExitCodes, TopLevelHelpListsEveryCodeAnyCommandReturns) {
  const CommandOutput help = RunCaptured({"--help"});
  std::set<int> all;
  for (const Command& c : AllCommands()) all.insert(c.exit_codes.begin(), c.exit_codes.end());
  EXPECT_EQ(ListedExitCodes(help.out), std::vector<int>(all.begin(), all.end()));
}

TEST(ExitCodes, OnlyTheCommandsThatCompareOrReplayDeclareFourOrFive) {
  for (const char* name : {"verify", "inspect", "plan", "env"}) {
    EXPECT_FALSE(Declares(name, kExitDivergence)) << name;
    EXPECT_FALSE(Declares(name, kExitReplayIntegrity)) << name;
  }
  EXPECT_FALSE(Declares("env", kExitInvalidData));
  for (const char* name : {"compare", "report", "diff-tensor", "bisect"}) EXPECT_TRUE(Declares(name, kExitDivergence));
  for (const char* name : {"replay", "rollback", "bisect"}) EXPECT_TRUE(Declares(name, kExitReplayIntegrity));
  EXPECT_TRUE(Declares("train", kExitInterrupted));
  EXPECT_TRUE(Declares("train", kExitTerminated));
  EXPECT_FALSE(Declares("compare", kExitReplayIntegrity));
}

class ExitCodesReturnedTest : public test_support::TempDirTest {
 protected:
  // Runs `args` and expects `want`, which the command must declare.
  void ExpectReturns(const std::vector<std::string>& args, int want) {
    const CommandOutput r = RunCaptured(args);
    EXPECT_EQ(r.rc, want) << args[0] << ": " << r.err;
    EXPECT_TRUE(Declares(args[0], r.rc)) << args[0] << " returned undeclared " << r.rc;
  }
};

TEST_F(ExitCodesReturnedTest, WhatCommandsReturnIsDeclared) {
  const std::string a = Path("a"), b = Path("b");
  ASSERT_EQ(RunCaptured({"train", "--out", a, "--steps", "2", "--quiet"}).rc, 0);
  ASSERT_EQ(RunCaptured({"train", "--out", b, "--steps", "2", "--seed", "7", "--quiet"}).rc, 0);
  const std::string garbage = Path("garbage.trace");
  std::ofstream(garbage) << "this is not a dgrr trace, whatever its name says";

  // Two valid runs that differ: verify checks each (0, never 4); compare says 4.
  ExpectReturns({"verify", a, b}, kExitOk);
  ExpectReturns({"compare", a, b}, kExitDivergence);
  ExpectReturns({"compare", a, a}, kExitOk);
  ExpectReturns({"inspect", a}, kExitOk);
  ExpectReturns({"plan", a}, kExitOk);
  ExpectReturns({"replay", a}, kExitOk);
  // Invalid files are 3, missing ones 2, bad options 1, for every reader.
  ExpectReturns({"verify", garbage}, kExitInvalidData);
  ExpectReturns({"inspect", garbage}, kExitInvalidData);
  ExpectReturns({"compare", garbage, a}, kExitInvalidData);
  for (const char* name : {"verify", "inspect"}) ExpectReturns({name, Path("missing.trace")}, kExitIO);
  for (const Command& c : ShippedCommands()) ExpectReturns({c.name, "--no-such-option"}, kExitUsage);
}

}  // namespace
}  // namespace dgrr::cli
