#include "replay/certify.h"

#include <algorithm>

namespace dgrr::replay {
const char* DivergenceKindName(DivergenceKind kind) {
  switch (kind) {
    case DivergenceKind::kNone: return "none";
    case DivergenceKind::kIsolated: return "isolated";
    case DivergenceKind::kPropagates: return "propagates";
    case DivergenceKind::kUndetermined: return "undetermined";
  }
  return "unknown";
}

CertifyWalker::CertifyWalker(const CertifyOptions& options) : options_(options) {
  if (options_.isolation_window == 0) options_.isolation_window = 1;
}

void CertifyWalker::StopPrefixAt(std::optional<FirstUncompared> first_a,
                                 std::optional<FirstUncompared> first_b) {
  stop_a_ = first_a;
  stop_b_ = first_b;
}

// past_a (past_b): the pair about to be walked lies after the first
// uncompared boundary of A (of B). An uncompared boundary of the last run's
// step belongs to that run. So does the next pair when it has the run's step
// and no uncompared boundary of A lies between them: then only replicas can
// separate it from the run in A order. When one of A does and has another
// step, the next pair starts a new run, even under the same step number (a
// resumed run repeats step numbers).
bool CertifyWalker::StopCutsLastRun(bool past_a, bool past_b, uint64_t next_step) const {
  if (step_runs_ == 0) return false;
  if (past_a && stop_a_->step == last_step_) return true;
  if (past_b && stop_b_->step == last_step_) return true;
  return !past_a && next_step == last_step_;
}

void CertifyWalker::Add(uint64_t index_a, uint64_t index_b, const BoundaryItem& a,
                        const BoundaryItem& b) {
  const Difference difference = DifferenceOf(a, b);
  const bool equal = difference == Difference::kNone;
  const uint64_t ordinal = report_.pairs++;
  const bool past_a = stop_a_ && index_a > stop_a_->index;
  const bool past_b = stop_b_ && index_b > stop_b_->index;
  if (!diverged_ && !prefix_closed_ && (past_a || past_b)) {
    // An uncompared boundary lies before this pair: nothing from here on is
    // certified, though divergences are still found and reported. The step
    // the uncompared boundary belongs to is not certified.
    prefix_closed_ = true;
    report_.stopped_at_uncompared = true;
    report_.certified_steps = StopCutsLastRun(past_a, past_b, a.step) ? step_runs_ - 1 : step_runs_;
  }
  if (!diverged_) {
    if (equal) {
      if (!prefix_closed_) {
        ++report_.certified_pairs;
        if (step_runs_ == 0 || a.step != last_step_) ++step_runs_;
        last_step_ = a.step;
      }
      if (options_.context > 0) {
        if (recent_.size() == options_.context) recent_.pop_front();
        recent_.push_back({ordinal, index_a, index_b, a, b, PairStatus::kEqual, Difference::kNone});
      }
      return;
    }
    diverged_ = true;
    ++report_.differing;
    report_.first_divergence =
        PairView{ordinal, index_a, index_b, a, b, PairStatus::kDiffers, difference};
    report_.before.assign(recent_.begin(), recent_.end());
    recent_.clear();
    // The divergent pair's step is not certified even if it began in the prefix.
    const bool cuts_last_run = step_runs_ > 0 && a.step == last_step_;
    if (!prefix_closed_) report_.certified_steps = cuts_last_run ? step_runs_ - 1 : step_runs_;
    return;
  }
  if (!equal) {
    ++report_.differing;
    ++report_.later_differing;
  }
  if (report_.after.size() < options_.context) {
    report_.after.push_back({ordinal, index_a, index_b, a, b,
                             equal ? PairStatus::kEqual : PairStatus::kDiffers, difference});
  }
  if (judged_after_ < options_.isolation_window) {
    ++judged_after_;
    judged_differs_ |= !equal;
  }
}

void CertifyWalker::AddEqualLockstepRun(uint64_t first, std::span<const BoundaryItem> a,
                                        std::span<const BoundaryItem> b) {
  const size_t n = a.size();
  if (diverged_ || stop_a_ || stop_b_) {
    for (size_t k = 0; k < n; ++k) Add(first + k, first + k, a[k], b[k]);
    return;
  }
  for (size_t k = 0; k < n; ++k) {
    if (step_runs_ == 0 || a[k].step != last_step_) ++step_runs_;
    last_step_ = a[k].step;
  }
  const size_t keep = std::min<size_t>(n, options_.context);
  const uint64_t ordinal = report_.pairs;
  report_.pairs += n;
  report_.certified_pairs += n;
  for (size_t k = n - keep; k < n; ++k) {
    if (recent_.size() == options_.context) recent_.pop_front();
    recent_.push_back(
        {ordinal + k, first + k, first + k, a[k], b[k], PairStatus::kEqual, Difference::kNone});
  }
}

CertifyReport CertifyWalker::Finish() {
  CertifyReport report = report_;
  if (!diverged_) {
    if (!prefix_closed_) {
      // Uncompared boundaries after the last pair: the prefix ends there,
      // and the last step is cut only when one of them belongs to it; one of
      // a later step leaves it certified.
      const bool open_end = stop_a_.has_value() || stop_b_.has_value();
      const bool cuts = step_runs_ > 0 && ((stop_a_ && stop_a_->step == last_step_) ||
                                           (stop_b_ && stop_b_->step == last_step_));
      report.stopped_at_uncompared = open_end;
      report.certified_steps = cuts ? step_runs_ - 1 : step_runs_;
    }
    report.kind = DivergenceKind::kNone;
  } else if (judged_after_ == 0) {
    report.kind = DivergenceKind::kUndetermined;
  } else {
    report.kind = judged_differs_ ? DivergenceKind::kPropagates : DivergenceKind::kIsolated;
  }
  return report;
}

CertifyReport Certify(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b,
                      const Alignment& alignment, const CertifyOptions& options) {
  CertifyWalker walker(options);
  const Coverage coverage = CoverageOf(alignment);
  auto first = [](std::optional<uint64_t> index,
                  std::span<const BoundaryItem> items) -> std::optional<FirstUncompared> {
    if (!index) return std::nullopt;
    return FirstUncompared{*index, items[*index].step};
  };
  walker.StopPrefixAt(first(coverage.first_a, a), first(coverage.first_b, b));
  for (const AlignedPair& pair : alignment.pairs) {
    walker.Add(pair.index_a, pair.index_b, a[pair.index_a], b[pair.index_b]);
  }
  return walker.Finish();
}

LockstepComparer::LockstepComparer(bool compare_rank, const CertifyOptions& options)
    : compare_rank_(compare_rank), walker_(options) {}

bool LockstepComparer::Feed(std::span<const BoundaryItem> a, std::span<const BoundaryItem> b) {
  if (!lines_up_) return false;
  const size_t n = std::min(a.size(), b.size());
  const bool compare_rank = compare_rank_;
  size_t run_start = 0;  // start of the current run of equal pairs in this chunk
  size_t k = 0;
  for (;;) {
    // The run of pairs whose keys pair and fingerprints agree: one branch per
    // pair (`&`, not `&&`: every field is compared, nearly always equal), the
    // position kept in a register.
    while (k < n) {
      const BoundaryItem& x = a[k];
      const BoundaryItem& y = b[k];
      const bool same = (x.key.name_hash == y.key.name_hash) & (x.shape_digest == y.shape_digest) &
                        (x.key.first_example == y.key.first_example) &
                        (x.key.example_count == y.key.example_count) & (x.key.phase == y.key.phase) &
                        (x.key.direction == y.key.direction) & (x.dtype == y.dtype) &
                        (!compare_rank | (x.key.rank == y.key.rank)) & (x.xor64 == y.xor64) &
                        (x.xxh3 == y.xxh3);
      if (!same) break;
      ++k;
    }
    // position_ is that of a[run_start] here, of a[k] after.
    walker_.AddEqualLockstepRun(position_, a.subspan(run_start, k - run_start),
                                b.subspan(run_start, k - run_start));
    position_ += k - run_start;
    if (k == n) break;
    if (!Pairable(a[k].key, b[k].key, compare_rank)) {
      lines_up_ = false;
      return false;
    }
    walker_.Add(position_, position_, a[k], b[k]);  // pairable, so the content differs
    ++position_;
    run_start = ++k;
  }
  if (a.size() != b.size()) lines_up_ = false;
  return lines_up_;
}

}  // namespace dgrr::replay
