// A run's metrics log, RUN_DIR/metrics.jsonl (docs/json/metrics.md): one JSON
// object per training step, so a loss curve is one `jq` or pandas line away
// instead of a whole-trace `dgrr inspect`.
//
// Each line is handed to the OS whole with one write, so a process killed
// mid-step leaves at most one torn last line; Open drops it. A resumed or
// rolled-back run first cuts the log to the step its state came from
// (CutMetricsLog), so the log always lists steps 0..S once each, in order.
// `dgrr train` writes it from the reference trainer; a user's own loop writes
// the same file through this class.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/file.h"
#include "base/status.h"

namespace dgrr {

inline constexpr const char* kMetricsSchema = "dgrr.metrics/1";
inline constexpr const char* kMetricsFileName = "metrics.jsonl";

// RUN_DIR/metrics.jsonl.
std::string MetricsPathFor(const std::string& run_dir);

struct MetricsRow {
  int64_t step = 0;               // 0-based, as in the trace's STEP records
  double loss = 0;
  double lr = 0;                  // the learning rate this step's update used
  double grad_norm = 0;           // global L2 norm of the gradient, before clipping
  double tokens_per_second = 0;   // of this step alone
  double wall_seconds = 0;        // since this process started the run
};

// The JSON line for `row` (no newline).
std::string MetricsLine(const MetricsRow& row);

// Keeps the whole lines of the log at `path` whose step is <= last_kept_step
// (-1: none) and drops everything after the first line that is torn, not
// JSON, or out of order. A missing file stays missing. The kept prefix is
// written beside the file and renamed over it, so a crash leaves either log.
Status CutMetricsLog(const std::string& path, int64_t last_kept_step);

class MetricsLog {
 public:
  // Opens `path` for appending. With `fresh`, an existing log is replaced by
  // an empty one; otherwise a torn last line is dropped first and appends go
  // after the last whole line.
  static StatusOr<std::unique_ptr<MetricsLog>> Open(const std::string& path, bool fresh);
  ~MetricsLog();

  // Appends one line and hands it to the OS (not fsync: Sync does that).
  Status Append(const MetricsRow& row);
  // Makes every appended line durable (a trainer calls it with its checkpoints).
  Status Sync();
  Status Close();
  const std::string& path() const { return path_; }

 private:
  MetricsLog(std::string path, std::unique_ptr<WritableFile> file)
      : path_(std::move(path)), file_(std::move(file)) {}
  std::string path_;
  std::unique_ptr<WritableFile> file_;
};

}  // namespace dgrr
