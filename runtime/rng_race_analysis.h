// Racy random generators (DETrain §3.3, its Table 1): which generators are
// drawn from concurrently by the workers of a data-parallel region?
//
// A forward, flow-sensitive dataflow analysis over the program IR. The state
// is the set of generators that are thread-safe at the current point; the
// result accumulates ERR, the generators drawn while not thread-safe:
//   create_generator g    ThreadSafe += {g}   (created in a region: private to it)
//   data_parallel enter   ThreadSafe  = {}    (everything created outside is shared)
//   data_parallel leave   ThreadSafe  = ThreadSafe before the region + those created in it
//   random_gen g          g not in ThreadSafe  =>  ERR += {g}
//   for                   fixed point; the loop head keeps what is safe on
//                         entry AND after the body (intersection: must-safe)
// Generators that are drawn but never created in the program (a framework's
// global generator) exist before it starts: safe outside regions, shared inside.
//
// Each ERR generator must be replaced by dgrr's counter-based per-example
// streams, whose draws do not depend on which worker runs first.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/program_ir.h"

namespace dgrr::ir {

struct RacyDraw {
  int statement = 0;  // the random_gen statement
  int region = 0;     // the innermost data_parallel statement enclosing it
};

struct RngRaceFinding {
  std::string generator;
  int created_at = 0;           // first create_generator statement; 0: never created (global)
  std::vector<RacyDraw> draws;  // by statement id
};

struct RngRaceReport {
  std::vector<RngRaceFinding> racy;  // sorted by generator name

  // The ERR set, sorted.
  std::vector<std::string> RacyGenerators() const;
  // One line per racy draw, naming the statement and the fix; "" when none.
  std::string ToString(const Program& program) const;
};

// Fails with InvalidArgument when the program does not validate.
StatusOr<RngRaceReport> AnalyzeRngRaces(const Program& program);

}  // namespace dgrr::ir
