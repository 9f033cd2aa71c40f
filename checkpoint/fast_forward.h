// What a checkpoint restores and what resume must regenerate (DETrain §4,
// its Tables 3 and 4).
//
// The Needed analysis is backward and flow-sensitive, like liveness, except
// that a statement's right-hand side is needed only when its left-hand side
// is: for a statement with defs D and uses U, and N the set needed after it,
//   D ∩ N ≠ ∅  =>  needed before = (N − D) ∪ U
//   otherwise  =>  needed before = N
// At program exit the Program's outputs (the trained models) are needed.
// Loops iterate to a fixed point (union at the loop head: the body may run
// again or the loop may exit); checkpoints and block headers are transparent.
//
// For each checkpoint statement, every variable of the program falls into one
// of three actions:
//   Saved        named by the checkpoint: restored from it;
//   FastForward  needed after the checkpoint but not saved: regenerated on
//                resume by re-executing the statements that define it (its
//                backward slice over the statements that can run before the
//                checkpoint), never gradient computation or weight updates;
//   Dropped      not needed after the checkpoint.
// When regenerating a variable would need a gradient or update statement, a
// fast-forward is impossible: the plan is refused with InvalidArgument naming
// the variable to add to the checkpoint.
//
// Plans serialise to JSON, schema "dgrr.plan/1" (docs/program-ir.md).
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "runtime/program_ir.h"

namespace dgrr::checkpoint {

enum class VarAction : uint8_t { kSaved, kFastForward, kDropped };
// "saved", "fast_forward", "dropped": the JSON spelling.
const char* VarActionName(VarAction action);

struct VariablePlan {
  std::string name;
  VarAction action = VarAction::kDropped;
  std::string reason;  // one human-readable sentence
  // kFastForward: statements to re-execute, in program order. Statements
  // inside loops run once per iteration skipped. Empty for a program input
  // (never assigned), which the training script supplies again.
  std::vector<int> replay;
  bool operator==(const VariablePlan&) const = default;
};

struct FastForwardPlan {
  int checkpoint = 0;  // 1-based ordinal among the checkpoint statements ("checkpoint#1")
  int statement = 0;   // the checkpoint statement's id
  std::string label;   // the checkpoint statement's label
  std::vector<std::string> saved;
  std::vector<VariablePlan> variables;   // sorted by name; loop variables excluded
  std::vector<int> replay;               // union of the variables' replay lists, sorted
  std::map<int, std::string> replay_labels;  // label of each statement in `replay`

  const VariablePlan* Find(std::string_view name) const;
  bool operator==(const FastForwardPlan&) const = default;
};

// The Needed sets around every leaf statement, at the fixed point.
struct NeededSets {
  std::map<int, std::set<std::string>> before;  // statement id -> needed before it
  std::map<int, std::set<std::string>> after;   // statement id -> needed after it
};
StatusOr<NeededSets> AnalyzeNeeded(const ir::Program& program);

// One plan per checkpoint statement, in program order.
StatusOr<std::vector<FastForwardPlan>> PlanFastForward(const ir::Program& program);

// Human-readable, as `dgrr plan` prints it.
std::string PlansToText(const std::vector<FastForwardPlan>& plans);

// {"schema": "dgrr.plan/1", "checkpoints": [...]}, pretty-printed, keys in a
// fixed order; the same plans always give the same bytes.
std::string PlansToJson(const std::vector<FastForwardPlan>& plans);
// Parses PlansToJson's output. Anything else fails with Corruption naming
// `source` (a file name, for messages), the JSON path and the reason.
StatusOr<std::vector<FastForwardPlan>> PlansFromJson(std::string_view text, std::string_view source);

}  // namespace dgrr::checkpoint
