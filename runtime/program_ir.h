// The training-program IR: a small structured language in which a training
// loop describes itself (after DETrain's Fig. 3), so dgrr can analyse it.
//
// A Program is a tree of Statements. Leaf statements read (`uses`) and write
// (`defs`) named variables; For and DataParallel statements own a child block.
// Everything is a plain value: copy it, compare it, build it in a few lines:
//
//   ir::ProgramBuilder b;
//   b.CreateGenerator("rng1");
//   b.BuildModel("model1", {"rng1"});
//   b.For("epoch", [&] {
//     b.DataParallel([&] { b.RandomGen("rng1", "mask"); });
//     b.Assign("loss", "model_call", {"model1", "mask"});
//     b.Backward("g", "loss");
//     b.Update("model1", {"model1", "g"});
//     b.Checkpoint({"model1"});
//   });
//   ir::Program p = b.Build();
//
// Statement ids are 1-based and follow program (pre-)order, so comparing ids
// compares textual positions. The full description is docs/program-ir.md.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dgrr::ir {

enum class StmtKind : uint8_t {
  kCreateGenerator,  // g = create_generator(uses...)       defs {g}
  kRandomGen,        // outs = random_gen(g)                 defs {outs..., g}: a draw advances g
  kAssign,           // defs = op(uses...)
  kBuild,            // model = build(uses...)               builds a model
  kModelCall,        // outs = model(inputs...)              uses {model, inputs...}
  kBackward,         // grad = backward(loss)                gradient computation
  kUpdate,           // model = update(uses...)              weight / optimizer-state update
  kCheckpoint,       // checkpoint(saved...)                 names what is saved
  kFor,              // for loop_var: body
  kDataParallel,     // data_parallel_begin; body; data_parallel_end
};

// "create_generator", "random_gen", ..., "data_parallel".
const char* StmtKindName(StmtKind kind);

struct Statement {
  int id = 0;  // 1-based, program order
  StmtKind kind = StmtKind::kAssign;
  std::vector<std::string> defs;  // variables written
  std::vector<std::string> uses;  // variables read
  std::string generator;          // kCreateGenerator / kRandomGen: the generator
  std::string op;                 // callee for reports ("data.next", "update", ...)
  std::string loop_var;           // kFor: the induction variable
  std::string label;              // one line of source-like text for reports
  std::vector<Statement> body;    // kFor / kDataParallel only

  bool HasBody() const { return kind == StmtKind::kFor || kind == StmtKind::kDataParallel; }
  // Gradient computation and weight updates are never re-executed by a
  // fast-forward: they would change the model that the checkpoint restores.
  bool Replayable() const { return kind != StmtKind::kBackward && kind != StmtKind::kUpdate; }
  bool operator==(const Statement&) const = default;
};

// One statement seen during a pre-order walk, with where it sits.
struct StatementRef {
  const Statement* stmt = nullptr;
  int parent_id = 0;  // the enclosing For/DataParallel; 0 at top level
  int depth = 0;      // 0 at top level
};

struct Program {
  std::vector<Statement> body;
  // Variables that matter once training ends (the trained models). The
  // builder defaults them to everything a Build or Update statement defines.
  std::vector<std::string> outputs;

  // Every statement, parents before children, in id order.
  std::vector<StatementRef> Preorder() const;
  // nullptr when no statement has this id.
  const Statement* Find(int id) const;
  // Ids of the For statements enclosing statement `id`, innermost first.
  std::vector<int> EnclosingLoops(int id) const;
  // Names of all For induction variables (the resume position, not state).
  std::vector<std::string> LoopVariables() const;
  // Every variable a statement defines or uses, sorted, without loop variables.
  std::vector<std::string> Variables() const;
  // Pretty print: one statement per line, "<id>  <indent><label>".
  std::string Dump() const;

  bool operator==(const Program&) const = default;
};

// Checks the invariants the analyses rely on: ids 1..N in pre-order, names
// that are identifiers (letters, digits, '_', '.'; not starting with a digit),
// bodies only on For/DataParallel, generators on generator statements, and
// outputs that name variables of the program.
Status ValidateProgram(const Program& program);

// A list of variable names that also accepts a single name, so both
// b.Backward("g", "loss") and b.Assign({"X", "Y"}, ...) read naturally.
class NameList {
 public:
  NameList() = default;
  NameList(const char* name) : names_{name} {}                           // NOLINT
  NameList(std::string name) : names_{std::move(name)} {}                // NOLINT
  NameList(std::initializer_list<std::string> names) : names_(names) {}  // NOLINT
  NameList(std::vector<std::string> names) : names_(std::move(names)) {} // NOLINT
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<std::string> names_;
};

// Builds a Program statement by statement. Block statements take a callback
// that adds the body. Every method returns the new statement's id. Labels are
// generated ("loss = model1(X, Y)"); pass `label` to use your own text.
class ProgramBuilder {
 public:
  ProgramBuilder();

  int CreateGenerator(std::string generator, NameList seed_uses = {}, std::string label = "");
  // Draws `outs` from `generator` (which is both used and advanced).
  int RandomGen(std::string generator, NameList outs, std::string label = "");
  int Assign(NameList defs, std::string op, NameList uses, std::string label = "");
  int BuildModel(std::string model, NameList uses = {}, std::string label = "");
  int ModelCall(NameList outs, std::string model, NameList inputs, std::string label = "");
  int Backward(NameList grads, NameList loss, std::string label = "");
  // Weight update; several defs for e.g. optimizer state updated alongside.
  int Update(NameList defs, NameList uses, std::string label = "");
  int Checkpoint(NameList saved, std::string label = "");
  int For(std::string loop_var, const std::function<void()>& body, std::string label = "");
  int DataParallel(const std::function<void()>& body, std::string label = "");
  // Replaces the default outputs (see Program::outputs).
  void Outputs(NameList outputs);

  // The program built so far (call it outside any block callback). The
  // builder stays usable.
  Program Build() const;

 private:
  int Add(Statement stmt);
  int AddBlock(Statement stmt, const std::function<void()>& body);

  std::vector<std::vector<Statement>> open_blocks_;  // back() receives statements
  int next_id_ = 1;
  bool outputs_set_ = false;
  std::vector<std::string> outputs_;
};

}  // namespace dgrr::ir
