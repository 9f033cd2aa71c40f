// The cross-rank audit (`dgrr train --audit-every K`): every K steps each
// rank recomputes its neighbour's shard and compares the per-example
// fingerprints with the ones the neighbour computed for real.
//
// It works because every per-example result (each boundary of the forward
// and backward pass, and the example's parameter gradient) is a function of
// the parameters at the step start, the example's tokens and the Philox
// streams keyed by (step, example) alone: which rank, thread or block ran the
// example does not enter. A rank whose arithmetic is silently wrong is then
// named by the rank that audits it, even when the all-reduce has already
// spread the wrong gradient to every rank's parameters and the per-step
// parameter check therefore sees all ranks agree.
//
// This file holds the parts that do not know about ranks: the table of
// fingerprints (examples x audited boundaries), the observer that fills it
// from a running ComputeExamples, and the comparison of two tables.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fingerprint/fingerprint.h"
#include "model/config.h"
#include "model/hooks.h"

namespace dgrr::model {

// What is audited for each example, in this order: the input tokens, every
// per-example boundary in the order an example reports them, then the
// example's gradient of each parameter tensor (layout order). The order is
// also the order of "first differing": the earliest corrupted value.
class AuditBoundaries {
 public:
  AuditBoundaries(const std::vector<std::string>& per_example_names, const ParameterLayout& layout);
  size_t size() const { return names_.size(); }
  const std::string& name(size_t id) const { return names_[id]; }
  // The id of a per-example boundary; -1 for a name that is not one.
  int IdOf(std::string_view name) const;
  static constexpr size_t kTokensId = 0;
  size_t first_gradient_id() const { return first_gradient_; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> names_;
  std::unordered_map<std::string, int, Hash, std::equal_to<>> ids_;
  size_t first_gradient_ = 0;
};

// Fingerprints of `examples` consecutive examples x every audited boundary.
// A zero fingerprint with `seen` false marks a boundary the example never
// reported (a table that saw everything has none).
struct AuditTable {
  struct Entry {
    Fingerprint fp;
    uint64_t seen = 0;  // 0 or 1; 64 bits so that the table is plain bytes to send
  };
  void Reset(size_t examples, size_t boundaries);
  Entry& at(size_t example, size_t boundary) { return entries[example * boundaries + boundary]; }
  const Entry& at(size_t example, size_t boundary) const { return entries[example * boundaries + boundary]; }
  size_t bytes() const { return entries.size() * sizeof(Entry); }

  size_t examples = 0, boundaries = 0;
  std::vector<Entry> entries;
};

// Fills an AuditTable from the per-example boundaries of a ComputeExamples
// run, passing every call on to the hooks it wraps (the run's own recording
// and fault injection), so wrapping changes nothing the run computes or
// records. A boundary is fingerprinted after the wrapped mutator has run:
// the value the following operators read, which is what a fault corrupted.
// Workers call it concurrently, each for its own examples only.
class AuditTap final : public BoundaryObserver, public TensorMutator {
 public:
  AuditTap(const AuditBoundaries& boundaries, AuditTable& table, uint64_t first_example,
           BoundaryObserver* observer, TensorMutator* mutator)
      : boundaries_(boundaries), table_(table), first_(first_example), observer_(observer), mutator_(mutator) {}

  void OnBoundary(std::string_view name, Phase phase, Operator op, bool is_output, const float* data,
                  std::span<const int64_t> dims, uint64_t first_example, uint32_t example_count) override;
  void AfterBoundary(std::string_view name, Phase phase, float* data, size_t count,
                     uint64_t first_example) override;

 private:
  const AuditBoundaries& boundaries_;
  AuditTable& table_;
  uint64_t first_;
  BoundaryObserver* observer_;
  TensorMutator* mutator_;
};

// The entries no boundary observation fills: example i's tokens (windows of
// `window` bytes back to back) and its parameter gradient, tensor by tensor.
void AuditTokensAndGradients(const AuditBoundaries& boundaries, const ParameterLayout& layout,
                             const uint8_t* tokens, size_t window, std::span<float* const> gradients,
                             AuditTable& table);

// The first difference between what a rank computed (`reported`) and what
// its auditor recomputed (`expected`): the lowest example with any, at its
// first boundary in audit order.
struct AuditMismatch {
  bool found = false;
  uint64_t example = 0;      // index within the tables
  uint64_t boundary = 0;     // AuditBoundaries id
  uint64_t examples_differing = 0;
  Fingerprint reported, expected;
};
AuditMismatch FirstAuditMismatch(const AuditTable& reported, const AuditTable& expected);

}  // namespace dgrr::model
