// One rank's part of the cross-rank audit (`dgrr train --audit-every K`,
// docs/model.md, "The audit"): at an audited step the rank fingerprints every
// per-example value it computes (through an AuditTap around its own hooks),
// sends that table to its auditor, rank (r-1) % R, recomputes the examples of
// its neighbour, rank (r+1) % R, from the same parameters, and compares them
// with the table the neighbour sent. Every rank then learns every auditor's
// finding, so that all fail together, at the same step, with the same message
// (and each records the same SDC_MISMATCH EVENTs).
//
// It takes what it audits as explicit inputs (the communicator, the
// parameters at the step start, the rank's tokens and per-example gradients,
// the session to record the EVENTs in) and shares nothing with the rank's own
// step: its scratch batch, data order and tokens are its own. It does not
// decide when to audit (the trainer asks Due), record boundaries or inject
// faults; the rank-agnostic parts (the table, the tap, the comparison) are in
// model/audit.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/audit.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/corpus.h"
#include "model/data_order.h"
#include "model/hooks.h"
#include "rng/rng_streams.h"
#include "runtime/communicator.h"
#include "runtime/session.h"

namespace dgrr::model {

class NeighbourAudit {
 public:
  // Whether the step `step` is audited with --audit-every `every` (0: never).
  static bool Due(int64_t every, int64_t step) { return every > 0 && step % every == 0; }

  // Made once per rank, at its first audited step, so that a run without the
  // audit carries none of it. `shard` examples per rank of a global batch of
  // `batch`; `layout` and `data` must outlive this.
  NeighbourAudit(const GptConfig& model, const ParameterLayout& layout,
                 const std::vector<std::string>& per_example_names, int threads, size_t shard, uint64_t batch,
                 const rng::RngStreams& rng, const Dataset& data);
  NeighbourAudit(const NeighbourAudit&) = delete;
  NeighbourAudit& operator=(const NeighbourAudit&) = delete;

  // Sizes this step's tables and returns the tap to put in the rank's hooks
  // for its ComputeExamples: it fingerprints every per-example value of the
  // shard starting at global example `shard_first`, passing every call on to
  // `observer` and `mutator` (either may be null) unchanged. Valid until the
  // next BeginStep.
  AuditTap& BeginStep(uint64_t shard_first, BoundaryObserver* observer, TensorMutator* mutator);

  // After the rank's ComputeExamples and before the all-reduce (a rank named
  // here has not yet spread its gradient into anybody's parameters): the
  // exchange, the recomputation of the neighbour's examples from `params`
  // (as at the step start) and the agreement. `tokens` and `gradients` are
  // this rank's shard as it computed it. Divergence naming step, rank,
  // example and boundary when an auditor found a difference, after every
  // rank recorded its SDC_MISMATCH EVENTs in `session`.
  Status Run(int64_t step, Communicator& comm, const float* params, const uint8_t* tokens,
             std::span<float* const> gradients, Session& session);

 private:
  Status RecomputeNeighbour(int64_t step, int neighbour, const float* params);
  Status Agree(int64_t step, Communicator& comm, const AuditMismatch& found, Session& session);

  const ParameterLayout& layout_;
  const rng::RngStreams rng_;  // a seed: copied
  const Dataset& data_;
  const size_t shard_;
  const uint64_t batch_;
  AuditBoundaries boundaries_;
  AuditTable mine_, reported_, expected_;
  BatchGradients scratch_;
  DataOrder order_;
  std::vector<uint8_t> tokens_;
  std::optional<AuditTap> tap_;
};

}  // namespace dgrr::model
