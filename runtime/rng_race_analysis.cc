#include "runtime/rng_race_analysis.h"

#include <algorithm>
#include <map>
#include <set>

namespace dgrr::ir {
namespace {

using GeneratorSet = std::set<std::string>;

GeneratorSet Intersect(const GeneratorSet& a, const GeneratorSet& b) {
  GeneratorSet out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::inserter(out, out.end()));
  return out;
}

// Walks the structured program once per block, carrying the ThreadSafe set.
class RaceAnalyzer {
 public:
  GeneratorSet Block(const std::vector<Statement>& block, GeneratorSet safe) {
    for (const Statement& stmt : block) safe = Step(stmt, std::move(safe));
    return safe;
  }

  // generator -> (draw statement -> innermost region)
  const std::map<std::string, std::map<int, int>>& err() const { return err_; }

 private:
  GeneratorSet Step(const Statement& stmt, GeneratorSet safe) {
    switch (stmt.kind) {
      case StmtKind::kCreateGenerator:
        safe.insert(stmt.generator);
        return safe;
      case StmtKind::kRandomGen:
        if (!safe.count(stmt.generator)) {
          err_[stmt.generator][stmt.id] = regions_.empty() ? 0 : regions_.back();
        }
        return safe;
      case StmtKind::kDataParallel:
        return Region(stmt, std::move(safe));
      case StmtKind::kFor:
        return Loop(stmt, std::move(safe));
      default:
        return safe;
    }
  }

  // Inside, nothing from outside is private; after it, the outside state
  // comes back, joined by the generators the region itself created.
  GeneratorSet Region(const Statement& region, GeneratorSet safe) {
    regions_.push_back(region.id);
    GeneratorSet created_inside = Block(region.body, {});
    regions_.pop_back();
    safe.insert(created_inside.begin(), created_inside.end());
    return safe;
  }

  // The head state shrinks (intersection) until the body maps it to a
  // superset of itself; it only shrinks and is finite, so this terminates.
  // Draws flagged in any round are flagged at the fixed point too, because
  // every round's state contains the fixed point's.
  GeneratorSet Loop(const Statement& loop, GeneratorSet entry) {
    GeneratorSet head = std::move(entry);
    for (;;) {
      GeneratorSet next = Intersect(head, Block(loop.body, head));
      if (next == head) return head;
      head = std::move(next);
    }
  }

  std::vector<int> regions_;  // enclosing data_parallel ids, innermost last
  std::map<std::string, std::map<int, int>> err_;
};

// Generators the program draws from or creates. All of them exist when the
// program starts (a generator never created is a framework global).
GeneratorSet AllGenerators(const Program& program) {
  GeneratorSet all;
  for (const StatementRef& ref : program.Preorder()) {
    if (!ref.stmt->generator.empty()) all.insert(ref.stmt->generator);
  }
  return all;
}

int FirstCreation(const Program& program, const std::string& generator) {
  for (const StatementRef& ref : program.Preorder()) {
    if (ref.stmt->kind == StmtKind::kCreateGenerator && ref.stmt->generator == generator) {
      return ref.stmt->id;
    }
  }
  return 0;
}

}  // namespace

std::vector<std::string> RngRaceReport::RacyGenerators() const {
  std::vector<std::string> names;
  for (const RngRaceFinding& finding : racy) names.push_back(finding.generator);
  return names;
}

std::string RngRaceReport::ToString(const Program& program) const {
  std::string out;
  for (const RngRaceFinding& finding : racy) {
    const std::string origin = finding.created_at == 0
                                   ? "a global generator"
                                   : "created at statement " + std::to_string(finding.created_at);
    for (const RacyDraw& draw : finding.draws) {
      const Statement* stmt = program.Find(draw.statement);
      out += finding.generator + ": drawn at statement " + std::to_string(draw.statement) + " (`" +
             (stmt ? stmt->label : "?") + "`) inside data-parallel region " +
             std::to_string(draw.region) + " where it is shared by the workers (" + origin +
             "); replace it with a per-example counter-based stream\n";
    }
  }
  return out;
}

StatusOr<RngRaceReport> AnalyzeRngRaces(const Program& program) {
  DGRR_RETURN_IF_ERROR(ValidateProgram(program));
  RaceAnalyzer analyzer;
  analyzer.Block(program.body, AllGenerators(program));
  RngRaceReport report;
  for (const auto& [generator, draws] : analyzer.err()) {
    RngRaceFinding finding;
    finding.generator = generator;
    finding.created_at = FirstCreation(program, generator);
    for (const auto& [statement, region] : draws) finding.draws.push_back({statement, region});
    report.racy.push_back(std::move(finding));
  }
  return report;
}

}  // namespace dgrr::ir
