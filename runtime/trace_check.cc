#include "runtime/trace_check.h"

#include <algorithm>
#include <climits>

#include "base/coding.h"

namespace dgrr {

StatusOr<std::unique_ptr<TraceCheck>> TraceCheck::Open(const std::string& trace_path,
                                                       uint64_t first_record) {
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(trace_path));
  std::unique_ptr<TraceCheck> check(new TraceCheck(std::move(reader)));
  // Read (and so validate, and learn the names of) the records before the
  // checkpoint's position; only the current one is kept.
  while (check->reader_->records_read() < first_record) {
    bool done = false;
    DGRR_RETURN_IF_ERROR(check->reader_->Next(&check->current_, &done));
    if (done) {
      return Status::Corruption(trace_path + ": has " + std::to_string(check->reader_->records_read()) +
                                " records, the checkpoint points at record " + std::to_string(first_record));
    }
  }
  return check;
}

StatusOr<const trace::Record*> TraceCheck::Next() {
  for (;;) {
    bool done = false;
    DGRR_RETURN_IF_ERROR(reader_->Next(&current_, &done));
    if (done) return nullptr;
    if (std::holds_alternative<trace::BoundaryRecord>(current_.body)) return &current_;
    if (auto* s = std::get_if<trace::StepRecord>(&current_.body); s && s->kind == trace::StepKind::kEnd) {
      return &current_;
    }
  }
}

Status TraceCheck::Fail(ReplayMismatch m, const std::string& detail) {
  mismatch_ = m;
  return Status::IntegrityFailure(
      "replay diverges from " + reader_->path() + " at step " + std::to_string(m.step) + ", rank " +
      std::to_string(m.rank) + ", " + m.what + " (record " + std::to_string(m.recorded_index) +
      "): " + detail);
}

Status TraceCheck::CheckBoundary(const trace::BoundaryRecord& b, std::string_view name) {
  DGRR_ASSIGN_OR_RETURN(const trace::Record* r, Next());
  ReplayMismatch m;
  m.step = b.step;
  m.rank = b.rank;
  m.what = std::string(name);
  m.first_example = b.first_example;
  m.example_count = b.example_count;
  m.replayed_xor64 = b.xor64;
  m.replayed_xxh3 = b.xxh3;
  if (r == nullptr) return Fail(m, "the replay goes on past the end of the recorded trace");
  m.recorded_index = r->index;
  const auto* want = std::get_if<trace::BoundaryRecord>(&r->body);
  if (want == nullptr) return Fail(m, "the recorded trace ends the step here");
  const std::string* recorded_name = reader_->name(want->name_id);
  const std::string want_name = recorded_name ? *recorded_name : "?";
  m.recorded_xor64 = want->xor64;
  m.recorded_xxh3 = want->xxh3;
  if (want_name != name || want->step != b.step || want->rank != b.rank || want->phase != b.phase ||
      want->direction != b.direction || want->dtype != b.dtype || want->ndim != b.ndim ||
      want->dims != b.dims || want->byte_count != b.byte_count ||
      want->first_example != b.first_example || want->example_count != b.example_count) {
    return Fail(m, "the recorded trace has " + want_name + " at step " + std::to_string(want->step) +
                       " here: the replay took a different path");
  }
  if (want->xor64 != b.xor64 || want->xxh3 != b.xxh3) {
    return Fail(m, "recorded xor64 " + Hex64(want->xor64) + " xxh3 " + Hex64(want->xxh3) +
                       ", replayed xor64 " + Hex64(b.xor64) + " xxh3 " + Hex64(b.xxh3));
  }
  ++boundaries_verified_;
  return Status::OK();
}

Status TraceCheck::CheckStep(const trace::StepRecord& s) {
  DGRR_ASSIGN_OR_RETURN(const trace::Record* r, Next());
  ReplayMismatch m;
  m.step = s.step;
  m.rank = reader_->header().rank;
  m.what = "step end (parameters)";
  m.replayed_xor64 = s.params_xor64;
  m.replayed_xxh3 = s.params_xxh3;
  if (r == nullptr) return Fail(m, "the replay goes on past the end of the recorded trace");
  m.recorded_index = r->index;
  const auto* want = std::get_if<trace::StepRecord>(&r->body);
  if (want == nullptr) return Fail(m, "the recorded trace has more boundaries in this step");
  m.recorded_xor64 = want->params_xor64;
  m.recorded_xxh3 = want->params_xxh3;
  if (want->step != s.step || want->params_xor64 != s.params_xor64 ||
      want->params_xxh3 != s.params_xxh3 || want->loss_bits != s.loss_bits) {
    return Fail(m, "recorded parameters xor64 " + Hex64(want->params_xor64) + " xxh3 " +
                       Hex64(want->params_xxh3) + ", replayed xor64 " + Hex64(s.params_xor64) +
                       " xxh3 " + Hex64(s.params_xxh3));
  }
  ++steps_verified_;
  return Status::OK();
}

StatusOr<int64_t> LastStepCompletedByEveryRank(const std::string& run_dir, int ranks) {
  int64_t common = INT64_MAX;
  for (int rank = 0; rank < ranks; ++rank) {
    DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(TracePathFor(run_dir, rank)));
    int64_t last = -1;
    trace::Record record;
    for (;;) {
      bool done = false;
      DGRR_RETURN_IF_ERROR(reader->Next(&record, &done));
      if (done) break;
      if (const auto* s = std::get_if<trace::StepRecord>(&record.body); s && s->kind == trace::StepKind::kEnd) {
        last = std::max(last, static_cast<int64_t>(s->step));
      }
    }
    common = std::min(common, last);
  }
  return ranks > 0 ? common : int64_t{-1};
}

}  // namespace dgrr
