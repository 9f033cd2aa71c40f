#include "runtime/metrics_log.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace dgrr {
namespace {

// JSON has no NaN or infinity: a diverged loss is written as null, which
// readers (pandas, jq) take as a missing value rather than a parse error.
nlohmann::ordered_json Number(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

// The byte length of the leading lines of `text` to keep: whole lines, each
// a JSON object of this schema, steps increasing, the last <= last_kept_step.
size_t KeptPrefix(const std::string& text, int64_t last_kept_step) {
  size_t kept = 0;
  int64_t previous = -1;
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    if (nl == std::string::npos) break;  // torn last line
    const auto line = nlohmann::json::parse(text.begin() + static_cast<std::ptrdiff_t>(at),
                                            text.begin() + static_cast<std::ptrdiff_t>(nl), nullptr,
                                            /*allow_exceptions=*/false);
    if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer()) break;
    const int64_t step = line["step"].get<int64_t>();
    if (step <= previous || step > last_kept_step) break;
    previous = step;
    at = kept = nl + 1;
  }
  return kept;
}

}  // namespace

std::string MetricsPathFor(const std::string& run_dir) { return run_dir + "/" + kMetricsFileName; }

std::string MetricsLine(const MetricsRow& row) {
  nlohmann::ordered_json j;
  j["schema"] = kMetricsSchema;
  j["step"] = row.step;
  j["loss"] = Number(row.loss);
  j["lr"] = Number(row.lr);
  j["grad_norm"] = Number(row.grad_norm);
  j["tokens_per_s"] = Number(row.tokens_per_second);
  j["wall_s"] = Number(row.wall_seconds);
  return j.dump();
}

Status CutMetricsLog(const std::string& path, int64_t last_kept_step) {
  if (!PathExists(path)) return Status::OK();
  DGRR_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  const size_t kept = KeptPrefix(text, last_kept_step);
  if (kept == text.size()) return Status::OK();
  return WriteFileAtomically(path, std::string_view(text).substr(0, kept));
}

StatusOr<std::unique_ptr<MetricsLog>> MetricsLog::Open(const std::string& path, bool fresh) {
  if (!fresh) {
    // Appends resume after the last whole line, whatever step it holds.
    DGRR_RETURN_IF_ERROR(CutMetricsLog(path, INT64_MAX));
  }
  DGRR_ASSIGN_OR_RETURN(auto file, OpenWritableFile(path, /*truncate=*/fresh));
  return std::unique_ptr<MetricsLog>(new MetricsLog(path, std::move(file)));
}

MetricsLog::~MetricsLog() {
  if (file_) (void)file_->Close();
}

Status MetricsLog::Append(const MetricsRow& row) {
  if (!file_) return Status::FailedPrecondition(path_ + ": metrics log is closed");
  // One write per line: a kill leaves whole lines and at most one torn one.
  const std::string line = MetricsLine(row) + "\n";
  DGRR_RETURN_IF_ERROR(file_->Append(line.data(), line.size()));
  return file_->Flush();
}

Status MetricsLog::Sync() {
  if (!file_) return Status::OK();
  return file_->Sync();
}

Status MetricsLog::Close() {
  if (!file_) return Status::OK();
  Status s = file_->Close();
  file_.reset();
  return s;
}

}  // namespace dgrr
