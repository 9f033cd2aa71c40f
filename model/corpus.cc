#include "model/corpus.h"

#include <string>

#include "base/file.h"
#include "model/splitmix.h"

namespace dgrr::model {
namespace {

// One line "a<op>b=c\n": sums and differences of one- or two-digit numbers,
// products of a digit and a number below 100. Short operands keep the share
// of predictable characters (the result, '=', '\n') high enough that a tiny
// model visibly learns within a couple of hundred steps.
std::string ArithmeticLine(SplitMixStream& rng) {
  static constexpr uint32_t kPowers[] = {10, 100};
  const uint32_t op = rng.Below(3);
  int64_t a, b, c;
  char sign;
  if (op == 2) {
    a = rng.Below(10);
    b = rng.Below(100);
    c = a * b;
    sign = '*';
  } else {
    a = rng.Below(kPowers[rng.Below(2)]);
    b = rng.Below(kPowers[rng.Below(2)]);
    c = op == 0 ? a + b : a - b;
    sign = op == 0 ? '+' : '-';
  }
  return std::to_string(a) + sign + std::to_string(b) + '=' + std::to_string(c) + '\n';
}

}  // namespace

std::string ArithmeticCorpus(uint64_t seed, size_t num_bytes) {
  SplitMixStream rng(SplitMix64(seed));
  std::string text;
  text.reserve(num_bytes + 32);
  while (text.size() < num_bytes) text += ArithmeticLine(rng);
  text.resize(num_bytes);
  return text;
}

Dataset::Dataset(std::string text, int seq_len)
    : text_(std::move(text)),
      seq_len_(seq_len),
      num_examples_((text_.size() - 1) / static_cast<uint64_t>(seq_len)) {}

StatusOr<Dataset> Dataset::FromText(std::string text, int seq_len) {
  if (seq_len < 1) return Status::InvalidArgument("dataset: seq_len must be positive");
  if (text.size() < static_cast<size_t>(seq_len) + 1) {
    return Status::InvalidArgument("dataset: text has " + std::to_string(text.size()) +
                                   " bytes, fewer than one example of " +
                                   std::to_string(seq_len + 1));
  }
  return Dataset(std::move(text), seq_len);
}

StatusOr<Dataset> Dataset::FromFile(const std::string& path, int seq_len) {
  // Read whole, so capped (kMaxCorpusFileBytes, docs/files.md): `--data
  // /dev/zero` or a FIFO is refused up front, like any bad --data value
  // (exit 1), not as a damaged run file.
  StatusOr<std::string> read = ReadFileToString(path, kMaxCorpusFileBytes);
  if (!read.ok()) {
    if (read.status().IsCorruption()) return Status::InvalidArgument(read.status().message());
    return read.status();
  }
  std::string text = std::move(read).value();
  StatusOr<Dataset> dataset = FromText(std::move(text), seq_len);
  if (!dataset.ok()) return dataset.status().WithPrefix(path);
  return dataset;
}

StatusOr<Dataset> Dataset::Arithmetic(uint64_t seed, int seq_len, size_t num_bytes) {
  return FromText(ArithmeticCorpus(seed, num_bytes), seq_len);
}

}  // namespace dgrr::model
