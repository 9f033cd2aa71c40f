#include "model/train_state.h"

#include "fingerprint/fingerprint.h"
#include "model/training_program.h"

namespace dgrr::model {
namespace {

// The program variables split per tensor, with the role of their entries.
struct TensorVariable {
  const char* name;
  StateRole role;
};
constexpr TensorVariable kTensorVariables[] = {
    {"params", StateRole::kParameter},
    {"adamw.m", StateRole::kOptimizer},
    {"adamw.v", StateRole::kOptimizer},
};

// A parameter keeps the model's name; a moment takes the name the trace
// gives AdamW's boundary of it ("adamw.m.wte").
std::string TensorEntryName(const std::string& variable, const NamedTensor& tensor) {
  return variable == "params" ? tensor.name : variable + "." + tensor.name;
}

float* VariableData(const TrainStateBuffers& b, const std::string& variable) {
  if (variable == "params") return b.params;
  return variable == "adamw.m" ? b.adamw_m : b.adamw_v;
}

// A checkpoint of the earlier layout (one flat entry per variable) as the
// per-tensor one: each flat replicated entry cut into the layout's tensors.
StatusOr<checkpoint::Checkpoint> SplitFlatEntries(const checkpoint::Checkpoint& flat,
                                                  const ParameterLayout& layout) {
  checkpoint::Checkpoint split = flat;
  split.replicated.clear();
  for (const checkpoint::SavedEntry& e : flat.replicated) {
    bool per_tensor_variable = false;
    for (const TensorVariable& v : kTensorVariables) per_tensor_variable |= e.name == v.name;
    if (!per_tensor_variable) {
      split.replicated.push_back(e);
      continue;
    }
    const uint64_t expected = layout.total_size() * sizeof(float);
    if (e.dtype != DType::kF32 || e.data.size() != expected) {
      return Status::FailedPrecondition(flat.path + ": state entry '" + e.name + "' does not match the model (saved " +
                                        std::string(DTypeName(e.dtype)) + ", " + std::to_string(e.data.size()) +
                                        " bytes; the model's " + std::to_string(expected) + " bytes of f32)");
    }
    for (const NamedTensor& t : layout.tensors()) {
      checkpoint::SavedEntry piece;
      piece.name = TensorEntryName(e.name, t);
      piece.dtype = DType::kF32;
      piece.shape = t.shape;
      piece.role = e.role;
      piece.replicated = true;
      const auto begin = e.data.begin() + static_cast<std::ptrdiff_t>(t.offset * sizeof(float));
      piece.data.assign(begin, begin + static_cast<std::ptrdiff_t>(t.size * sizeof(float)));
      piece.xxh3 = Xxh3(piece.data.data(), piece.data.size());
      split.replicated.push_back(std::move(piece));
    }
  }
  return split;
}

}  // namespace

Status RegisterTrainState(const ParameterLayout& layout, const TrainStateBuffers& buffers,
                          const checkpoint::FastForwardPlan& plan, StateRegistry& registry) {
  for (const TensorVariable& v : kTensorVariables) {
    DGRR_ASSIGN_OR_RETURN(RestorePolicy policy, RestorePolicyFromPlan(plan, v.name));
    float* base = VariableData(buffers, v.name);
    for (const NamedTensor& t : layout.tensors()) {
      DGRR_RETURN_IF_ERROR(registry.Register({TensorEntryName(v.name, t), base + t.offset, t.size * sizeof(float),
                                              DType::kF32, t.shape, v.role, policy, /*replicated=*/true}));
    }
  }
  struct Counter {
    const char* name;
    uint64_t* data;
    StateRole role;
  };
  for (const Counter& c : {Counter{"adamw.t", buffers.adamw_t, StateRole::kCounter},
                           Counter{"cursor", buffers.cursor, StateRole::kCursor}}) {
    DGRR_ASSIGN_OR_RETURN(RestorePolicy policy, RestorePolicyFromPlan(plan, c.name));
    DGRR_RETURN_IF_ERROR(
        registry.Register({c.name, c.data, sizeof(uint64_t), DType::kU64, {1}, c.role, policy, /*replicated=*/true}));
  }
  return Status::OK();
}

Status RestoreTrainState(const checkpoint::Checkpoint& checkpoint, int rank, const ParameterLayout& layout,
                         StateRegistry& registry, const std::set<std::string>& skip_variables) {
  std::set<std::string> skip;
  for (const std::string& variable : skip_variables) {
    skip.insert(variable);
    for (const TensorVariable& v : kTensorVariables) {
      if (variable != v.name) continue;
      for (const NamedTensor& t : layout.tensors()) skip.insert(TensorEntryName(variable, t));
    }
  }
  // The flat layout is recognised by its `params` entry (no tensor of the
  // model is called that).
  if (checkpoint.Find(rank, "params") == nullptr) {
    return checkpoint::RestoreRank(checkpoint, rank, registry, skip);
  }
  DGRR_ASSIGN_OR_RETURN(checkpoint::Checkpoint split, SplitFlatEntries(checkpoint, layout));
  return checkpoint::RestoreRank(split, rank, registry, skip);
}

}  // namespace dgrr::model
