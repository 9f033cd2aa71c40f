#include "model/neighbour_audit.h"

#include <cstring>

#include "base/coding.h"
#include "model/philox_masks.h"
#include "trace_format/record.h"

namespace dgrr::model {
namespace {

// One finding per auditor, as plain bytes for the all-gather.
struct AuditFinding {
  uint64_t found = 0;
  uint64_t example = 0;  // global index
  uint64_t boundary = 0;
  uint64_t examples_differing = 0;
  Fingerprint reported, expected;
};

}  // namespace

NeighbourAudit::NeighbourAudit(const GptConfig& model, const ParameterLayout& layout,
                               const std::vector<std::string>& per_example_names, int threads, size_t shard,
                               uint64_t batch, const rng::RngStreams& rng, const Dataset& data)
    : layout_(layout),
      rng_(rng),
      data_(data),
      shard_(shard),
      batch_(batch),
      boundaries_(per_example_names, layout),
      scratch_(model, threads, shard),
      order_(rng, data.num_examples()),
      tokens_(shard * data.window()) {}

AuditTap& NeighbourAudit::BeginStep(uint64_t shard_first, BoundaryObserver* observer, TensorMutator* mutator) {
  for (AuditTable* table : {&mine_, &reported_, &expected_}) table->Reset(shard_, boundaries_.size());
  return tap_.emplace(boundaries_, mine_, shard_first, observer, mutator);
}

// Rank r sends what it computed to its auditor, rank (r-1) % R, receives
// the table of rank (r+1) % R, recomputes that rank's examples from the
// parameters as they were at the step start (the optimizer has not run) and
// compares. Every rank then learns every auditor's finding, so that all
// fail together, at the same step, with the same message.
Status NeighbourAudit::Run(int64_t step, Communicator& comm, const float* params, const uint8_t* tokens,
                           std::span<float* const> gradients, Session& session) {
  AuditTokensAndGradients(boundaries_, layout_, tokens, data_.window(), gradients, mine_);
  const int world = comm.size();
  const int auditor = (comm.rank() + world - 1) % world;
  const int neighbour = (comm.rank() + 1) % world;
  const std::vector<size_t> zero(static_cast<size_t>(world), 0);
  std::vector<size_t> send_counts = zero, recv_counts = zero;
  send_counts[static_cast<size_t>(auditor)] = mine_.bytes();
  recv_counts[static_cast<size_t>(neighbour)] = reported_.bytes();
  DGRR_RETURN_IF_ERROR(comm.AllToAllV(mine_.entries.data(), send_counts, zero, reported_.entries.data(),
                                      recv_counts, zero));
  DGRR_RETURN_IF_ERROR(RecomputeNeighbour(step, neighbour, params));
  return Agree(step, comm, FirstAuditMismatch(reported_, expected_), session);
}

// The neighbour's examples through the same ComputeExamples path, into the
// scratch batch: only the audit's tap observes them (nothing is recorded and
// no fault fires), and the dropout masks come from the per-example Philox
// streams, as on every rank.
Status NeighbourAudit::RecomputeNeighbour(int64_t step, int neighbour, const float* params) {
  const size_t window = data_.window();
  const uint64_t first = static_cast<uint64_t>(step) * batch_ + static_cast<uint64_t>(neighbour) * shard_;
  for (size_t i = 0; i < shard_; ++i) {
    DGRR_ASSIGN_OR_RETURN(uint64_t index, order_.IndexOf(first + i));
    std::memcpy(tokens_.data() + i * window, data_.Example(index), window);
  }
  PhiloxDropoutMasks masks(rng_, static_cast<uint64_t>(step));
  AuditTap tap(boundaries_, expected_, first, nullptr, nullptr);
  ExampleHooks hooks;
  hooks.mutator = &tap;  // fingerprints each value after it is computed; changes nothing
  hooks.masks = &masks;
  DGRR_RETURN_IF_ERROR(scratch_.ComputeExamples(params, tokens_.data(), shard_, first, hooks));
  AuditTokensAndGradients(boundaries_, layout_, tokens_.data(), window, scratch_.gradients(), expected_);
  return Status::OK();
}

Status NeighbourAudit::Agree(int64_t step, Communicator& comm, const AuditMismatch& found, Session& session) {
  const int world = comm.size();
  AuditFinding mine;
  if (found.found) {
    const uint64_t neighbour_first =
        static_cast<uint64_t>(step) * batch_ + static_cast<uint64_t>((comm.rank() + 1) % world) * shard_;
    mine = {1, neighbour_first + found.example, found.boundary, found.examples_differing, found.reported,
            found.expected};
  }
  std::vector<AuditFinding> all(static_cast<size_t>(world));
  DGRR_RETURN_IF_ERROR(comm.AllGather(&mine, sizeof(mine), all.data()));
  std::string message;
  for (int auditor = 0; auditor < world; ++auditor) {
    const AuditFinding& f = all[static_cast<size_t>(auditor)];
    if (f.found == 0) continue;
    const int audited = (auditor + 1) % world;
    const std::string boundary = f.boundary < boundaries_.size() ? boundaries_.name(f.boundary) : "?";
    // An EVENT holds 100 bytes: who, which example, where; the fingerprints
    // are in the error message.
    const std::string event = "audit rank=" + std::to_string(audited) + " by=" + std::to_string(auditor) +
                              " example=" + std::to_string(f.example) + " at=" + boundary;
    DGRR_RETURN_IF_ERROR(session.RecordEvent(trace::EventKind::kSdcMismatch, event));
    if (!message.empty()) message += "; ";
    message += "rank " + std::to_string(audited) + " computed example " + std::to_string(f.example) +
               " differently from rank " + std::to_string(auditor) + "'s recomputation, first at " + boundary +
               " (xxh3 " + Hex64(f.reported.xxh3) + " vs " + Hex64(f.expected.xxh3) + "; " +
               std::to_string(f.examples_differing) + " of its " + std::to_string(shard_) + " examples differ)";
  }
  if (message.empty()) return Status::OK();
  return Status::Divergence("silent data corruption found by the audit at step " + std::to_string(step) + ": " +
                            message);
}

}  // namespace dgrr::model
