#include "model/config.h"

#include <string>

#include "model/numerics.h"

namespace dgrr::model {

Status GptConfig::Validate() const {
  auto bad = [](const std::string& what) { return Status::InvalidArgument("model config: " + what); };
  if (vocab_size != 256) return bad("vocab_size must be 256 (bytes), got " + std::to_string(vocab_size));
  if (seq_len < 1 || seq_len > 4096) return bad("seq_len must be in [1, 4096], got " + std::to_string(seq_len));
  if (num_layers < 1 || num_layers > 64) return bad("layers must be in [1, 64], got " + std::to_string(num_layers));
  if (channels < 1 || channels > 4096) return bad("channels must be in [1, 4096], got " + std::to_string(channels));
  if (num_heads < 1 || channels % num_heads != 0) {
    return bad("heads (" + std::to_string(num_heads) + ") must divide channels (" + std::to_string(channels) + ")");
  }
  if (!(attn_dropout >= 0 && attn_dropout < 1)) return bad("attention dropout must be in [0, 1)");
  if (!(resid_dropout >= 0 && resid_dropout < 1)) return bad("residual dropout must be in [0, 1)");
  return Status::OK();
}

StatusOr<Preset> PresetByName(std::string_view name) {
  Preset preset;
  preset.name = std::string(name);
  if (name == "tiny") {
    preset.model = GptConfig{.seq_len = 16, .num_layers = 2, .channels = 64, .num_heads = 2,
                             .attn_dropout = 0.05f, .resid_dropout = 0.05f};
    preset.train = TrainDefaults{.batch_size = 8, .learning_rate = 3e-3f, .min_learning_rate = 3e-4f,
                                 .warmup_steps = 10, .total_steps = 200, .weight_decay = 0.01f,
                                 .grad_clip = 1.0f};
    return preset;
  }
  if (name == "small") {
    preset.model = GptConfig{.seq_len = 64, .num_layers = 4, .channels = 128, .num_heads = 4,
                             .attn_dropout = 0.1f, .resid_dropout = 0.1f};
    preset.train = TrainDefaults{.batch_size = 16, .learning_rate = 3e-3f, .min_learning_rate = 3e-4f,
                                 .warmup_steps = 20, .total_steps = 300, .weight_decay = 0.01f,
                                 .grad_clip = 1.0f};
    return preset;
  }
  return Status::InvalidArgument("unknown model preset '" + std::string(name) + "' (known: tiny, small)");
}

std::vector<std::string> PresetNames() { return {"tiny", "small"}; }

ParameterLayout::ParameterLayout(const GptConfig& config) {
  const int64_t V = config.vocab_size, T = config.seq_len, C = config.channels;
  wte_ = Add("wte", {V, C}, true);
  wpe_ = Add("wpe", {T, C}, true);
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    BlockOffsets b{};
    b.ln1_w = Add(p + "ln1.w", {C}, false);
    b.ln1_b = Add(p + "ln1.b", {C}, false);
    b.qkv_w = Add(p + "attn.qkv.w", {C, 3 * C}, true);
    b.qkv_b = Add(p + "attn.qkv.b", {3 * C}, false);
    b.attn_proj_w = Add(p + "attn.proj.w", {C, C}, true);
    b.attn_proj_b = Add(p + "attn.proj.b", {C}, false);
    b.ln2_w = Add(p + "ln2.w", {C}, false);
    b.ln2_b = Add(p + "ln2.b", {C}, false);
    b.fc_w = Add(p + "mlp.fc.w", {C, 4 * C}, true);
    b.fc_b = Add(p + "mlp.fc.b", {4 * C}, false);
    b.mlp_proj_w = Add(p + "mlp.proj.w", {4 * C, C}, true);
    b.mlp_proj_b = Add(p + "mlp.proj.b", {C}, false);
    blocks_.push_back(b);
  }
  lnf_w_ = Add("lnf.w", {C}, false);
  lnf_b_ = Add("lnf.b", {C}, false);
}

size_t ParameterLayout::Add(std::string name, std::vector<int64_t> shape, bool decay) {
  size_t size = 1;
  for (int64_t d : shape) size *= static_cast<size_t>(d);
  const size_t offset = total_;
  tensors_.push_back(NamedTensor{std::move(name), offset, size, std::move(shape), decay});
  total_ += size;
  return offset;
}

const NamedTensor* ParameterLayout::Find(std::string_view name) const {
  for (const NamedTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {
const char* NumericsName(int64_t version) {
  switch (version) {
    case 1: return "separate multiply and add";
    case 2: return "fused multiply-add";
  }
  return "unknown to this dgrr";
}
}  // namespace

Status CheckNumericsVersion(int64_t recorded, const std::string& config_path) {
  if (recorded == kNumericsVersion) return Status::OK();
  return Status::Corruption(
      config_path + ": the run was recorded with numerics version " + std::to_string(recorded) + " (" +
      NumericsName(recorded) + "); this dgrr computes numerics version " + std::to_string(kNumericsVersion) +
      " (" + NumericsName(kNumericsVersion) + ") and cannot resume or re-execute it bit for bit");
}

std::string GradientName(std::string_view param_name) {
  const size_t dot = param_name.rfind('.');
  const size_t last = dot == std::string_view::npos ? 0 : dot + 1;
  std::string name;
  name.reserve(param_name.size() + 1);
  name.append(param_name.substr(0, last));
  name.push_back('d');
  name.append(param_name.substr(last));
  return name;
}

}  // namespace dgrr::model
