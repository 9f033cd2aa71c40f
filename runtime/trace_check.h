// TraceCheck: compares a re-execution with a recorded trace as it runs. A
// session given this check (SessionSeams::check, or the session's own under
// a control file that asks for verification) has every BOUNDARY and STEP
// record it is about to append compared with the recorded trace's next one:
// same step, boundary name, phase, direction, dtype, shape, byte count,
// example range and fingerprints (and, for a step end, loss and parameter
// fingerprint). The first difference stops the replay with an
// IntegrityFailure naming step, rank, boundary and both fingerprints.
// Record layout details that legitimately differ (sequence numbers, name
// ids, times, EVENT and NAME records) are not compared.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/session_seams.h"
#include "trace_format/reader.h"

namespace dgrr {

struct ReplayMismatch {
  uint64_t step = 0;
  uint32_t rank = 0;
  std::string what;              // boundary name, or "step end"
  uint64_t recorded_index = 0;   // record index in the recorded trace
  // A boundary's examples (the replayed record's; example_count 0: none or a step end).
  uint64_t first_example = 0, example_count = 0;
  uint64_t recorded_xor64 = 0, recorded_xxh3 = 0;
  uint64_t replayed_xor64 = 0, replayed_xxh3 = 0;
};

class TraceCheck final : public RecordCheck {
 public:
  // Checks against the records of `trace_path` from index `first_record` on.
  static StatusOr<std::unique_ptr<TraceCheck>> Open(const std::string& trace_path,
                                                    uint64_t first_record);

  Status CheckBoundary(const trace::BoundaryRecord& record, std::string_view name) override;
  Status CheckStep(const trace::StepRecord& record) override;

  uint64_t boundaries_verified() const { return boundaries_verified_; }
  uint64_t steps_verified() const { return steps_verified_; }
  const std::optional<ReplayMismatch>& mismatch() const { return mismatch_; }

 private:
  explicit TraceCheck(std::unique_ptr<trace::TraceReader> reader) : reader_(std::move(reader)) {}
  // The next recorded BOUNDARY or STEP-end record, skipping the others;
  // null at the end of the trace. Corruption of the recorded trace is an error.
  StatusOr<const trace::Record*> Next();
  Status Fail(ReplayMismatch m, const std::string& detail);

  // Streams the recorded trace: a replay of two steps from a late checkpoint
  // must not hold a week of records in memory.
  std::unique_ptr<trace::TraceReader> reader_;
  trace::Record current_;
  uint64_t boundaries_verified_ = 0;
  uint64_t steps_verified_ = 0;
  std::optional<ReplayMismatch> mismatch_;
};

// The highest step whose STEP end record every one of the run's `ranks`
// traces holds: how far a run that may have been stopped early got. -1 when
// some rank completed no step. A trace's corruption is an error.
StatusOr<int64_t> LastStepCompletedByEveryRank(const std::string& run_dir, int ranks);

}  // namespace dgrr
