#include "model/run_config.h"

#include <limits>
#include <sstream>
#include <string_view>

#include "base/file.h"
#include "model/config.h"
#include "runtime/json_input.h"
#include "runtime/run_directory.h"

namespace dgrr::model {
namespace {

// The checks the trainer makes across fields, phrased for the file.
Status CheckRunShape(const RunConfig& rc, const JsonObjectReader& c) {
  auto preset = PresetByName(rc.model.preset);
  if (!preset.ok()) return c.Error("model.preset", preset.status().message());
  GptConfig model = preset->model;
  model.num_layers = rc.model.layers;
  model.channels = rc.model.dim;
  model.num_heads = rc.model.heads;
  model.seq_len = rc.model.seq;
  if (Status s = model.Validate(); !s.ok()) return c.Error("model", s.message());
  if (rc.batch % rc.ranks != 0) {
    return c.Error("batch", std::to_string(rc.batch) + " is not divisible by ranks " + std::to_string(rc.ranks));
  }
  return Status::OK();
}

// config.json also writes values the preset and the learning rate fix, for
// its reader's information; they are never read back. One that differs from
// what the preset gives is an edited file: refused, never silently ignored.
Status CheckDerivedFields(RunConfig& rc, const JsonObjectReader& model, const JsonObjectReader& optimizer) {
  auto preset = PresetByName(rc.model.preset);
  if (!preset.ok()) return preset.status();
  auto same = [](const JsonObjectReader& section, std::string_view key, double min, double max, float expected,
                 float* field) -> Status {
    DGRR_ASSIGN_OR_RETURN(const double value, section.Double(key, min, max));
    if (static_cast<float>(value) == expected) {
      *field = expected;
      return Status::OK();
    }
    std::ostringstream what;
    what << value << " is not the preset's " << expected
         << " (fixed by the preset and --lr, written for information and never read back)";
    return section.Error(key, what.str());
  };
  RunConfig::Optimizer& opt = rc.optimizer;
  DGRR_RETURN_IF_ERROR(same(model, "attn_dropout", 0, 1, preset->model.attn_dropout, &rc.model.attn_dropout));
  DGRR_RETURN_IF_ERROR(same(model, "resid_dropout", 0, 1, preset->model.resid_dropout, &rc.model.resid_dropout));
  DGRR_RETURN_IF_ERROR(same(optimizer, "min_lr", 0, kMaxLearningRate, opt.lr * 0.1f, &opt.min_lr));
  DGRR_RETURN_IF_ERROR(same(optimizer, "weight_decay", 0, 1e9, preset->train.weight_decay, &opt.weight_decay));
  DGRR_RETURN_IF_ERROR(same(optimizer, "grad_clip", 0, 1e30, preset->train.grad_clip, &opt.grad_clip));
  DGRR_ASSIGN_OR_RETURN(const int64_t warmup, optimizer.Int("warmup_steps", 0, kMaxSteps));
  if (warmup != preset->train.warmup_steps) {
    return optimizer.Error("warmup_steps", std::to_string(warmup) + " is not the preset's " +
                                               std::to_string(preset->train.warmup_steps) +
                                               " (fixed by the preset, written for information and never read back)");
  }
  opt.warmup_steps = preset->train.warmup_steps;
  return Status::OK();
}

}  // namespace

nlohmann::json RunConfig::ToJson() const {
  nlohmann::json faults = nlohmann::json::array();
  for (const FaultSpec& f : inject) faults.push_back(f.text);
  nlohmann::json doc = {
      {"schema", kRunConfigSchema},
      {"numerics", numerics},
      {"seed", seed},
      {"steps", steps},
      {"model",
       {{"preset", model.preset},
        {"layers", model.layers},
        {"dim", model.dim},
        {"heads", model.heads},
        {"seq", model.seq},
        {"attn_dropout", model.attn_dropout},
        {"resid_dropout", model.resid_dropout}}},
      {"data",
       {{"source", data.source},
        {"path", data.path},
        {"bytes", data.bytes},
        {"xxh3", data.xxh3.ok() ? *data.xxh3 : std::string()}}},
      {"optimizer",
       {{"lr", optimizer.lr},
        {"min_lr", optimizer.min_lr},
        {"warmup_steps", optimizer.warmup_steps},
        {"weight_decay", optimizer.weight_decay},
        {"grad_clip", optimizer.grad_clip}}},
      {"batch", batch},
      {"ranks", ranks},
      {"threads", threads},
      {"mode", std::string(RecordModeName(mode))},
      {"ckpt_every", ckpt_every},
      {"audit_every", audit_every},
      {"inject", faults},
  };
  // Written only off the defaults, so a cpu run's file is byte for byte
  // what it was before the keys existed.
  if (device != "cpu") doc["device"] = device;
  if (gemm != "exact") doc["gemm"] = gemm;
  return doc;
}

StatusOr<RunConfig> RunConfig::FromJson(const nlohmann::json& doc, const std::string& source) {
  const JsonObjectReader c(doc, source);
  auto schema = c.String("schema");
  if (!schema.ok() || *schema != kRunConfigSchema) {
    return Status::Corruption(source + ": not a dgrr run config (schema " + kRunConfigSchema + ")");
  }
  RunConfig rc;
  // Runs recorded before the key existed computed with numerics version 1.
  rc.numerics = 1;
  if (doc.contains("numerics")) {
    DGRR_ASSIGN_OR_RETURN(rc.numerics, c.Int("numerics", 1, 1 << 20));
  }
  DGRR_RETURN_IF_ERROR(CheckNumericsVersion(rc.numerics, source));
  DGRR_ASSIGN_OR_RETURN(rc.steps, c.Int("steps", 1, kMaxSteps));
  DGRR_ASSIGN_OR_RETURN(rc.seed, c.Uint64("seed"));
  DGRR_ASSIGN_OR_RETURN(const JsonObjectReader m, c.Object("model"));
  DGRR_ASSIGN_OR_RETURN(rc.model.preset, m.String("preset"));
  // GptConfig::Validate (CheckRunShape) checks the shape itself; these
  // bounds only keep each value an int.
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  DGRR_ASSIGN_OR_RETURN(rc.model.layers, m.Int("layers", 1, kIntMax));
  DGRR_ASSIGN_OR_RETURN(rc.model.dim, m.Int("dim", 1, kIntMax));
  DGRR_ASSIGN_OR_RETURN(rc.model.heads, m.Int("heads", 1, kIntMax));
  DGRR_ASSIGN_OR_RETURN(rc.model.seq, m.Int("seq", 1, kIntMax));
  DGRR_ASSIGN_OR_RETURN(const JsonObjectReader data, c.Object("data"));
  DGRR_ASSIGN_OR_RETURN(rc.data.source, data.String("source"));
  if (rc.data.source == "file") {
    DGRR_ASSIGN_OR_RETURN(rc.data.path, data.String("path"));
  } else if (rc.data.source != "embedded") {
    return data.Error("source", "expected \"file\" or \"embedded\", got \"" + rc.data.source + "\"");
  }
  DGRR_ASSIGN_OR_RETURN(rc.ranks, c.Int("ranks", 1, kMaxRanks));
  DGRR_ASSIGN_OR_RETURN(rc.threads, c.Int("threads", 1, kMaxThreads));
  DGRR_ASSIGN_OR_RETURN(rc.batch, c.Int("batch", 1, kMaxBatch));
  DGRR_ASSIGN_OR_RETURN(const JsonObjectReader optimizer, c.Object("optimizer"));
  // Written from a float: the smallest positive float is the lower bound.
  DGRR_ASSIGN_OR_RETURN(const double lr, optimizer.Double("lr", std::numeric_limits<float>::denorm_min(),
                                                          kMaxLearningRate));
  rc.optimizer.lr = static_cast<float>(lr);
  DGRR_ASSIGN_OR_RETURN(const std::string mode_name, c.String("mode"));
  auto mode = ParseRecordMode(mode_name);
  if (!mode) return c.Error("mode", "unknown mode \"" + mode_name + "\"");
  rc.mode = *mode;
  DGRR_ASSIGN_OR_RETURN(rc.ckpt_every, c.Int("ckpt_every", 0, kMaxSteps));
  // Runs recorded before the audit existed have no key: they ran without it.
  if (doc.contains("audit_every")) {
    DGRR_ASSIGN_OR_RETURN(rc.audit_every, c.Int("audit_every", 0, kMaxSteps));
  }
  // Runs recorded before the keys: on the CPU, with the exact products.
  if (doc.contains("device")) {
    DGRR_ASSIGN_OR_RETURN(rc.device, c.String("device"));
    if (rc.device != "cpu" && rc.device != "cuda-sim" && rc.device != "cuda") {
      return c.Error("device", "expected \"cpu\", \"cuda-sim\" or \"cuda\", got \"" + rc.device + "\"");
    }
  }
  if (doc.contains("gemm")) {
    DGRR_ASSIGN_OR_RETURN(rc.gemm, c.String("gemm"));
    if (rc.gemm != "exact" && rc.gemm != "cublas") {
      return c.Error("gemm", "expected \"exact\" or \"cublas\", got \"" + rc.gemm + "\"");
    }
  }
  DGRR_ASSIGN_OR_RETURN(const nlohmann::json* inject, c.Array("inject"));
  for (size_t i = 0; i < inject->size(); ++i) {
    const std::string key = "inject[" + std::to_string(i) + "]";
    const nlohmann::json& f = (*inject)[i];
    if (!f.is_string()) return c.Error(key, "expected a fault spec string");
    auto spec = ParseFaultSpec(f.get<std::string>());
    if (!spec.ok()) return c.Error(key, spec.status().message());
    rc.inject.push_back(*spec);
  }
  DGRR_RETURN_IF_ERROR(CheckRunShape(rc, c));
  DGRR_RETURN_IF_ERROR(CheckDerivedFields(rc, m, optimizer));
  // Descriptions of the corpus, never refused here (see RunConfig::Data).
  const nlohmann::json& data_doc = doc.at("data");
  if (auto bytes = data_doc.find("bytes"); bytes != data_doc.end() && bytes->is_number_unsigned()) {
    rc.data.bytes = bytes->get<uint64_t>();
  }
  rc.data.xxh3 = data.String("xxh3");
  return rc;
}

bool RunConfigKeyChangesResults(std::string_view key) {
  // inject[3] is an element of inject.
  if (const size_t bracket = key.find('['); bracket != std::string_view::npos) key = key.substr(0, bracket);
  for (const RunConfigKey& k : kRunConfigKeys) {
    if (key == k.key) return k.changes_results;
  }
  return true;
}

bool IsRunConfig(const nlohmann::json& doc) {
  return doc.is_object() && doc.contains("schema") && doc["schema"] == kRunConfigSchema;
}

StatusOr<RunConfig> ReadRunConfig(const std::string& run_dir) {
  const std::string path = ConfigPathFor(run_dir);
  auto text = ReadFileToString(path, kMaxJsonFileBytes);
  if (!text.ok()) return text.status().WithPrefix("not a dgrr run");
  DGRR_ASSIGN_OR_RETURN(const nlohmann::json doc, ParseJson(*text, path));
  return RunConfig::FromJson(doc, path);
}

}  // namespace dgrr::model
