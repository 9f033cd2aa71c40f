// The bash completion script (cli/completion/dgrr.bash), sourced in a real
// bash: it offers every registered command and nothing else at the first
// word, and a command's own options (read from its --help) after a dash.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include "cli/command.h"

namespace dgrr::cli {
namespace {

// COMPREPLY, one word a line, for the command line `words` completed at its last word.
std::set<std::string> Complete(const std::string& words) {
  const std::string script = std::string(DGRR_SOURCE_DIR) + "/cli/completion/dgrr.bash";
  const std::string dgrr = std::string(DGRR_BINARY_DIR) + "/cli/dgrr";
  const std::string command = "bash --norc --noprofile -c 'source " + script + " && COMP_WORDS=(" + dgrr + " " +
                              words + ") && COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) && _dgrr && "
                              "printf \"%s\\n\" \"${COMPREPLY[@]}\"' 2>&1";
  std::set<std::string> out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buffer;
  std::string text;
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) text += buffer.data();
  EXPECT_EQ(pclose(pipe), 0) << text;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) out.insert(line);
  }
  return out;
}

std::set<std::string> ShippedCommandNames() {
  std::set<std::string> names;
  for (const Command& c : AllCommands()) {
    if (c.name.rfind("test-", 0) != 0) names.insert(c.name);  // bad_input_test.cc's own
  }
  return names;
}

TEST(Completion, TheFirstWordIsEveryRegisteredCommand) {
  std::set<std::string> want = ShippedCommandNames();
  want.insert({"help", "--help", "--version"});
  EXPECT_EQ(Complete("\"\""), want);
  EXPECT_EQ(Complete("re"), (std::set<std::string>{"replay", "report"}));
  std::set<std::string> commands = ShippedCommandNames();
  EXPECT_EQ(Complete("help \"\""), commands);
}

TEST(Completion, AfterADashEachCommandsOwnOptions) {
  const std::set<std::string> train = Complete("train --");
  for (const char* option : {"--out", "--steps", "--resume", "--json", "--quiet", "--ckpt-every", "--help"}) {
    EXPECT_EQ(train.count(option), 1u) << option;
  }
  EXPECT_EQ(train.count("--good"), 0u) << "bisect's, not train's";
  EXPECT_EQ(Complete("bisect --k"), (std::set<std::string>{"--keep"}));
  EXPECT_EQ(Complete("verify --q"), (std::set<std::string>{"--quiet"}));
  // Every command answers with at least --help.
  for (const std::string& name : ShippedCommandNames()) {
    EXPECT_EQ(Complete(name + " --hel"), (std::set<std::string>{"--help"})) << name;
  }
}

TEST(Completion, OptionValuesWithAFixedSet) {
  EXPECT_EQ(Complete("train --model \"\""), (std::set<std::string>{"tiny", "small"}));
  EXPECT_EQ(Complete("inspect x --type b"), (std::set<std::string>{"boundary"}));
}

}  // namespace
}  // namespace dgrr::cli
