#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numbers>

#include "model/layers.h"
#include "model/splitmix.h"
#include "model/vector_isa.h"

namespace dgrr::model {

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kData: return "data";
  }
  return "unknown";
}

const char* OperatorName(Operator op) {
  switch (op) {
    case Operator::kOther: return "other";
    case Operator::kMatmul: return "matmul";
    case Operator::kElementwise: return "elementwise";
    case Operator::kNorm: return "norm";
    case Operator::kAttention: return "attention";
    case Operator::kEmbedding: return "embedding";
    case Operator::kLoss: return "loss";
    case Operator::kOptimizer: return "optimizer";
  }
  return "unknown";
}

const char* DropoutSiteName(DropoutSite site) {
  switch (site) {
    case DropoutSite::kAttentionProbs: return "attn.probs";
    case DropoutSite::kAttentionResidual: return "attn.residual";
    case DropoutSite::kMlpResidual: return "mlp.residual";
  }
  return "unknown";
}

BoundaryNames::BoundaryNames(int num_layers) {
  for (int l = 0; l < num_layers; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    Block b;
    b.ln1_out = {p + "ln1.out", Operator::kNorm};
    b.qkv_out = {p + "attn.qkv.out", Operator::kMatmul};
    b.softmax_out = {p + "attn.softmax.out", Operator::kAttention};
    b.att_dropout_out = {p + "attn.softmax.dropout.out", Operator::kElementwise};
    b.attn_out = {p + "attn.out", Operator::kAttention};
    b.attn_proj_out = {p + "attn.proj.out", Operator::kMatmul};
    b.attn_proj_dropout_out = {p + "attn.proj.dropout.out", Operator::kElementwise};
    b.attn_residual_out = {p + "attn.residual.out", Operator::kElementwise};
    b.ln2_out = {p + "ln2.out", Operator::kNorm};
    b.fc_out = {p + "mlp.fc.out", Operator::kMatmul};
    b.gelu_out = {p + "mlp.gelu.out", Operator::kElementwise};
    b.mlp_proj_out = {p + "mlp.proj.out", Operator::kMatmul};
    b.mlp_proj_dropout_out = {p + "mlp.proj.dropout.out", Operator::kElementwise};
    b.mlp_residual_out = {p + "mlp.residual.out", Operator::kElementwise};
    b.mlp_proj_dinp = {p + "mlp.proj.dinp", Operator::kMatmul};
    b.gelu_dinp = {p + "mlp.gelu.dinp", Operator::kElementwise};
    b.fc_dinp = {p + "mlp.fc.dinp", Operator::kMatmul};
    b.ln2_dinp = {p + "ln2.dinp", Operator::kNorm};
    b.attn_proj_dinp = {p + "attn.proj.dinp", Operator::kMatmul};
    b.softmax_dinp = {p + "attn.softmax.dinp", Operator::kAttention};
    b.attn_dinp = {p + "attn.dinp", Operator::kAttention};
    b.qkv_dinp = {p + "attn.qkv.dinp", Operator::kMatmul};
    b.ln1_dinp = {p + "ln1.dinp", Operator::kNorm};
    blocks.push_back(std::move(b));
  }
}

namespace {
const Boundary kEmbedOut{"embed.out", Operator::kEmbedding};
const Boundary kLnfOut{"lnf.out", Operator::kNorm};
const Boundary kLogits{"lm_head.logits", Operator::kMatmul};
const Boundary kLoss{"loss", Operator::kLoss};
const Boundary kLossDinp{"loss.dinp", Operator::kLoss};
const Boundary kLmHeadDinp{"lm_head.dinp", Operator::kMatmul};
const Boundary kLnfDinp{"lnf.dinp", Operator::kNorm};

template <typename S>
void Zero(std::vector<S>& v) {
  std::fill(v.begin(), v.end(), S(0));
}

// The float engine runs `body` in its vector build, its products with the
// kernel of the same instruction set; the double reference path
// (finite-difference checks) as it is.
template <typename S, typename Body>
void RunInVectorBuild(GemmIsa isa, const Body& body) {
  if constexpr (std::is_same_v<S, float>) {
    const ScopedGemmIsa products(isa);
    RunWithIsa(isa, body);
  } else {
    (void)isa;
    body();
  }
}
}  // namespace

template <typename S>
ExampleEngine<S>::ExampleEngine(const GptConfig& config, size_t max_examples)
    : config_(config),
      layout_(config),
      names_(config.num_layers),
      max_examples_(std::max<size_t>(1, max_examples)),
      attn_keep_scale_(S(1) / (S(1) - static_cast<S>(config.attn_dropout))),
      resid_keep_scale_(S(1) / (S(1) - static_cast<S>(config.resid_dropout))) {
  const size_t B = max_examples_;
  const size_t T = config.seq_len * B, C = config.channels, V = config.vocab_size,
               NH = config.num_heads;
  // Every buffer holds the block's examples back to back ("T" rows here are
  // all the block's positions).
  const size_t TC = T * C, att = NH * config.seq_len * config.seq_len * B;
  const bool attn_drop = config.attn_dropout > 0, resid_drop = config.resid_dropout > 0;
  encoded_.resize(TC);
  lnf_.resize(TC);
  lnf_mean_.resize(T);
  lnf_rstd_.resize(T);
  logits_.resize(T * V);
  probs_.resize(T * V);
  losses_.resize(T);
  dencoded_.resize(TC);
  dlnf_.resize(TC);
  dlogits_.resize(T * V);
  dlosses_.resize(T);
  acts_.resize(config.num_layers);
  grads_.resize(config.num_layers);
  for (LayerActs& a : acts_) {
    a.ln1.resize(TC), a.ln1_mean.resize(T), a.ln1_rstd.resize(T), a.qkv.resize(3 * TC);
    a.preatt.resize(att), a.att.resize(att), a.atty.resize(TC), a.attproj.resize(TC);
    a.res2.resize(TC), a.ln2.resize(TC), a.ln2_mean.resize(T), a.ln2_rstd.resize(T);
    a.fch.resize(4 * TC), a.fch_gelu.resize(4 * TC), a.fcproj.resize(TC), a.res3.resize(TC);
    if (attn_drop) a.att_dropped.resize(att), a.keep_att.resize(att);
    if (resid_drop) {
      a.attproj_dropped.resize(TC), a.fcproj_dropped.resize(TC);
      a.keep_attproj.resize(TC), a.keep_fcproj.resize(TC);
    }
  }
  // The parameter gradients that are summed into (biases, layernorms, wpe);
  // the rest, wte and the blocks' matrices, are written by their products.
  // All but the blocks' matrices are added pair by pair after a summing
  // backward (the products sum the matrices).
  for (size_t i = 0; i < layout_.tensors().size(); ++i) {
    const NamedTensor& t = layout_.tensors()[i];
    bool block_matrix = false;
    for (int l = 0; l < config.num_layers; ++l) {
      const BlockOffsets& o = layout_.block(l);
      block_matrix = block_matrix || t.offset == o.qkv_w || t.offset == o.attn_proj_w ||
                     t.offset == o.fc_w || t.offset == o.mlp_proj_w;
    }
    if (!block_matrix && t.offset != layout_.wte()) accumulated_tensors_.push_back(i);
    if (!block_matrix) pair_added_tensors_.push_back(i);
  }
  for (LayerGrads& g : grads_) {
    g.ln1.resize(TC), g.qkv.resize(3 * TC), g.preatt.resize(att), g.att.resize(att);
    g.atty.resize(TC), g.attproj.resize(TC), g.res2.resize(TC), g.ln2.resize(TC);
    g.fch.resize(4 * TC), g.fch_gelu.resize(4 * TC), g.fcproj.resize(TC);
    g.res3.resize(TC);
    if (resid_drop) g.attproj_dropped.resize(TC), g.fcproj_dropped.resize(TC);
  }
}

template <typename S>
void ExampleEngine<S>::Observe(const Boundary& boundary, Phase phase, S* data,
                               std::initializer_list<int64_t> dims, uint64_t example_index,
                               const ExampleHooks& hooks) const {
  // The hooks speak float: the double reference path is never observed.
  if constexpr (std::is_same_v<S, float>) {
    if (hooks.observer != nullptr) {
      hooks.observer->OnBoundary(boundary.name, phase, boundary.op, /*is_output=*/true, data,
                                 std::span<const int64_t>(dims.begin(), dims.size()),
                                 example_index, 1);
    }
    if (hooks.mutator != nullptr) {
      size_t count = 1;
      for (int64_t d : dims) count *= static_cast<size_t>(d);
      hooks.mutator->AfterBoundary(boundary.name, phase, data, count, example_index);
    }
  } else {
    (void)boundary, (void)phase, (void)data, (void)dims, (void)example_index, (void)hooks;
  }
}

template <typename S>
void ExampleEngine<S>::ObserveEach(const Boundary& boundary, Phase phase, S* data,
                                   std::initializer_list<int64_t> dims,
                                   const ExampleHooks& hooks) const {
  if (hooks.observer == nullptr && hooks.mutator == nullptr) return;
  size_t stride = 1;
  for (int64_t d : dims) stride *= static_cast<size_t>(d);
  for (size_t e = 0; e < count_; ++e) {
    Observe(boundary, phase, data + e * stride, dims, first_example_ + e, hooks);
  }
}

template <typename S>
void ExampleEngine<S>::BlockForward(int l, const S* params, const S* block_in,
                                    const ExampleHooks& hooks) {
  const int T = config_.seq_len, C = config_.channels, NH = config_.num_heads;
  const int rows = T * static_cast<int>(count_);  // all positions of the block
  const size_t TC = static_cast<size_t>(T) * C, att = static_cast<size_t>(NH) * T * T;
  const size_t all = TC * count_;
  const BlockOffsets& o = layout_.block(l);
  const BoundaryNames::Block& n = names_.blocks[l];
  LayerActs& a = acts_[l];
  const bool attn_drop = config_.attn_dropout > 0, resid_drop = config_.resid_dropout > 0;
  const Phase fwd = Phase::kForward;

  // Row-wise operators and matrix multiplies run over all rows of the block
  // at once; attention and the mask draws are per example.
  LayerNormForward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), block_in,
                   params + o.ln1_w, params + o.ln1_b, rows, C);
  ObserveEach(n.ln1_out, fwd, a.ln1.data(), {T, C}, hooks);
  MatmulForward(a.qkv.data(), a.ln1.data(), params + o.qkv_w, params + o.qkv_b, rows, C, 3 * C);
  ObserveEach(n.qkv_out, fwd, a.qkv.data(), {T, 3 * C}, hooks);

  for (size_t e = 0; e < count_; ++e) {
    uint8_t* keep_att = nullptr;
    if (attn_drop) {
      keep_att = a.keep_att.data() + e * att;
      hooks.masks->FillKeepMask(first_example_ + e, l, DropoutSite::kAttentionProbs,
                                config_.attn_dropout, keep_att, att);
    }
    AttentionForward(a.atty.data() + e * TC, a.preatt.data() + e * att, a.att.data() + e * att,
                     attn_drop ? a.att_dropped.data() + e * att : nullptr,
                     a.qkv.data() + 3 * e * TC, keep_att, attn_keep_scale_, T, C, NH);
  }
  if (hooks.observer != nullptr || hooks.mutator != nullptr) {
    for (size_t e = 0; e < count_; ++e) {  // per example: softmax, dropout, attention output
      Observe(n.softmax_out, fwd, a.att.data() + e * att, {NH, T, T}, first_example_ + e, hooks);
      if (attn_drop) {
        Observe(n.att_dropout_out, fwd, a.att_dropped.data() + e * att, {NH, T, T},
                first_example_ + e, hooks);
      }
      Observe(n.attn_out, fwd, a.atty.data() + e * TC, {T, C}, first_example_ + e, hooks);
    }
  }

  MatmulForward(a.attproj.data(), a.atty.data(), params + o.attn_proj_w, params + o.attn_proj_b,
                rows, C, C);
  ObserveEach(n.attn_proj_out, fwd, a.attproj.data(), {T, C}, hooks);
  const S* attn_branch = a.attproj.data();
  if (resid_drop) {
    for (size_t e = 0; e < count_; ++e) {
      hooks.masks->FillKeepMask(first_example_ + e, l, DropoutSite::kAttentionResidual,
                                config_.resid_dropout, a.keep_attproj.data() + e * TC, TC);
    }
    DropoutForward(a.attproj_dropped.data(), a.attproj.data(), a.keep_attproj.data(),
                   resid_keep_scale_, all);
    ObserveEach(n.attn_proj_dropout_out, fwd, a.attproj_dropped.data(), {T, C}, hooks);
    attn_branch = a.attproj_dropped.data();
  }
  ResidualForward(a.res2.data(), block_in, attn_branch, all);
  ObserveEach(n.attn_residual_out, fwd, a.res2.data(), {T, C}, hooks);

  LayerNormForward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                   params + o.ln2_w, params + o.ln2_b, rows, C);
  ObserveEach(n.ln2_out, fwd, a.ln2.data(), {T, C}, hooks);
  MatmulForward(a.fch.data(), a.ln2.data(), params + o.fc_w, params + o.fc_b, rows, C, 4 * C);
  ObserveEach(n.fc_out, fwd, a.fch.data(), {T, 4 * C}, hooks);
  GeluForward(a.fch_gelu.data(), a.fch.data(), 4 * all);
  ObserveEach(n.gelu_out, fwd, a.fch_gelu.data(), {T, 4 * C}, hooks);
  MatmulForward(a.fcproj.data(), a.fch_gelu.data(), params + o.mlp_proj_w,
                params + o.mlp_proj_b, rows, 4 * C, C);
  ObserveEach(n.mlp_proj_out, fwd, a.fcproj.data(), {T, C}, hooks);
  const S* mlp_branch = a.fcproj.data();
  if (resid_drop) {
    for (size_t e = 0; e < count_; ++e) {
      hooks.masks->FillKeepMask(first_example_ + e, l, DropoutSite::kMlpResidual,
                                config_.resid_dropout, a.keep_fcproj.data() + e * TC, TC);
    }
    DropoutForward(a.fcproj_dropped.data(), a.fcproj.data(), a.keep_fcproj.data(),
                   resid_keep_scale_, all);
    ObserveEach(n.mlp_proj_dropout_out, fwd, a.fcproj_dropped.data(), {T, C}, hooks);
    mlp_branch = a.fcproj_dropped.data();
  }
  ResidualForward(a.res3.data(), a.res2.data(), mlp_branch, all);
  ObserveEach(n.mlp_residual_out, fwd, a.res3.data(), {T, C}, hooks);
}

template <typename S>
S ExampleEngine<S>::Forward(const S* params, const uint8_t* tokens, uint64_t example_index,
                            const ExampleHooks& hooks) {
  S loss;
  ForwardBlock(params, tokens, 1, example_index, hooks, &loss);
  return loss;
}

template <typename S>
void ExampleEngine<S>::ForwardBlock(const S* params, const uint8_t* tokens, size_t count,
                                    uint64_t first_example, const ExampleHooks& hooks,
                                    S* losses) {
  RunInVectorBuild<S>(vector_isa_,
                      [&] { ForwardBlockBody(params, tokens, count, first_example, hooks, losses); });
}

template <typename S>
void ExampleEngine<S>::ForwardBlockBody(const S* params, const uint8_t* tokens, size_t count,
                                        uint64_t first_example, const ExampleHooks& hooks,
                                        S* losses) {
  const int T = config_.seq_len, C = config_.channels, V = config_.vocab_size;
  const size_t TC = static_cast<size_t>(T) * C, window = static_cast<size_t>(T) + 1;
  const Phase fwd = Phase::kForward;
  if ((config_.attn_dropout > 0 || config_.resid_dropout > 0) && hooks.masks == nullptr) {
    // A programming error, not a data error: BatchGradients checks it first.
    std::fprintf(stderr, "dgrr::model: dropout is on but ExampleHooks::masks is null\n");
    std::abort();
  }
  if (count == 0 || count > max_examples_) {
    std::fprintf(stderr, "dgrr::model: block of %zu examples; this engine holds 1 to %zu\n", count,
                 max_examples_);
    std::abort();
  }
  count_ = count;
  first_example_ = first_example;
  tokens_ = tokens;
  const int rows = T * static_cast<int>(count);
  for (size_t e = 0; e < count; ++e) {
    EncoderForward(encoded_.data() + e * TC, tokens + e * window, params + layout_.wte(),
                   params + layout_.wpe(), T, C);
  }
  ObserveEach(kEmbedOut, fwd, encoded_.data(), {T, C}, hooks);
  const S* block_in = encoded_.data();
  for (int l = 0; l < config_.num_layers; ++l) {
    BlockForward(l, params, block_in, hooks);
    block_in = acts_[l].res3.data();
  }
  LayerNormForward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), block_in,
                   params + layout_.lnf_w(), params + layout_.lnf_b(), rows, C);
  ObserveEach(kLnfOut, fwd, lnf_.data(), {T, C}, hooks);
  LmHeadForward(logits_.data(), lnf_.data(), params + layout_.wte(), rows, C, V);
  ObserveEach(kLogits, fwd, logits_.data(), {T, V}, hooks);
  for (size_t e = 0; e < count; ++e) {
    const size_t row0 = e * static_cast<size_t>(T);
    CrossEntropyForward(probs_.data() + row0 * V, losses_.data() + row0,
                        logits_.data() + row0 * V, tokens + e * window + 1, T, V);
    S sum = 0;
    for (int t = 0; t < T; ++t) sum += losses_[row0 + t];
    losses[e] = sum / static_cast<S>(T);
    Observe(kLoss, fwd, &losses[e], {}, first_example + e, hooks);
  }
}

template <typename S>
void ExampleEngine<S>::BlockBackward(int l, const S* params, const S* block_in,
                                     const S* dblock_out, S* dblock_in, S* const* grads,
                                     const ExampleHooks& hooks) {
  const int T = config_.seq_len, C = config_.channels, NH = config_.num_heads;
  const int rows = T * static_cast<int>(count_);
  const size_t TC = static_cast<size_t>(T) * C, att = static_cast<size_t>(NH) * T * T;
  const size_t all = TC * count_;
  const BlockOffsets& o = layout_.block(l);
  const BoundaryNames::Block& n = names_.blocks[l];
  LayerActs& a = acts_[l];
  LayerGrads& g = grads_[l];
  const bool attn_drop = config_.attn_dropout > 0, resid_drop = config_.resid_dropout > 0;
  const Phase bwd = Phase::kBackward;
  // A linear layer's backward: the input gradient for all rows in one
  // product, the weight and bias gradients per example into that example's
  // own buffer (sums over its t ascending, nothing summed across examples).
  // Each is the only contribution to dinp and to the weight gradient, so the
  // products write them (starting from +0.0, as accumulating into a zeroed
  // buffer does: the same bits without zeroing first).
  auto matmul_backward = [&](S* dinp, size_t w, size_t b, const S* dout, const S* inp, int in,
                             int out) {
    GemmTransB(dinp, dout, params + w, rows, out, in, /*accumulate=*/false);
    for (size_t e = 0; e < count_; ++e) {
      const S* dout_e = dout + e * T * static_cast<size_t>(out);
      const S* inp_e = inp + e * T * static_cast<size_t>(in);
      if (!sum_pairs_) {
        GemmTransA(grads[e] + w, inp_e, dout_e, in, T, out, /*accumulate=*/false);
      } else if (e % 2 == 0 && e + 1 < count_) {  // the pair's sum; the odd one is never written
        GemmTransAPairSum(grads[e] + w, inp_e, dout_e, inp_e + T * static_cast<size_t>(in),
                          dout_e + T * static_cast<size_t>(out), in, T, out);
      } else if (e % 2 == 0) {  // an odd count's last example, alone
        GemmTransA(grads[e] + w, inp_e, dout_e, in, T, out, /*accumulate=*/false);
      }
      S* dbias = grads[e] + b;
      for (int t = 0; t < T; ++t) {
        for (int k = 0; k < out; ++k) dbias[k] += dout_e[static_cast<size_t>(t) * out + k];
      }
    }
  };
  auto layernorm_backward = [&](S* dinp, size_t w, size_t b, const S* dout, const S* inp,
                                const S* mean, const S* rstd) {
    for (size_t e = 0; e < count_; ++e) {
      const size_t r0 = e * T;
      LayerNormBackward(dinp + r0 * C, grads[e] + w, grads[e] + b, dout + r0 * C, inp + r0 * C,
                        params + w, mean + r0, rstd + r0, T, C);
    }
  };
  // dblock_out, the gradient of this block's output, is complete on entry.

  // res3 = res2 + mlp_branch
  S* dmlp_branch = resid_drop ? g.fcproj_dropped.data() : g.fcproj.data();
  // The first contribution to each input gradient writes it (accumulate =
  // false: the bits of adding into zeros); the later ones add.
  ResidualBackward(g.res2.data(), dmlp_branch, dblock_out, all, /*accumulate=*/false);
  if (resid_drop) {
    DropoutBackward(g.fcproj.data(), g.fcproj_dropped.data(), a.keep_fcproj.data(),
                    resid_keep_scale_, all, /*accumulate=*/false);
  }
  matmul_backward(g.fch_gelu.data(), o.mlp_proj_w, o.mlp_proj_b, g.fcproj.data(),
                  a.fch_gelu.data(), 4 * C, C);
  ObserveEach(n.mlp_proj_dinp, bwd, g.fch_gelu.data(), {T, 4 * C}, hooks);
  GeluBackward(g.fch.data(), a.fch.data(), g.fch_gelu.data(), 4 * all, /*accumulate=*/false);
  ObserveEach(n.gelu_dinp, bwd, g.fch.data(), {T, 4 * C}, hooks);
  matmul_backward(g.ln2.data(), o.fc_w, o.fc_b, g.fch.data(), a.ln2.data(), C, 4 * C);
  ObserveEach(n.fc_dinp, bwd, g.ln2.data(), {T, C}, hooks);
  layernorm_backward(g.res2.data(), o.ln2_w, o.ln2_b, g.ln2.data(), a.res2.data(),
                     a.ln2_mean.data(), a.ln2_rstd.data());
  ObserveEach(n.ln2_dinp, bwd, g.res2.data(), {T, C}, hooks);

  // res2 = block_in + attn_branch
  S* dattn_branch = resid_drop ? g.attproj_dropped.data() : g.attproj.data();
  ResidualBackward(dblock_in, dattn_branch, g.res2.data(), all, /*accumulate=*/false);
  if (resid_drop) {
    DropoutBackward(g.attproj.data(), g.attproj_dropped.data(), a.keep_attproj.data(),
                    resid_keep_scale_, all, /*accumulate=*/false);
  }
  matmul_backward(g.atty.data(), o.attn_proj_w, o.attn_proj_b, g.attproj.data(), a.atty.data(),
                  C, C);
  ObserveEach(n.attn_proj_dinp, bwd, g.atty.data(), {T, C}, hooks);
  for (size_t e = 0; e < count_; ++e) {
    AttentionBackward(g.qkv.data() + 3 * e * TC, g.att.data() + e * att,
                      g.preatt.data() + e * att, g.atty.data() + e * TC,
                      a.qkv.data() + 3 * e * TC, a.att.data() + e * att,
                      attn_drop ? a.att_dropped.data() + e * att : nullptr,
                      attn_drop ? a.keep_att.data() + e * att : nullptr, attn_keep_scale_, T, C,
                      NH);
  }
  if (hooks.observer != nullptr || hooks.mutator != nullptr) {
    for (size_t e = 0; e < count_; ++e) {  // per example: softmax, then attention input
      Observe(n.softmax_dinp, bwd, g.preatt.data() + e * att, {NH, T, T}, first_example_ + e,
              hooks);
      Observe(n.attn_dinp, bwd, g.qkv.data() + 3 * e * TC, {T, 3 * C}, first_example_ + e,
              hooks);
    }
  }
  matmul_backward(g.ln1.data(), o.qkv_w, o.qkv_b, g.qkv.data(), a.ln1.data(), C, 3 * C);
  ObserveEach(n.qkv_dinp, bwd, g.ln1.data(), {T, C}, hooks);
  layernorm_backward(dblock_in, o.ln1_w, o.ln1_b, g.ln1.data(), block_in, a.ln1_mean.data(),
                     a.ln1_rstd.data());
  ObserveEach(n.ln1_dinp, bwd, dblock_in, {T, C}, hooks);
}

template <typename S>
void ExampleEngine<S>::Backward(const S* params, const uint8_t* tokens, uint64_t example_index,
                                S* grad, const ExampleHooks& hooks) {
  S* const grads[1] = {grad};
  BackwardBlock(params, tokens, 1, example_index, grads, hooks);
}

template <typename S>
void ExampleEngine<S>::BackwardBlock(const S* params, const uint8_t* tokens, size_t count,
                                     uint64_t first_example, S* const* grads,
                                     const ExampleHooks& hooks) {
  RunInVectorBuild<S>(vector_isa_, [&] {
    BackwardBlockBody(params, tokens, count, first_example, grads, hooks, /*sum_pairs=*/false);
  });
}

template <typename S>
void ExampleEngine<S>::BackwardBlockSummingPairs(const S* params, const uint8_t* tokens,
                                                 size_t count, uint64_t first_example,
                                                 S* const* grads, const ExampleHooks& hooks) {
  RunInVectorBuild<S>(vector_isa_, [&] {
    BackwardBlockBody(params, tokens, count, first_example, grads, hooks, /*sum_pairs=*/true);
  });
}

template <typename S>
void ExampleEngine<S>::BackwardBlockBody(const S* params, const uint8_t* tokens, size_t count,
                                         uint64_t first_example, S* const* grads,
                                         const ExampleHooks& hooks, bool sum_pairs) {
  const int T = config_.seq_len, C = config_.channels, V = config_.vocab_size;
  const int L = config_.num_layers;
  const size_t TC = static_cast<size_t>(T) * C, window = static_cast<size_t>(T) + 1;
  const int rows = T * static_cast<int>(count);
  const Phase bwd = Phase::kBackward;
  if (count != count_ || first_example != first_example_ || tokens != tokens_) {
    std::fprintf(stderr, "dgrr::model: BackwardBlock is not for the block last run forward\n");
    std::abort();
  }
  sum_pairs_ = sum_pairs;
  // Fresh buffers: each example's gradient is its own, never an accumulation.
  // Only what is accumulated into is zeroed; what a product or the attention
  // backward writes whole (the matrices' gradients, their input gradients,
  // datt and dpreatt) is not.
  for (size_t e = 0; e < count; ++e) {
    for (size_t i : accumulated_tensors_) {
      const NamedTensor& t = layout_.tensors()[i];
      std::fill(grads[e] + t.offset, grads[e] + t.offset + t.size, S(0));
    }
  }
  // The activations' gradients are written by their first contribution
  // (BlockBackward); only the last block's output gradient, which the final
  // layernorm's backward adds into, starts from zeros.
  Zero(grads_[L - 1].res3);
  // d(mean of T token losses)/d(token loss) = 1/T.
  std::fill(dlosses_.begin(), dlosses_.end(), S(1) / static_cast<S>(T));
  for (size_t e = 0; e < count; ++e) {
    const size_t row0 = e * static_cast<size_t>(T);
    CrossEntropyBackward(dlogits_.data() + row0 * V, probs_.data() + row0 * V,
                         tokens + e * window + 1, dlosses_.data() + row0, T, V,
                         /*accumulate=*/false);
  }
  ObserveEach(kLossDinp, bwd, dlogits_.data(), {T, V}, hooks);
  // LM head: the input gradient for all rows at once, dwte per example. Both
  // are the first contributions (the encoder adds to dwte last), so written.
  Gemm(dlnf_.data(), dlogits_.data(), params + layout_.wte(), rows, V, C, /*accumulate=*/false);
  for (size_t e = 0; e < count; ++e) {
    const size_t row0 = e * static_cast<size_t>(T);
    GemmTransA(grads[e] + layout_.wte(), dlogits_.data() + row0 * V, lnf_.data() + row0 * C, V,
               T, C, /*accumulate=*/false);  // sum over t ascending
  }
  ObserveEach(kLmHeadDinp, bwd, dlnf_.data(), {T, C}, hooks);
  S* dres = grads_[L - 1].res3.data();
  const S* res = acts_[L - 1].res3.data();
  for (size_t e = 0; e < count; ++e) {
    const size_t row0 = e * static_cast<size_t>(T);
    LayerNormBackward(dres + row0 * C, grads[e] + layout_.lnf_w(), grads[e] + layout_.lnf_b(),
                      dlnf_.data() + row0 * C, res + row0 * C, params + layout_.lnf_w(),
                      lnf_mean_.data() + row0, lnf_rstd_.data() + row0, T, C);
  }
  ObserveEach(kLnfDinp, bwd, dres, {T, C}, hooks);
  for (int l = L - 1; l >= 0; --l) {
    const S* block_in = l > 0 ? acts_[l - 1].res3.data() : encoded_.data();
    S* dblock_in = l > 0 ? grads_[l - 1].res3.data() : dencoded_.data();
    BlockBackward(l, params, block_in, grads_[l].res3.data(), dblock_in, grads, hooks);
  }
  for (size_t e = 0; e < count; ++e) {
    EncoderBackward(grads[e] + layout_.wte(), grads[e] + layout_.wpe(), dencoded_.data() + e * TC,
                    tokens + e * window, T, C);
  }
  if (sum_pairs) {
    // The tensors the products did not sum: left + right, as the tree does.
    for (size_t e = 0; e + 1 < count; e += 2) {
      for (size_t i : pair_added_tensors_) {
        const NamedTensor& t = layout_.tensors()[i];
        S* left = grads[e] + t.offset;
        const S* right = grads[e + 1] + t.offset;
        for (size_t k = 0; k < t.size; ++k) left[k] = left[k] + right[k];
      }
    }
  }
  sum_pairs_ = false;
}

template class ExampleEngine<float>;
template class ExampleEngine<double>;

// ---------------------------------------------------------------- Gpt

Gpt::Gpt(const GptConfig& config)
    : config_(config), layout_(config), params_(layout_.total_size(), 0.0f) {}

StatusOr<Gpt> Gpt::Create(const GptConfig& config) {
  DGRR_RETURN_IF_ERROR(config.Validate());
  return Gpt(config);
}

namespace {
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
}  // namespace

void Gpt::Initialize(const NormalFill& fill) {
  const float base_std = 0.02f;
  // Projections that write into the residual stream are scaled down so the
  // stream's variance does not grow with depth (GPT-2).
  const float residual_std =
      static_cast<float>(0.02 / std::sqrt(2.0 * static_cast<double>(config_.num_layers)));
  const std::vector<NamedTensor>& tensors = layout_.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const NamedTensor& t = tensors[i];
    float* out = params_.data() + t.offset;
    // Layernorm weights are the only non-decayed tensors that are not biases.
    const bool is_norm = !t.weight_decay && EndsWith(t.name, ".w");
    if (EndsWith(t.name, ".b")) {
      std::fill(out, out + t.size, 0.0f);
    } else if (is_norm) {
      std::fill(out, out + t.size, 1.0f);
    } else {
      fill(t.name, i, out, t.size);
      const bool residual = EndsWith(t.name, "attn.proj.w") || EndsWith(t.name, "mlp.proj.w");
      const float std_dev = residual ? residual_std : base_std;
      for (size_t k = 0; k < t.size; ++k) out[k] *= std_dev;
    }
  }
}

NormalFill SplitMixNormalFill(uint64_t seed) {
  return [seed](std::string_view, size_t tensor_index, float* out, size_t count) {
    SplitMixStream stream(SplitMix64(seed) ^ SplitMix64(0x1000 + tensor_index));
    constexpr double kTwoPi = 2.0 * std::numbers::pi;
    for (size_t k = 0; k < count; ++k) {
      // Box-Muller from two 53-bit uniforms, u1 in (0, 1] so log is finite.
      const double u1 = (static_cast<double>(stream.Next() >> 11) + 1.0) * 0x1.0p-53;
      const double u2 = static_cast<double>(stream.Next() >> 11) * 0x1.0p-53;
      out[k] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
    }
  };
}

void SplitMixDropoutMasks::FillKeepMask(uint64_t example_index, int layer, DropoutSite site,
                                        float drop_probability, uint8_t* keep,
                                        size_t count) const {
  uint64_t key = SplitMix64(seed_);
  key = SplitMix64(key ^ example_index);
  key = SplitMix64(key ^ (static_cast<uint64_t>(layer) << 8 | static_cast<uint64_t>(site)));
  // Keep when a 24-bit uniform integer is at or above p * 2^24.
  const uint64_t threshold = static_cast<uint64_t>(static_cast<double>(drop_probability) * 16777216.0);
  for (size_t i = 0; i < count; ++i) keep[i] = (SplitMix64(key + i) >> 40) >= threshold ? 1 : 0;
}

}  // namespace dgrr::model
