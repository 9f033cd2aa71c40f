// The reference GPT's configuration, presets and parameter layout.
//
// All parameters live in ONE contiguous float array; a ParameterLayout names
// each tensor in it (name, offset, shape) so the runtime can register state and
// a checkpoint is a few writes. The AdamW moments m and v use the same layout.
// Names are stable model-level identities (docs/model.md): "wte", "wpe",
// "block0.ln1.w", "block0.attn.qkv.w", ..., "lnf.b".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dgrr::model {

struct GptConfig {
  int vocab_size = 256;    // V: bytes
  int seq_len = 32;        // T: tokens per example (an example holds seq_len + 1 bytes)
  int num_layers = 2;      // L
  int channels = 32;       // C
  int num_heads = 2;       // NH; C % NH == 0
  float attn_dropout = 0;  // p on attention probabilities
  float resid_dropout = 0; // p on the attention and MLP outputs before each residual add

  Status Validate() const;
};

// What a preset recommends for training next to its shape.
struct TrainDefaults {
  int batch_size = 8;
  float learning_rate = 1e-2f;
  float min_learning_rate = 1e-3f;
  int warmup_steps = 10;
  int total_steps = 200;
  float weight_decay = 0.01f;
  float grad_clip = 1.0f;
};

struct Preset {
  std::string name;
  GptConfig model;
  TrainDefaults train;
};

// "tiny" (tests: one step of batch 8 in a few ms on one core) or "small" (the
// demo: loss falls visibly within two minutes on 2 cores).
StatusOr<Preset> PresetByName(std::string_view name);
std::vector<std::string> PresetNames();

struct NamedTensor {
  std::string name;            // stable identity, e.g. "block1.mlp.fc.w"
  size_t offset = 0;           // in floats from the start of the parameter array
  size_t size = 0;             // number of floats
  std::vector<int64_t> shape;  // row-major
  bool weight_decay = false;   // AdamW decays matrices and embeddings, not biases or norms
};

// Offsets of one block's tensors, for the forward/backward code.
struct BlockOffsets {
  size_t ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
  size_t ln2_w, ln2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const GptConfig& config);

  const std::vector<NamedTensor>& tensors() const { return tensors_; }
  size_t total_size() const { return total_; }
  // nullptr when no tensor has that name.
  const NamedTensor* Find(std::string_view name) const;

  size_t wte() const { return wte_; }
  size_t wpe() const { return wpe_; }
  size_t lnf_w() const { return lnf_w_; }
  size_t lnf_b() const { return lnf_b_; }
  const BlockOffsets& block(int layer) const { return blocks_[layer]; }

 private:
  size_t Add(std::string name, std::vector<int64_t> shape, bool decay);

  std::vector<NamedTensor> tensors_;
  std::vector<BlockOffsets> blocks_;
  size_t total_ = 0;
  size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
};

// A run's numerics version (model/numerics.h, kNumericsVersion; docs/model.md,
// "Numerics version"): config.json's "numerics", 1 when the key is absent (the
// runs recorded before it existed computed with separate multiplies and adds).
// OK when `recorded` is this build's version; otherwise Corruption (exit 3),
// one line naming the file and both versions: a run of another arithmetic
// cannot be resumed or re-executed bit for bit.
Status CheckNumericsVersion(int64_t recorded, const std::string& config_path);

// The name of the per-batch gradient boundary of a parameter: the last
// component gets a 'd' ("block1.mlp.fc.w" -> "block1.mlp.fc.dw", "wte" -> "dwte").
std::string GradientName(std::string_view param_name);

}  // namespace dgrr::model
