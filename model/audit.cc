#include "model/audit.h"

namespace dgrr::model {

AuditBoundaries::AuditBoundaries(const std::vector<std::string>& per_example_names,
                                 const ParameterLayout& layout) {
  names_.push_back("data.tokens");
  for (const auto& name : per_example_names) names_.push_back(name);
  first_gradient_ = names_.size();
  // Not trace boundaries (the trace holds only the all-reduced sums): the
  // example's own gradient, named so that a reader sees which tensor.
  for (const auto& tensor : layout.tensors()) names_.push_back("example." + GradientName(tensor.name));
  for (size_t id = 1; id < first_gradient_; ++id) ids_.emplace(names_[id], static_cast<int>(id));
}

int AuditBoundaries::IdOf(std::string_view name) const {
  auto it = ids_.find(name);
  return it == ids_.end() ? -1 : it->second;
}

void AuditTable::Reset(size_t n_examples, size_t n_boundaries) {
  examples = n_examples;
  boundaries = n_boundaries;
  entries.assign(examples * boundaries, Entry{});
}

void AuditTap::OnBoundary(std::string_view name, Phase phase, Operator op, bool is_output, const float* data,
                          std::span<const int64_t> dims, uint64_t first_example, uint32_t example_count) {
  if (observer_ != nullptr) {
    observer_->OnBoundary(name, phase, op, is_output, data, dims, first_example, example_count);
  }
}

void AuditTap::AfterBoundary(std::string_view name, Phase phase, float* data, size_t count,
                             uint64_t first_example) {
  if (mutator_ != nullptr) mutator_->AfterBoundary(name, phase, data, count, first_example);
  const int id = boundaries_.IdOf(name);
  if (id < 0 || first_example < first_ || first_example - first_ >= table_.examples) return;
  AuditTable::Entry& e = table_.at(first_example - first_, static_cast<size_t>(id));
  // A boundary an example reports twice (none does today) keeps both.
  const Fingerprint fp = FingerprintBytes(data, count * sizeof(float));
  if (e.seen != 0) {
    e.fp.xor64 ^= fp.xor64;
    e.fp.xxh3 = e.fp.xxh3 * 0x9e3779b97f4a7c15ull + fp.xxh3;
  } else {
    e.fp = fp;
    e.seen = 1;
  }
}

void AuditTokensAndGradients(const AuditBoundaries& boundaries, const ParameterLayout& layout,
                             const uint8_t* tokens, size_t window, std::span<float* const> gradients,
                             AuditTable& table) {
  for (size_t i = 0; i < table.examples; ++i) {
    table.at(i, AuditBoundaries::kTokensId) = {FingerprintBytes(tokens + i * window, window), 1};
    const std::vector<NamedTensor>& tensors = layout.tensors();
    for (size_t k = 0; k < tensors.size(); ++k) {
      const float* g = gradients[i] + tensors[k].offset;
      table.at(i, boundaries.first_gradient_id() + k) = {FingerprintBytes(g, tensors[k].size * sizeof(float)), 1};
    }
  }
}

AuditMismatch FirstAuditMismatch(const AuditTable& reported, const AuditTable& expected) {
  AuditMismatch m;
  const size_t examples = std::min(reported.examples, expected.examples);
  for (size_t i = 0; i < examples; ++i) {
    for (size_t b = 0; b < reported.boundaries && b < expected.boundaries; ++b) {
      const AuditTable::Entry& got = reported.at(i, b);
      const AuditTable::Entry& want = expected.at(i, b);
      if (got.seen == want.seen && got.fp == want.fp) continue;
      if (!m.found) {
        m.found = true;
        m.example = i;
        m.boundary = b;
        m.reported = got.fp;
        m.expected = want.fp;
      }
      ++m.examples_differing;
      break;
    }
  }
  return m;
}

}  // namespace dgrr::model
