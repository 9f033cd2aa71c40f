// The reference GPT: a decoder-only transformer over bytes.
//
// ExampleEngine<S> runs ONE example (seq_len + 1 bytes: input = first seq_len,
// target = shifted by one) forward and backward, writing that example's
// gradient into its own buffer; nothing is accumulated across examples here.
// Batches are formed by the caller (model/batch.h) with the canonical tree sum
// of runtime/tree_reduce.h, so gradients are bitwise independent of how examples
// are spread over threads and ranks.
//
// S = float is the training path; S = double is the reference path used by the
// finite-difference gradient checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/hooks.h"
#include "model/matmul.h"

namespace dgrr::model {

// One boundary the engine reports: its stable name and the operator that
// produces its tensor.
struct Boundary {
  std::string name;
  Operator op = Operator::kOther;
};

// Stable boundary names, built once per engine so a call costs no allocation.
struct BoundaryNames {
  struct Block {
    Boundary ln1_out, qkv_out, softmax_out, att_dropout_out, attn_out, attn_proj_out,
        attn_proj_dropout_out, attn_residual_out, ln2_out, fc_out, gelu_out, mlp_proj_out,
        mlp_proj_dropout_out, mlp_residual_out;
    Boundary mlp_proj_dinp, gelu_dinp, fc_dinp, ln2_dinp, attn_proj_dinp, softmax_dinp,
        attn_dinp, qkv_dinp, ln1_dinp;
  };
  explicit BoundaryNames(int num_layers);
  std::vector<Block> blocks;
};

template <typename S>
class ExampleEngine {
 public:
  // `config` must be valid (GptConfig::Validate). The engine holds the
  // activations of up to `max_examples` examples run together as one block.
  explicit ExampleEngine(const GptConfig& config, size_t max_examples = 1);

  // Forward pass over tokens[0..seq_len]; returns the example's loss (mean of
  // the seq_len token losses, summed in ascending t, divided by seq_len).
  S Forward(const S* params, const uint8_t* tokens, uint64_t example_index,
            const ExampleHooks& hooks);

  // Backward pass of the example last run through Forward (same params, tokens
  // and hooks): overwrites grad[0..num_params) with d(example loss)/d(params).
  void Backward(const S* params, const uint8_t* tokens, uint64_t example_index, S* grad,
                const ExampleHooks& hooks);

  // The same for a block of `count` (1..max_examples) examples, windows of
  // seq_len + 1 bytes back to back, global indices first_example + e. Their
  // rows are stacked so each matrix multiply runs once for the block; every
  // example's results are bitwise those it gets alone (each output row of a
  // product depends on that row's inputs only, docs/model.md), and
  // per-example boundaries are reported per example, in the documented order
  // for each. losses[e] and grads[e][0..num_params) are example e's.
  void ForwardBlock(const S* params, const uint8_t* tokens, size_t count, uint64_t first_example,
                    const ExampleHooks& hooks, S* losses);
  void BackwardBlock(const S* params, const uint8_t* tokens, size_t count,
                     uint64_t first_example, S* const* grads, const ExampleHooks& hooks);
  // The same, with each pair of examples (0, 1), (2, 3), ... of the block
  // (an odd last example stays alone) summed as the canonical tree's first
  // level sums them: grads[2j] receives grads[2j] + grads[2j + 1], every
  // element bit for bit what TreeReduceInPlace's left + right gives, and
  // grads[2j + 1] is left as scratch. The matrices' weight gradients are
  // summed inside their products (GemmTransAPairSum: stored once per pair,
  // the odd example's never written), the rest after the backward. For
  // callers that read the pairs' sums only (BatchGradients).
  void BackwardBlockSummingPairs(const S* params, const uint8_t* tokens, size_t count,
                                 uint64_t first_example, S* const* grads,
                                 const ExampleHooks& hooks);

  const GptConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  size_t max_examples() const { return max_examples_; }

  // The vector instruction set the float engine's layers run with (default:
  // the widest the CPU supports; every choice gives the same bits, which the
  // tests check by choosing each). The matrix multiplies dispatch on their own.
  void set_vector_isa(GemmIsa isa) { vector_isa_ = isa; }
  GemmIsa vector_isa() const { return vector_isa_; }

 private:
  struct LayerActs {
    std::vector<S> ln1, ln1_mean, ln1_rstd, qkv, preatt, att, att_dropped, atty, attproj,
        attproj_dropped, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, fcproj, fcproj_dropped,
        res3;
    std::vector<uint8_t> keep_att, keep_attproj, keep_fcproj;
  };
  struct LayerGrads {
    std::vector<S> ln1, qkv, preatt, att, atty, attproj, attproj_dropped, res2, ln2, fch,
        fch_gelu, fcproj, fcproj_dropped, res3;
  };

  void Observe(const Boundary& boundary, Phase phase, S* data, std::initializer_list<int64_t> dims,
               uint64_t example_index, const ExampleHooks& hooks) const;
  // Observe for each example of the block: example e's tensor starts at
  // data + e * (product of dims).
  void ObserveEach(const Boundary& boundary, Phase phase, S* data,
                   std::initializer_list<int64_t> dims, const ExampleHooks& hooks) const;
  void ForwardBlockBody(const S* params, const uint8_t* tokens, size_t count,
                        uint64_t first_example, const ExampleHooks& hooks, S* losses);
  void BackwardBlockBody(const S* params, const uint8_t* tokens, size_t count,
                         uint64_t first_example, S* const* grads, const ExampleHooks& hooks,
                         bool sum_pairs);
  void BlockForward(int l, const S* params, const S* block_in, const ExampleHooks& hooks);
  void BlockBackward(int l, const S* params, const S* block_in, const S* dblock_out,
                     S* dblock_in, S* const* grads, const ExampleHooks& hooks);

  GptConfig config_;
  ParameterLayout layout_;
  BoundaryNames names_;
  size_t max_examples_;
  GemmIsa vector_isa_ = BestGemmIsa();
  size_t count_ = 0;            // examples in the current block
  uint64_t first_example_ = 0;  // global index of its first
  const uint8_t* tokens_ = nullptr;
  S attn_keep_scale_, resid_keep_scale_;
  std::vector<S> encoded_, lnf_, lnf_mean_, lnf_rstd_, logits_, probs_, losses_;
  std::vector<LayerActs> acts_;
  std::vector<S> dencoded_, dlnf_, dlogits_, dlosses_;
  std::vector<LayerGrads> grads_;
  std::vector<size_t> accumulated_tensors_;  // indices into layout_.tensors(), zeroed first
  // Indices of the tensors not summed by GemmTransAPairSum (all but the
  // blocks' four matrices): added pair by pair after a summing backward.
  std::vector<size_t> pair_added_tensors_;
  bool sum_pairs_ = false;  // the current backward sums pairs (BlockBackward)
};

// The model: its configuration, layout and the one contiguous parameter array.
class Gpt {
 public:
  static StatusOr<Gpt> Create(const GptConfig& config);

  const GptConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  size_t num_parameters() const { return params_.size(); }
  float* parameters() { return params_.data(); }
  const float* parameters() const { return params_.data(); }

  // GPT-2 style initialisation from standard normals: matrices and embeddings
  // N(0, 0.02), the two projections into the residual stream N(0, 0.02/sqrt(2L)),
  // biases 0, layernorm weights 1. `fill` is asked once per random tensor, in
  // layout order.
  void Initialize(const NormalFill& fill);

 private:
  explicit Gpt(const GptConfig& config);
  GptConfig config_;
  ParameterLayout layout_;
  std::vector<float> params_;
};

// Convenience for tests and the reference loop: a splitmix64-driven
// Box-Muller normal fill keyed by (seed, tensor index). The trainer replaces
// it with Philox streams.
NormalFill SplitMixNormalFill(uint64_t seed);

// Test/reference dropout masks keyed by (seed, example, layer, site).
class SplitMixDropoutMasks : public DropoutMaskSource {
 public:
  explicit SplitMixDropoutMasks(uint64_t seed) : seed_(seed) {}
  void FillKeepMask(uint64_t example_index, int layer, DropoutSite site, float drop_probability,
                    uint8_t* keep, size_t count) const override;

 private:
  uint64_t seed_;
};

extern template class ExampleEngine<float>;
extern template class ExampleEngine<double>;

}  // namespace dgrr::model
