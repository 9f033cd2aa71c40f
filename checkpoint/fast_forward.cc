#include "checkpoint/fast_forward.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/json_input.h"

namespace dgrr::checkpoint {
namespace {

using ir::Program;
using ir::Statement;
using ir::StatementRef;
using ir::StmtKind;

// Needed variables, each with its witness: the id of the nearest statement
// that needs it (0: a program output needed at the end of training).
using NeededMap = std::map<std::string, int>;

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::set<std::string> Keys(const NeededMap& needed) {
  std::set<std::string> keys;
  for (const auto& [name, witness] : needed) keys.insert(name);
  return keys;
}

// The backward dataflow pass. One instance per program.
class NeededAnalyzer {
 public:
  explicit NeededAnalyzer(const Program& program)
      : loop_vars_(program.LoopVariables()),
        iteration_cap_(16 + 4 * static_cast<int>(program.Preorder().size() + program.Variables().size())) {}

  Status Run(const Program& program) {
    NeededMap at_exit;
    for (const std::string& output : program.outputs) at_exit[output] = 0;
    return Block(program.body, std::move(at_exit)).status();
  }

  NeededSets& sets() { return sets_; }
  // checkpoint statement id -> needed after it, with witnesses.
  const std::map<int, NeededMap>& at_checkpoints() const { return at_checkpoints_; }

 private:
  // Walks the block backwards: `needed` holds on exit, the result on entry.
  StatusOr<NeededMap> Block(const std::vector<Statement>& block, NeededMap needed) {
    for (auto it = block.rbegin(); it != block.rend(); ++it) {
      DGRR_ASSIGN_OR_RETURN(needed, Step(*it, std::move(needed)));
    }
    return needed;
  }

  StatusOr<NeededMap> Step(const Statement& stmt, NeededMap needed) {
    switch (stmt.kind) {
      case StmtKind::kFor: return Loop(stmt, std::move(needed));
      case StmtKind::kDataParallel: return Block(stmt.body, std::move(needed));
      case StmtKind::kCheckpoint:
        at_checkpoints_[stmt.id] = needed;
        Record(stmt, needed, needed);
        return needed;
      default: return Leaf(stmt, std::move(needed));
    }
  }

  // The right-hand side is needed only when some left-hand side is.
  NeededMap Leaf(const Statement& stmt, NeededMap needed) {
    const NeededMap after = needed;
    const bool defines_needed =
        std::any_of(stmt.defs.begin(), stmt.defs.end(), [&](const std::string& d) { return needed.count(d); });
    if (defines_needed) {
      for (const std::string& def : stmt.defs) needed.erase(def);
      for (const std::string& use : stmt.uses) {
        if (!Contains(loop_vars_, use)) needed[use] = stmt.id;  // this is now the nearest use
      }
    }
    Record(stmt, needed, after);
    return needed;
  }

  // Loop head = needed after the loop ∪ needed at the body's entry, where the
  // body ends at the head again. Grows monotonically to a fixed point. A
  // witness from the body is nearer to the head than one after the loop.
  StatusOr<NeededMap> Loop(const Statement& loop, const NeededMap& after_loop) {
    NeededMap head = after_loop;
    for (int round = 0; round < iteration_cap_; ++round) {
      DGRR_ASSIGN_OR_RETURN(NeededMap body_entry, Block(loop.body, head));
      NeededMap next = after_loop;
      for (const auto& [name, witness] : body_entry) next[name] = witness;
      if (next == head) return head;
      head = std::move(next);
    }
    return Status::Internal("needed analysis: no fixed point for loop at statement " + std::to_string(loop.id));
  }

  void Record(const Statement& stmt, const NeededMap& before, const NeededMap& after) {
    sets_.before[stmt.id] = Keys(before);
    sets_.after[stmt.id] = Keys(after);
  }

  std::vector<std::string> loop_vars_;
  int iteration_cap_;
  NeededSets sets_;
  std::map<int, NeededMap> at_checkpoints_;
};

// ---------------------------------------------------------------------------
// Planning one checkpoint
// ---------------------------------------------------------------------------

class CheckpointPlanner {
 public:
  CheckpointPlanner(const Program& program, const Statement& checkpoint, int ordinal, const NeededMap& needed)
      : program_(program),
        checkpoint_(checkpoint),
        ordinal_(ordinal),
        needed_(needed),
        all_(program.Preorder()),
        enclosing_loops_(program.EnclosingLoops(checkpoint.id)),
        loop_vars_(program.LoopVariables()) {
    for (const StatementRef& ref : all_) loops_of_[ref.stmt->id] = program.EnclosingLoops(ref.stmt->id);
  }

  StatusOr<FastForwardPlan> Plan() {
    FastForwardPlan plan;
    plan.checkpoint = ordinal_;
    plan.statement = checkpoint_.id;
    plan.label = checkpoint_.label;
    plan.saved = checkpoint_.uses;
    std::set<int> replay;
    for (const std::string& name : program_.Variables()) {
      DGRR_ASSIGN_OR_RETURN(VariablePlan var, PlanVariable(name));
      replay.insert(var.replay.begin(), var.replay.end());
      plan.variables.push_back(std::move(var));
    }
    plan.replay.assign(replay.begin(), replay.end());
    for (int id : plan.replay) plan.replay_labels[id] = program_.Find(id)->label;
    return plan;
  }

 private:
  std::string Name() const { return "checkpoint#" + std::to_string(ordinal_); }

  StatusOr<VariablePlan> PlanVariable(const std::string& name) {
    VariablePlan var;
    var.name = name;
    const auto need = needed_.find(name);
    const bool saved = Contains(checkpoint_.uses, name);
    if (saved) {
      var.action = VarAction::kSaved;
      var.reason = "restored from " + Name() + "; " +
                   (need != needed_.end() ? NeededBy(need->second) : "not needed after it, restoring is harmless");
    } else if (need != needed_.end()) {
      var.action = VarAction::kFastForward;
      DGRR_ASSIGN_OR_RETURN(var.replay, Slice(name, need->second));
      var.reason = NeededBy(need->second) + "; not saved by " + Name() + ", so resume " +
                   (var.replay.empty() ? "takes it from the training script again (a program input)"
                                       : "re-executes the statements that define it");
    } else {
      var.action = VarAction::kDropped;
      var.reason = NotNeededReason(name);
    }
    return var;
  }

  // Can `stmt` execute before this checkpoint (in program order, or in an
  // earlier iteration of a loop around both)?
  bool CanRunBefore(const Statement& stmt) const { return stmt.id < checkpoint_.id || SharesLoop(stmt); }
  bool CanRunAfter(const Statement& stmt) const { return stmt.id > checkpoint_.id || SharesLoop(stmt); }
  bool SharesLoop(const Statement& stmt) const {
    for (int loop : loops_of_.at(stmt.id)) {
      if (Contains(enclosing_loops_, loop)) return true;
    }
    return false;
  }
  bool Contains(const std::vector<int>& ids, int id) const {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  }
  bool Contains(const std::vector<std::string>& names, const std::string& name) const {
    return std::find(names.begin(), names.end(), name) != names.end();
  }

  // The statements whose re-execution regenerates `name`: every statement
  // that can run before the checkpoint and defines it, closed over what those
  // use. The values needed are the historical ones, so saved variables do not
  // cut the slice: a slice through the model reaches its weight updates.
  // Grown breadth-first so that a refusal names the nearest offending statement.
  StatusOr<std::vector<int>> Slice(const std::string& name, int witness) const {
    std::set<std::string> relevant = {name};
    std::vector<int> reached;  // breadth-first order
    for (bool grew = true; grew;) {
      grew = false;
      const std::set<std::string> frontier = relevant;
      for (const StatementRef& ref : all_) {
        const Statement& stmt = *ref.stmt;
        if (Contains(reached, stmt.id) || !CanRunBefore(stmt) || !DefinesAny(stmt, frontier)) continue;
        reached.push_back(stmt.id);
        for (const std::string& use : stmt.uses) {
          if (!Contains(loop_vars_, use)) relevant.insert(use);
        }
        grew = true;
      }
    }
    for (int id : reached) {
      const Statement& stmt = *program_.Find(id);
      if (stmt.Replayable()) continue;
      return Status::InvalidArgument(
          Name() + " (statement " + std::to_string(checkpoint_.id) + "): `" + name + "` is " + NeededBy(witness) +
          " but not saved, and regenerating it would re-execute the " + ir::StmtKindName(stmt.kind) +
          " statement " + std::to_string(id) + " (`" + stmt.label + "`), which a fast-forward never does; add `" +
          name + "` to the checkpoint");
    }
    std::sort(reached.begin(), reached.end());
    return reached;
  }

  static bool DefinesAny(const Statement& stmt, const std::set<std::string>& names) {
    return std::any_of(stmt.defs.begin(), stmt.defs.end(), [&](const std::string& d) { return names.count(d); });
  }

  std::string NeededBy(int witness) const {
    if (witness == 0) return "needed as a training output at the end of the program";
    const Statement& user = *program_.Find(witness);
    std::string where = "after " + Name();
    if (witness < checkpoint_.id) where = "in the next iteration of `" + InnermostSharedLoopLabel(user) + "`";
    return "needed by `" + user.label + "` (statement " + std::to_string(witness) + ") " + where;
  }

  std::string InnermostSharedLoopLabel(const Statement& stmt) const {
    for (int loop : enclosing_loops_) {  // innermost first
      if (Contains(loops_of_.at(stmt.id), loop)) return program_.Find(loop)->label;
    }
    return "?";
  }

  std::string NotNeededReason(const std::string& name) const {
    const Statement* redefinition = nullptr;
    bool used_later = false;
    for (const StatementRef& ref : all_) {
      const Statement& stmt = *ref.stmt;
      if (!CanRunAfter(stmt) || stmt.kind == StmtKind::kCheckpoint) continue;
      used_later = used_later || Contains(stmt.uses, name);
      if (!redefinition && Contains(stmt.defs, name)) redefinition = &stmt;
    }
    const std::string prefix = "not needed after " + Name() + ": ";
    if (!used_later) return prefix + "never used again";
    if (redefinition) return prefix + "redefined by `" + redefinition->label + "` before any use that matters";
    return prefix + "nothing needed depends on it";
  }

  const Program& program_;
  const Statement& checkpoint_;
  int ordinal_;
  const NeededMap& needed_;
  std::vector<StatementRef> all_;
  std::vector<int> enclosing_loops_;  // innermost first
  std::vector<std::string> loop_vars_;
  std::map<int, std::vector<int>> loops_of_;  // statement id -> enclosing loops
};

// ---------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------

constexpr const char* kSchema = "dgrr.plan/1";

Status JsonError(std::string_view source, const std::string& path, const std::string& reason) {
  return Status::Corruption(std::string(source) + ": " + path + ": " + reason);
}

Status ExpectKeys(const nlohmann::json& object, const std::vector<std::string>& keys, std::string_view source,
                  const std::string& path) {
  if (!object.is_object()) return JsonError(source, path, "expected an object");
  for (const std::string& key : keys) {
    if (!object.contains(key)) return JsonError(source, path, "missing key \"" + key + "\"");
  }
  for (const auto& item : object.items()) {
    if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) {
      return JsonError(source, path, "unknown key \"" + item.key() + "\"");
    }
  }
  return Status::OK();
}

StatusOr<int> ReadId(const nlohmann::json& value, std::string_view source, const std::string& path) {
  if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > (1 << 30)) {
    return JsonError(source, path, "expected a positive integer");
  }
  return static_cast<int>(value.get<int64_t>());
}

StatusOr<std::string> ReadString(const nlohmann::json& value, std::string_view source, const std::string& path) {
  if (!value.is_string()) return JsonError(source, path, "expected a string");
  return value.get<std::string>();
}

StatusOr<VarAction> ReadAction(const nlohmann::json& value, std::string_view source, const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(std::string name, ReadString(value, source, path));
  for (VarAction action : {VarAction::kSaved, VarAction::kFastForward, VarAction::kDropped}) {
    if (name == VarActionName(action)) return action;
  }
  return JsonError(source, path, "unknown action \"" + name + "\"");
}

StatusOr<VariablePlan> ReadVariable(const nlohmann::json& value, std::string_view source, const std::string& path) {
  DGRR_RETURN_IF_ERROR(ExpectKeys(value, {"name", "action", "reason", "replay"}, source, path));
  VariablePlan var;
  DGRR_ASSIGN_OR_RETURN(var.name, ReadString(value["name"], source, path + ".name"));
  DGRR_ASSIGN_OR_RETURN(var.action, ReadAction(value["action"], source, path + ".action"));
  DGRR_ASSIGN_OR_RETURN(var.reason, ReadString(value["reason"], source, path + ".reason"));
  if (!value["replay"].is_array()) return JsonError(source, path + ".replay", "expected an array");
  for (size_t i = 0; i < value["replay"].size(); ++i) {
    DGRR_ASSIGN_OR_RETURN(int id, ReadId(value["replay"][i], source, path + ".replay[" + std::to_string(i) + "]"));
    var.replay.push_back(id);
  }
  if (var.action != VarAction::kFastForward && !var.replay.empty()) {
    return JsonError(source, path + ".replay", "only a fast_forward variable replays statements");
  }
  return var;
}

StatusOr<FastForwardPlan> ReadPlan(const nlohmann::json& value, std::string_view source, const std::string& path) {
  DGRR_RETURN_IF_ERROR(
      ExpectKeys(value, {"checkpoint", "statement", "label", "saved", "variables", "replay"}, source, path));
  FastForwardPlan plan;
  DGRR_ASSIGN_OR_RETURN(plan.checkpoint, ReadId(value["checkpoint"], source, path + ".checkpoint"));
  DGRR_ASSIGN_OR_RETURN(plan.statement, ReadId(value["statement"], source, path + ".statement"));
  DGRR_ASSIGN_OR_RETURN(plan.label, ReadString(value["label"], source, path + ".label"));
  if (!value["saved"].is_array()) return JsonError(source, path + ".saved", "expected an array");
  for (size_t i = 0; i < value["saved"].size(); ++i) {
    DGRR_ASSIGN_OR_RETURN(std::string name,
                          ReadString(value["saved"][i], source, path + ".saved[" + std::to_string(i) + "]"));
    plan.saved.push_back(std::move(name));
  }
  if (!value["variables"].is_array()) return JsonError(source, path + ".variables", "expected an array");
  for (size_t i = 0; i < value["variables"].size(); ++i) {
    DGRR_ASSIGN_OR_RETURN(VariablePlan var, ReadVariable(value["variables"][i], source,
                                                         path + ".variables[" + std::to_string(i) + "]"));
    plan.variables.push_back(std::move(var));
  }
  if (!value["replay"].is_array()) return JsonError(source, path + ".replay", "expected an array");
  for (size_t i = 0; i < value["replay"].size(); ++i) {
    const std::string item = path + ".replay[" + std::to_string(i) + "]";
    DGRR_RETURN_IF_ERROR(ExpectKeys(value["replay"][i], {"statement", "label"}, source, item));
    DGRR_ASSIGN_OR_RETURN(int id, ReadId(value["replay"][i]["statement"], source, item + ".statement"));
    DGRR_ASSIGN_OR_RETURN(plan.replay_labels[id], ReadString(value["replay"][i]["label"], source, item + ".label"));
    plan.replay.push_back(id);
  }
  for (const VariablePlan& var : plan.variables) {
    for (int id : var.replay) {
      if (!plan.replay_labels.count(id)) {
        return JsonError(source, path + ".variables", "`" + var.name + "` replays statement " + std::to_string(id) +
                                                          ", which the checkpoint's replay list lacks");
      }
    }
  }
  return plan;
}

}  // namespace

const char* VarActionName(VarAction action) {
  switch (action) {
    case VarAction::kSaved: return "saved";
    case VarAction::kFastForward: return "fast_forward";
    case VarAction::kDropped: return "dropped";
  }
  return "unknown";
}

const VariablePlan* FastForwardPlan::Find(std::string_view name) const {
  for (const VariablePlan& var : variables) {
    if (var.name == name) return &var;
  }
  return nullptr;
}

StatusOr<NeededSets> AnalyzeNeeded(const ir::Program& program) {
  DGRR_RETURN_IF_ERROR(ir::ValidateProgram(program));
  NeededAnalyzer analyzer(program);
  DGRR_RETURN_IF_ERROR(analyzer.Run(program));
  return std::move(analyzer.sets());
}

StatusOr<std::vector<FastForwardPlan>> PlanFastForward(const ir::Program& program) {
  DGRR_RETURN_IF_ERROR(ir::ValidateProgram(program));
  NeededAnalyzer analyzer(program);
  DGRR_RETURN_IF_ERROR(analyzer.Run(program));
  std::vector<FastForwardPlan> plans;
  int ordinal = 0;
  for (const auto& [id, needed] : analyzer.at_checkpoints()) {  // ids ascend: program order
    CheckpointPlanner planner(program, *program.Find(id), ++ordinal, needed);
    DGRR_ASSIGN_OR_RETURN(FastForwardPlan plan, planner.Plan());
    plans.push_back(std::move(plan));
  }
  return plans;
}

std::string PlansToText(const std::vector<FastForwardPlan>& plans) {
  std::string out;
  for (const FastForwardPlan& plan : plans) {
    out += "checkpoint#" + std::to_string(plan.checkpoint) + " (statement " + std::to_string(plan.statement) +
           "): " + plan.label + "\n";
    for (const VariablePlan& var : plan.variables) {
      std::string action = VarActionName(var.action);
      action.resize(std::max<size_t>(action.size(), 13), ' ');
      out += "  " + action + var.name + ": " + var.reason + "\n";
    }
    if (plan.replay.empty()) {
      out += "  resume re-executes nothing\n";
      continue;
    }
    out += "  resume re-executes, in program order (once per skipped iteration inside loops):\n";
    for (int id : plan.replay) out += "    " + std::to_string(id) + "  " + plan.replay_labels.at(id) + "\n";
  }
  return out;
}

std::string PlansToJson(const std::vector<FastForwardPlan>& plans) {
  nlohmann::ordered_json checkpoints = nlohmann::ordered_json::array();
  for (const FastForwardPlan& plan : plans) {
    nlohmann::ordered_json variables = nlohmann::ordered_json::array();
    for (const VariablePlan& var : plan.variables) {
      variables.push_back({{"name", var.name},
                           {"action", VarActionName(var.action)},
                           {"reason", var.reason},
                           {"replay", var.replay}});
    }
    nlohmann::ordered_json replay = nlohmann::ordered_json::array();
    for (int id : plan.replay) replay.push_back({{"statement", id}, {"label", plan.replay_labels.at(id)}});
    checkpoints.push_back({{"checkpoint", plan.checkpoint},
                           {"statement", plan.statement},
                           {"label", plan.label},
                           {"saved", plan.saved},
                           {"variables", std::move(variables)},
                           {"replay", std::move(replay)}});
  }
  nlohmann::ordered_json doc = {{"schema", kSchema}, {"checkpoints", std::move(checkpoints)}};
  return doc.dump(2) + "\n";
}

StatusOr<std::vector<FastForwardPlan>> PlansFromJson(std::string_view text, std::string_view source) {
  auto parsed = ParseJson(text, source);
  if (!parsed.ok()) {
    // ParseJson's message starts with "SOURCE: "; the reason follows it.
    const std::string& m = parsed.status().message();
    return JsonError(source, "$", m.substr(std::min(m.size(), source.size() + 2)));
  }
  nlohmann::json doc = std::move(parsed).value();
  DGRR_RETURN_IF_ERROR(ExpectKeys(doc, {"schema", "checkpoints"}, source, "$"));
  if (doc["schema"] != kSchema) {
    return JsonError(source, "$.schema", "expected \"" + std::string(kSchema) + "\", found " + doc["schema"].dump());
  }
  if (!doc["checkpoints"].is_array()) return JsonError(source, "$.checkpoints", "expected an array");
  std::vector<FastForwardPlan> plans;
  for (size_t i = 0; i < doc["checkpoints"].size(); ++i) {
    DGRR_ASSIGN_OR_RETURN(FastForwardPlan plan,
                          ReadPlan(doc["checkpoints"][i], source, "$.checkpoints[" + std::to_string(i) + "]"));
    plans.push_back(std::move(plan));
  }
  return plans;
}

}  // namespace dgrr::checkpoint
