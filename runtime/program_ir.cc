#include "runtime/program_ir.h"

#include <algorithm>
#include <set>
#include <utility>

namespace dgrr::ir {
namespace {

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

// "outs = op(uses)", or "op(uses)" when nothing is defined.
std::string CallLabel(const std::vector<std::string>& defs, std::string_view op,
                      const std::vector<std::string>& uses) {
  std::string call = std::string(op) + "(" + JoinNames(uses) + ")";
  return defs.empty() ? call : JoinNames(defs) + " = " + call;
}

void AppendUnique(std::vector<std::string>* names, const std::string& name) {
  if (std::find(names->begin(), names->end(), name) == names->end()) names->push_back(name);
}

void CollectPreorder(const std::vector<Statement>& block, int parent_id, int depth,
                     std::vector<StatementRef>* out) {
  for (const Statement& stmt : block) {
    out->push_back({&stmt, parent_id, depth});
    CollectPreorder(stmt.body, stmt.id, depth + 1, out);
  }
}

bool IsIdentifier(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.';
  });
}

Status StatementError(const Statement& stmt, std::string_view what) {
  return Status::InvalidArgument("program: statement " + std::to_string(stmt.id) + " (`" +
                                 stmt.label + "`): " + std::string(what));
}

Status ValidateNames(const Statement& stmt) {
  std::set<std::string> seen_defs;
  for (const std::string& name : stmt.defs) {
    if (!IsIdentifier(name)) return StatementError(stmt, "defines bad name '" + name + "'");
    if (!seen_defs.insert(name).second) return StatementError(stmt, "defines '" + name + "' twice");
  }
  for (const std::string& name : stmt.uses) {
    if (!IsIdentifier(name)) return StatementError(stmt, "uses bad name '" + name + "'");
  }
  return Status::OK();
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Status ValidateShape(const Statement& stmt) {
  if (!stmt.HasBody() && !stmt.body.empty()) return StatementError(stmt, "only for/data_parallel have a body");
  switch (stmt.kind) {
    case StmtKind::kFor:
      if (!IsIdentifier(stmt.loop_var)) return StatementError(stmt, "for needs a loop variable");
      [[fallthrough]];
    case StmtKind::kDataParallel:
      if (!stmt.defs.empty() || !stmt.uses.empty()) return StatementError(stmt, "a block defines and uses nothing");
      return Status::OK();
    case StmtKind::kCreateGenerator:
      if (!IsIdentifier(stmt.generator) || !Contains(stmt.defs, stmt.generator)) {
        return StatementError(stmt, "create_generator must define its generator");
      }
      return Status::OK();
    case StmtKind::kRandomGen:
      if (!IsIdentifier(stmt.generator) || !Contains(stmt.defs, stmt.generator) ||
          !Contains(stmt.uses, stmt.generator)) {
        return StatementError(stmt, "random_gen must use and advance (define) its generator");
      }
      return Status::OK();
    case StmtKind::kCheckpoint:
      if (!stmt.defs.empty()) return StatementError(stmt, "checkpoint defines nothing");
      return Status::OK();
    default:
      if (!stmt.generator.empty()) return StatementError(stmt, "only generator statements name a generator");
      return Status::OK();
  }
}

}  // namespace

const char* StmtKindName(StmtKind kind) {
  switch (kind) {
    case StmtKind::kCreateGenerator: return "create_generator";
    case StmtKind::kRandomGen: return "random_gen";
    case StmtKind::kAssign: return "assign";
    case StmtKind::kBuild: return "build";
    case StmtKind::kModelCall: return "model_call";
    case StmtKind::kBackward: return "backward";
    case StmtKind::kUpdate: return "update";
    case StmtKind::kCheckpoint: return "checkpoint";
    case StmtKind::kFor: return "for";
    case StmtKind::kDataParallel: return "data_parallel";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// Program
// ---------------------------------------------------------------------------

std::vector<StatementRef> Program::Preorder() const {
  std::vector<StatementRef> out;
  CollectPreorder(body, 0, 0, &out);
  return out;
}

const Statement* Program::Find(int id) const {
  for (const StatementRef& ref : Preorder()) {
    if (ref.stmt->id == id) return ref.stmt;
  }
  return nullptr;
}

std::vector<int> Program::EnclosingLoops(int id) const {
  const std::vector<StatementRef> all = Preorder();
  auto parent_of = [&](int child) {
    for (const StatementRef& ref : all) {
      if (ref.stmt->id == child) return ref.parent_id;
    }
    return 0;
  };
  std::vector<int> loops;
  for (int p = parent_of(id); p != 0; p = parent_of(p)) {
    if (Find(p)->kind == StmtKind::kFor) loops.push_back(p);
  }
  return loops;
}

std::vector<std::string> Program::LoopVariables() const {
  std::vector<std::string> vars;
  for (const StatementRef& ref : Preorder()) {
    if (ref.stmt->kind == StmtKind::kFor) AppendUnique(&vars, ref.stmt->loop_var);
  }
  return vars;
}

std::vector<std::string> Program::Variables() const {
  std::set<std::string> vars;
  for (const StatementRef& ref : Preorder()) {
    vars.insert(ref.stmt->defs.begin(), ref.stmt->defs.end());
    vars.insert(ref.stmt->uses.begin(), ref.stmt->uses.end());
  }
  for (const std::string& loop_var : LoopVariables()) vars.erase(loop_var);
  return {vars.begin(), vars.end()};
}

std::string Program::Dump() const {
  const std::vector<StatementRef> all = Preorder();
  const size_t id_width = std::to_string(all.size()).size();
  std::string out;
  for (const StatementRef& ref : all) {
    std::string id = std::to_string(ref.stmt->id);
    out += std::string(id_width - std::min(id_width, id.size()), ' ') + id + "  ";
    out += std::string(2 * static_cast<size_t>(ref.depth), ' ') + ref.stmt->label + "\n";
  }
  if (!outputs.empty()) out += "outputs: " + JoinNames(outputs) + "\n";
  return out;
}

Status ValidateProgram(const Program& program) {
  const std::vector<StatementRef> all = program.Preorder();
  for (size_t i = 0; i < all.size(); ++i) {
    const Statement& stmt = *all[i].stmt;
    if (stmt.id != static_cast<int>(i) + 1) {
      return StatementError(stmt, "ids must be 1..N in program order; expected " + std::to_string(i + 1));
    }
    DGRR_RETURN_IF_ERROR(ValidateNames(stmt));
    DGRR_RETURN_IF_ERROR(ValidateShape(stmt));
  }
  for (const std::string& loop_var : program.LoopVariables()) {
    for (const StatementRef& ref : all) {
      if (Contains(ref.stmt->defs, loop_var)) {
        return StatementError(*ref.stmt, "assigns loop variable '" + loop_var + "'");
      }
    }
  }
  const std::vector<std::string> vars = program.Variables();
  for (const std::string& output : program.outputs) {
    if (!std::binary_search(vars.begin(), vars.end(), output)) {
      return Status::InvalidArgument("program: output '" + output + "' is not a variable of the program");
    }
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------
// ProgramBuilder
// ---------------------------------------------------------------------------

ProgramBuilder::ProgramBuilder() : open_blocks_(1) {}

int ProgramBuilder::Add(Statement stmt) {
  stmt.id = next_id_++;
  open_blocks_.back().push_back(std::move(stmt));
  return open_blocks_.back().back().id;
}

// The id is taken before the body runs so that ids follow program order.
int ProgramBuilder::AddBlock(Statement stmt, const std::function<void()>& body) {
  stmt.id = next_id_++;
  open_blocks_.emplace_back();
  body();
  stmt.body = std::move(open_blocks_.back());
  open_blocks_.pop_back();
  open_blocks_.back().push_back(std::move(stmt));
  return open_blocks_.back().back().id;
}

int ProgramBuilder::CreateGenerator(std::string generator, NameList seed_uses, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kCreateGenerator;
  stmt.defs = {generator};
  stmt.uses = seed_uses.names();
  stmt.op = "create_generator";
  stmt.generator = std::move(generator);
  stmt.label = label.empty() ? CallLabel(stmt.defs, stmt.op, stmt.uses) : std::move(label);
  return Add(std::move(stmt));
}

int ProgramBuilder::RandomGen(std::string generator, NameList outs, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kRandomGen;
  stmt.defs = outs.names();
  stmt.op = "random_gen";
  stmt.label = label.empty() ? CallLabel(stmt.defs, stmt.op, {generator}) : std::move(label);
  AppendUnique(&stmt.defs, generator);
  stmt.uses = {generator};
  stmt.generator = std::move(generator);
  return Add(std::move(stmt));
}

int ProgramBuilder::Assign(NameList defs, std::string op, NameList uses, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kAssign;
  stmt.defs = defs.names();
  stmt.uses = uses.names();
  stmt.op = std::move(op);
  stmt.label = label.empty() ? CallLabel(stmt.defs, stmt.op, stmt.uses) : std::move(label);
  return Add(std::move(stmt));
}

int ProgramBuilder::BuildModel(std::string model, NameList uses, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kBuild;
  stmt.defs = {std::move(model)};
  stmt.uses = uses.names();
  stmt.op = "build";
  stmt.label = label.empty() ? CallLabel(stmt.defs, stmt.op, stmt.uses) : std::move(label);
  return Add(std::move(stmt));
}

int ProgramBuilder::ModelCall(NameList outs, std::string model, NameList inputs, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kModelCall;
  stmt.defs = outs.names();
  stmt.uses = {model};
  for (const std::string& input : inputs.names()) AppendUnique(&stmt.uses, input);
  stmt.op = std::move(model);
  stmt.label = label.empty() ? CallLabel(stmt.defs, stmt.op, inputs.names()) : std::move(label);
  return Add(std::move(stmt));
}

int ProgramBuilder::Backward(NameList grads, NameList loss, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kBackward;
  stmt.defs = grads.names();
  stmt.uses = loss.names();
  stmt.op = "backward";
  stmt.label = label.empty() ? CallLabel(stmt.defs, stmt.op, stmt.uses) : std::move(label);
  return Add(std::move(stmt));
}

int ProgramBuilder::Update(NameList defs, NameList uses, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kUpdate;
  stmt.defs = defs.names();
  stmt.uses = uses.names();
  stmt.op = "update";
  stmt.label = label.empty() ? CallLabel(stmt.defs, stmt.op, stmt.uses) : std::move(label);
  return Add(std::move(stmt));
}

int ProgramBuilder::Checkpoint(NameList saved, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kCheckpoint;
  stmt.uses = saved.names();
  stmt.op = "checkpoint";
  stmt.label = label.empty() ? CallLabel({}, stmt.op, stmt.uses) : std::move(label);
  return Add(std::move(stmt));
}

int ProgramBuilder::For(std::string loop_var, const std::function<void()>& body, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kFor;
  stmt.op = "for";
  stmt.label = label.empty() ? "for " + loop_var + ":" : std::move(label);
  stmt.loop_var = std::move(loop_var);
  return AddBlock(std::move(stmt), body);
}

int ProgramBuilder::DataParallel(const std::function<void()>& body, std::string label) {
  Statement stmt;
  stmt.kind = StmtKind::kDataParallel;
  stmt.op = "data_parallel";
  stmt.label = label.empty() ? "data_parallel:" : std::move(label);
  return AddBlock(std::move(stmt), body);
}

void ProgramBuilder::Outputs(NameList outputs) {
  outputs_set_ = true;
  outputs_ = outputs.names();
}

Program ProgramBuilder::Build() const {
  Program program;
  program.body = open_blocks_.front();
  if (outputs_set_) {
    program.outputs = outputs_;
    return program;
  }
  for (const StatementRef& ref : program.Preorder()) {
    if (ref.stmt->kind != StmtKind::kBuild && ref.stmt->kind != StmtKind::kUpdate) continue;
    for (const std::string& def : ref.stmt->defs) AppendUnique(&program.outputs, def);
  }
  return program;
}

}  // namespace dgrr::ir
