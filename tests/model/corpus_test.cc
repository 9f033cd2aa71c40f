#include "model/corpus.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "base/file.h"

namespace dgrr::model {
namespace {

TEST(Corpus, ArithmeticIsAPureFunctionOfTheSeed) {
  const std::string a = ArithmeticCorpus(42, 5000);
  EXPECT_EQ(a.size(), 5000u);
  EXPECT_EQ(a, ArithmeticCorpus(42, 5000));
  EXPECT_NE(a, ArithmeticCorpus(43, 5000));
  // A longer corpus extends the shorter one.
  EXPECT_EQ(ArithmeticCorpus(42, 9000).substr(0, 5000), a);
}

// Every complete line is a true equation "a<op>b=c".
TEST(Corpus, LinesAreCorrectArithmetic) {
  std::istringstream lines(ArithmeticCorpus(7, 20000));
  std::string line;
  int checked = 0, ops[3] = {0, 0, 0};
  while (std::getline(lines, line) && !lines.eof()) {
    const size_t op_pos = line.find_first_of("+-*", 1);
    const size_t eq = line.find('=');
    ASSERT_NE(op_pos, std::string::npos) << line;
    ASSERT_NE(eq, std::string::npos) << line;
    const long long a = std::stoll(line.substr(0, op_pos));
    const long long b = std::stoll(line.substr(op_pos + 1, eq - op_pos - 1));
    const long long c = std::stoll(line.substr(eq + 1));
    const char op = line[op_pos];
    const long long expected = op == '+' ? a + b : op == '-' ? a - b : a * b;
    EXPECT_EQ(c, expected) << line;
    ops[op == '+' ? 0 : op == '-' ? 1 : 2]++;
    ++checked;
  }
  EXPECT_GT(checked, 1000);
  for (int n : ops) EXPECT_GT(n, 100);
}

TEST(Dataset, ExamplesAreFixedWindows) {
  auto ds = Dataset::FromText("abcdefghij", 3);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->num_examples(), 3u);  // "abcd", "defg", "ghij"
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ds->Example(1)), 4), "defg");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ds->Example(2)), 4), "ghij");
  EXPECT_TRUE(Dataset::FromText("abc", 3).status().IsInvalidArgument());
  auto arithmetic = Dataset::Arithmetic(1, 32, 4096);
  ASSERT_TRUE(arithmetic.ok());
  EXPECT_EQ(arithmetic->num_examples(), 4095u / 32u);
}

TEST(Dataset, LoadsAnyFilesBytes) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("dgrr_model_corpus_" + std::to_string(getpid()));
  ASSERT_TRUE(CreateDirectories(dir).ok());
  const std::string path = dir + "/text.bin";
  const std::string bytes("\x00\xff hello\nworld", 14);
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  auto ds = Dataset::FromFile(path, 4);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->text(), bytes);
  EXPECT_EQ(ds->Example(0)[1], 0xff);
  auto too_short = Dataset::FromFile(path, 20);
  EXPECT_TRUE(too_short.status().IsInvalidArgument());
  EXPECT_NE(too_short.status().message().find(path), std::string::npos);
  EXPECT_FALSE(Dataset::FromFile(dir + "/missing", 4).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dgrr::model
