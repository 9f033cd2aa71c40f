#include "runtime/control_file.h"
#include "runtime/control_file_json.h"

#include <cstdlib>
#include <set>
#include <utility>

#include "base/coding.h"
#include "base/environment.h"
#include "base/file.h"
#include "runtime/json_input.h"

namespace dgrr {
namespace {

constexpr uint64_t kMaxControlBytes = 1 << 20;

Status RejectUnknownKeys(const nlohmann::json& object, const std::set<std::string>& known,
                         const std::string& source, const std::string& prefix) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (known.count(it.key()) == 0) {
      return Status::Corruption(source + ": key '" + prefix + it.key() +
                                "' is not part of " + kControlSchema);
    }
  }
  return Status::OK();
}

StatusOr<ControlDump> ReadDump(const nlohmann::json& item, const std::string& source, size_t index) {
  const std::string prefix = "dumps[" + std::to_string(index) + "]";
  if (!item.is_object()) return Status::Corruption(source + ": " + prefix + " is not an object");
  DGRR_RETURN_IF_ERROR(RejectUnknownKeys(item, {"boundary", "step", "rank", "path"}, source, prefix + "."));
  JsonObjectReader r(item, source, prefix);
  ControlDump d;
  DGRR_ASSIGN_OR_RETURN(d.boundary, r.String("boundary"));
  DGRR_ASSIGN_OR_RETURN(d.step, r.Uint64("step"));
  if (item.contains("rank") && !item["rank"].is_null()) {
    DGRR_ASSIGN_OR_RETURN(int64_t rank, r.Int("rank", 0, 1 << 20));
    d.rank = static_cast<int>(rank);
  }
  DGRR_ASSIGN_OR_RETURN(d.path, r.String("path"));
  if (d.boundary.empty() || d.path.empty()) return r.Error("boundary", "boundary and path must not be empty");
  return d;
}

StatusOr<std::vector<uint64_t>> ReadSteps(const JsonObjectReader& r, std::string_view key) {
  DGRR_ASSIGN_OR_RETURN(const nlohmann::json* array, r.Array(key));
  std::vector<uint64_t> steps;
  for (const auto& s : *array) {
    if (!s.is_number_unsigned()) return r.Error(key, "expected step numbers");
    steps.push_back(s.get<uint64_t>());
  }
  return steps;
}

// The result's "status" values: one stable lower-case word per StatusCode.
constexpr std::pair<StatusCode, const char*> kStatusWords[] = {
    {StatusCode::kInvalidArgument, "invalid_argument"},
    {StatusCode::kNotFound, "not_found"},
    {StatusCode::kIOError, "io_error"},
    {StatusCode::kCorruption, "corruption"},
    {StatusCode::kDivergence, "divergence"},
    {StatusCode::kIntegrityFailure, "integrity_failure"},
    {StatusCode::kFailedPrecondition, "failed_precondition"},
    {StatusCode::kInternal, "internal"},
};

}  // namespace

StatusOr<std::optional<ControlFile>> ReadActiveControl() {
  const std::string path = GetEnvOrEmpty(kControlEnvVar);
  if (path.empty()) return std::optional<ControlFile>();
  DGRR_ASSIGN_OR_RETURN(ControlFile control, ReadControlFile(path));
  return std::optional<ControlFile>(std::move(control));
}

StatusOr<ControlFile> ReadControlFile(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxControlBytes));
  DGRR_ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, path));
  if (!doc.is_object()) return Status::Corruption(path + ": a control file is a JSON object");
  DGRR_RETURN_IF_ERROR(RejectUnknownKeys(
      doc, {"schema", "run_dir", "mode", "restore_checkpoint", "verify_run_dir", "stop_after_step",
            "checkpoint_steps", "periodic_checkpoints", "dumps"},
      path, ""));
  JsonObjectReader r(doc, path);
  DGRR_ASSIGN_OR_RETURN(std::string schema, r.String("schema"));
  if (schema != kControlSchema) {
    return r.Error("schema", "'" + schema + "' is not " + kControlSchema + " (a newer dgrr wrote it?)");
  }
  ControlFile c;
  c.path = path;
  DGRR_ASSIGN_OR_RETURN(c.run_dir, r.String("run_dir"));
  if (c.run_dir.empty()) return r.Error("run_dir", "must not be empty");
  if (doc.contains("mode")) {
    DGRR_ASSIGN_OR_RETURN(std::string mode, r.String("mode"));
    c.mode = ParseRecordMode(mode);
    if (!c.mode) return r.Error("mode", "'" + mode + "' is not full, trusted, sdc or off");
  }
  if (doc.contains("restore_checkpoint")) {
    DGRR_ASSIGN_OR_RETURN(c.restore_checkpoint, r.String("restore_checkpoint"));
  }
  if (doc.contains("verify_run_dir")) {
    DGRR_ASSIGN_OR_RETURN(c.verify_run_dir, r.String("verify_run_dir"));
  }
  if (doc.contains("stop_after_step")) {
    DGRR_ASSIGN_OR_RETURN(uint64_t s, r.Uint64("stop_after_step"));
    c.stop_after_step = s;
  }
  if (doc.contains("checkpoint_steps")) {
    DGRR_ASSIGN_OR_RETURN(c.checkpoint_steps, ReadSteps(r, "checkpoint_steps"));
  }
  if (doc.contains("periodic_checkpoints")) {
    if (!doc["periodic_checkpoints"].is_boolean()) return r.Error("periodic_checkpoints", "expected true or false");
    c.periodic_checkpoints = doc["periodic_checkpoints"].get<bool>();
  }
  if (doc.contains("dumps")) {
    DGRR_ASSIGN_OR_RETURN(const nlohmann::json* dumps, r.Array("dumps"));
    for (size_t i = 0; i < dumps->size(); ++i) {
      DGRR_ASSIGN_OR_RETURN(ControlDump d, ReadDump((*dumps)[i], path, i));
      c.dumps.push_back(std::move(d));
    }
  }
  return c;
}

nlohmann::ordered_json ControlFileJson(const ControlFile& c) {
  nlohmann::ordered_json j;
  j["schema"] = kControlSchema;
  j["run_dir"] = c.run_dir;
  if (c.mode) j["mode"] = std::string(RecordModeName(*c.mode));
  if (!c.restore_checkpoint.empty()) j["restore_checkpoint"] = c.restore_checkpoint;
  if (!c.verify_run_dir.empty()) j["verify_run_dir"] = c.verify_run_dir;
  if (c.stop_after_step) j["stop_after_step"] = *c.stop_after_step;
  if (!c.checkpoint_steps.empty()) j["checkpoint_steps"] = c.checkpoint_steps;
  j["periodic_checkpoints"] = c.periodic_checkpoints;
  if (!c.dumps.empty()) {
    nlohmann::ordered_json dumps = nlohmann::ordered_json::array();
    for (const auto& d : c.dumps) {
      nlohmann::ordered_json item;
      item["boundary"] = d.boundary;
      item["step"] = d.step;
      item["rank"] = d.rank ? nlohmann::ordered_json(*d.rank) : nlohmann::ordered_json(nullptr);
      item["path"] = d.path;
      dumps.push_back(item);
    }
    j["dumps"] = dumps;
  }
  return j;
}

const char* ControlOutcomeName(ControlOutcome outcome) {
  switch (outcome) {
    case ControlOutcome::kRunning: return "running";
    case ControlOutcome::kCompleted: return "completed";
    case ControlOutcome::kMismatch: return "mismatch";
    case ControlOutcome::kFailed: return "failed";
  }
  return "?";
}

std::string ControlResultPath(const std::string& run_dir, int rank) {
  return run_dir + "/control-result.rank" + std::to_string(rank) + ".json";
}

Status WriteControlResult(const std::string& path, const ControlResult& result) {
  nlohmann::ordered_json j;
  j["schema"] = kControlResultSchema;
  j["rank"] = result.rank;
  j["outcome"] = ControlOutcomeName(result.outcome);
  j["message"] = result.message;
  j["status"] = nullptr;
  for (const auto& [code, word] : kStatusWords) {
    if (result.failure_code == code) j["status"] = word;
  }
  j["restored_step"] = result.restored_step ? nlohmann::ordered_json(*result.restored_step) : nullptr;
  j["last_step"] = result.last_step ? nlohmann::ordered_json(*result.last_step) : nullptr;
  j["boundaries_verified"] = result.boundaries_verified;
  j["steps_verified"] = result.steps_verified;
  if (result.mismatch) {
    const ControlMismatch& m = *result.mismatch;
    j["mismatch"] = {{"step", m.step},
                     {"rank", m.rank},
                     {"boundary", m.boundary},
                     {"recorded_index", m.recorded_index},
                     {"first_example", m.first_example},
                     {"example_count", m.example_count},
                     {"recorded", {{"xor64", Hex64(m.recorded_xor64)}, {"xxh3", Hex64(m.recorded_xxh3)}}},
                     {"replayed", {{"xor64", Hex64(m.replayed_xor64)}, {"xxh3", Hex64(m.replayed_xxh3)}}}};
  } else {
    j["mismatch"] = nullptr;
  }
  j["checkpoints_written"] = result.checkpoints_written;
  j["dumps_written"] = result.dumps_written;
  return WriteFileAtomically(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

StatusOr<ControlResult> ReadControlResult(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxControlBytes));
  DGRR_ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, path));
  if (!doc.is_object()) return Status::Corruption(path + ": not a JSON object");
  JsonObjectReader r(doc, path);
  DGRR_ASSIGN_OR_RETURN(std::string schema, r.String("schema"));
  if (schema != kControlResultSchema) return r.Error("schema", "'" + schema + "' is not " + kControlResultSchema);
  ControlResult out;
  DGRR_ASSIGN_OR_RETURN(int64_t rank, r.Int("rank", 0, 1 << 20));
  out.rank = static_cast<int>(rank);
  DGRR_ASSIGN_OR_RETURN(std::string outcome, r.String("outcome"));
  bool known = false;
  for (ControlOutcome o : {ControlOutcome::kRunning, ControlOutcome::kCompleted, ControlOutcome::kMismatch,
                           ControlOutcome::kFailed}) {
    if (outcome == ControlOutcomeName(o)) {
      out.outcome = o;
      known = true;
    }
  }
  if (!known) return r.Error("outcome", "'" + outcome + "' is not an outcome");
  DGRR_ASSIGN_OR_RETURN(out.message, r.String("message"));
  if (doc.contains("status") && !doc["status"].is_null()) {
    DGRR_ASSIGN_OR_RETURN(std::string word, r.String("status"));
    for (const auto& [code, known] : kStatusWords) {
      if (word == known) out.failure_code = code;
    }
    if (!out.failure_code) return r.Error("status", "'" + word + "' is not a status");
  }
  if (doc.contains("restored_step") && !doc["restored_step"].is_null()) {
    DGRR_ASSIGN_OR_RETURN(uint64_t s, r.Uint64("restored_step"));
    out.restored_step = s;
  }
  if (doc.contains("last_step") && !doc["last_step"].is_null()) {
    DGRR_ASSIGN_OR_RETURN(uint64_t s, r.Uint64("last_step"));
    out.last_step = s;
  }
  DGRR_ASSIGN_OR_RETURN(out.boundaries_verified, r.Uint64("boundaries_verified"));
  DGRR_ASSIGN_OR_RETURN(out.steps_verified, r.Uint64("steps_verified"));
  if (doc.contains("mismatch") && !doc["mismatch"].is_null()) {
    DGRR_ASSIGN_OR_RETURN(JsonObjectReader m, r.Object("mismatch"));
    ControlMismatch mm;
    DGRR_ASSIGN_OR_RETURN(mm.step, m.Uint64("step"));
    DGRR_ASSIGN_OR_RETURN(int64_t mrank, m.Int("rank", 0, 1 << 20));
    mm.rank = static_cast<int>(mrank);
    DGRR_ASSIGN_OR_RETURN(mm.boundary, m.String("boundary"));
    DGRR_ASSIGN_OR_RETURN(mm.recorded_index, m.Uint64("recorded_index"));
    if (doc["mismatch"].contains("example_count")) {  // absent from older results
      DGRR_ASSIGN_OR_RETURN(mm.first_example, m.Uint64("first_example"));
      DGRR_ASSIGN_OR_RETURN(mm.example_count, m.Uint64("example_count"));
    }
    DGRR_ASSIGN_OR_RETURN(JsonObjectReader recorded, m.Object("recorded"));
    DGRR_ASSIGN_OR_RETURN(mm.recorded_xor64, recorded.Hex64("xor64"));
    DGRR_ASSIGN_OR_RETURN(mm.recorded_xxh3, recorded.Hex64("xxh3"));
    DGRR_ASSIGN_OR_RETURN(JsonObjectReader replayed, m.Object("replayed"));
    DGRR_ASSIGN_OR_RETURN(mm.replayed_xor64, replayed.Hex64("xor64"));
    DGRR_ASSIGN_OR_RETURN(mm.replayed_xxh3, replayed.Hex64("xxh3"));
    out.mismatch = mm;
  }
  if (doc.contains("checkpoints_written")) {
    DGRR_ASSIGN_OR_RETURN(out.checkpoints_written, ReadSteps(r, "checkpoints_written"));
  }
  if (doc.contains("dumps_written")) {
    DGRR_ASSIGN_OR_RETURN(const nlohmann::json* a, r.Array("dumps_written"));
    for (const auto& s : *a) {
      if (!s.is_string()) return r.Error("dumps_written", "expected file paths");
      out.dumps_written.push_back(s.get<std::string>());
    }
  }
  return out;
}

}  // namespace dgrr
