// dgrr rollback: leave a run directory as if training had stopped right after
// a given step, so `dgrr train --resume` continues from there (model/rollback.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "cli/command.h"
#include "cli/run_kind.h"
#include "model/rollback.h"

namespace dgrr::cli {
namespace {

// "3, 7, 11"
std::string JoinSteps(const std::vector<uint64_t>& steps) {
  std::string out;
  for (uint64_t s : steps) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out;
}

// The one line that says what happened.
std::string Summary(const std::string& run_dir, const model::RollbackResult& r) {
  std::string line = "rolled back " + run_dir + " to step " + std::to_string(r.step) +
                     " (it had reached step " + std::to_string(r.previous_last_step) + "): ";
  if (r.reexecuted) {
    line += "re-executed steps " + std::to_string(r.first_reexecuted_step) + ".." +
            std::to_string(r.step) +
            (r.from_checkpoint ? " from the checkpoint of step " + std::to_string(*r.from_checkpoint)
                               : std::string(" from the start")) +
            " (" + std::to_string(r.boundaries_verified) + " boundaries and " +
            std::to_string(r.steps_verified) + " step ends match the traces)";
  } else {
    line += "used its checkpoint of step " + std::to_string(r.step);
  }
  line += r.checkpoint_written ? ", wrote " + r.checkpoint_path : std::string();
  line += "; cut traces at records";
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    line += std::string(i ? ", " : " ") + std::to_string(r.ranks[i].cut_at) + " (rank " +
            std::to_string(r.ranks[i].rank) + (r.ranks[i].already_cut ? ", already cut" : "") + ")";
  }
  line += r.removed_checkpoints.empty()
              ? "; no later checkpoints to remove"
              : "; removed checkpoints " + JoinSteps(r.removed_checkpoints);
  if (r.removed_temporaries > 0) {
    line += " and " + std::to_string(r.removed_temporaries) + " temporary file(s)";
  }
  return line;
}

// Built key by key: GCC 12 warns (falsely) about nested initializer lists of
// ordered_json here.
nlohmann::ordered_json ToJson(const std::string& run_dir, const model::RollbackResult& r) {
  nlohmann::ordered_json j;
  j["schema"] = "dgrr.rollback/1";
  j["run"] = run_dir;
  j["step"] = r.step;
  j["previous_last_step"] = r.previous_last_step;
  j["reexecuted"] = r.reexecuted;
  j["from_checkpoint"] = nullptr;
  if (r.from_checkpoint) j["from_checkpoint"] = *r.from_checkpoint;
  j["first_reexecuted_step"] = nullptr;
  if (r.reexecuted) j["first_reexecuted_step"] = r.first_reexecuted_step;
  j["boundaries_verified"] = r.boundaries_verified;
  j["steps_verified"] = r.steps_verified;
  j["checkpoint"] = r.checkpoint_path;
  j["checkpoint_written"] = r.checkpoint_written;
  j["ranks"] = nlohmann::ordered_json::array();
  for (const auto& rank : r.ranks) {
    nlohmann::ordered_json one;
    one["rank"] = rank.rank;
    one["cut_at"] = rank.cut_at;
    one["already_cut"] = rank.already_cut;
    j["ranks"].push_back(std::move(one));
  }
  j["removed_checkpoints"] = r.removed_checkpoints;
  j["removed_temporaries"] = r.removed_temporaries;
  j["skipped_checkpoints"] = r.skipped_checkpoints;
  return j;
}

int RunRollback(const std::vector<std::string>& args) {
  model::RollbackOptions o;
  po::options_description options("Options");
  options.add_options()("run", po::value(&o.run_dir)->required(), "run directory (positional)")(
      "step", po::value(&o.step)->required(), "the step to roll back to (0-based; kept)")(
      "fallback", "skip a corrupt checkpoint at or before --step for an older good one")(
      "quiet,q", "no progress output")("json", "print the result as JSON (schema dgrr.rollback/1)")(
      "allow-changed-program", "re-execute a program whose executable changed since the recording "
                               "(every record is still verified)");
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  int rc = ParseCommandLine(
      "rollback", "dgrr rollback RUN_DIR --step S [--fallback] [--quiet] [--json]",
      "Leaves RUN_DIR as if training had stopped right after step S (0-based), so that resuming it\n"
      "('dgrr train --out RUN_DIR --resume', or re-running a program's own command) continues from\n"
      "step S+1 and ends with the traces and parameters of the uninterrupted run. Any program\n"
      "whose run has a launch.json is re-executed from it under a control file (docs/control-file.md). The state after S comes from RUN_DIR's checkpoint of\n"
      "S, or is re-executed from the newest good checkpoint before S (or from the start) in a\n"
      "scratch directory, checking every record against RUN_DIR's traces (a mismatch: exit 5,\n"
      "RUN_DIR untouched). Then, in this order: the checkpoint of S is written to RUN_DIR/ckpt,\n"
      "every rank's trace is cut after step S's end with a ROLLED_BACK event, and the\n"
      "checkpoints of later steps are removed. Killed part way, run it again: it finishes the job.\n"
      "Progress goes to stderr; the last line on stdout says what was done (docs/rollback.md).",
      options, positional, args, vm);
  if (rc >= 0) return rc;
  o.fallback = vm.count("fallback") > 0;
  const bool quiet = vm.count("quiet") > 0;
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  auto last_print = std::chrono::steady_clock::now();
  bool announced = false;
  if (!quiet) {
    o.progress = [&](const model::TrainProgress& p) {
      // Re-execution can take a while: a line at the first step, then every few seconds.
      const auto now = std::chrono::steady_clock::now();
      const bool last = p.step == o.step;
      if (announced && !last && now - last_print < std::chrono::seconds(tty ? 1 : 3)) return;
      announced = true;
      last_print = now;
      std::fprintf(stderr, "dgrr rollback: re-executed step %lld, verified against the traces (rolling back to step %lld)\n",
                   static_cast<long long>(p.step), static_cast<long long>(o.step));
    };
  }
  // Programs that record how to run them again are re-launched; the
  // reference trainer's runs are re-executed in this process.
  const RunKind kind = ClassifyRun(o.run_dir);
  if (kind == RunKind::kNeither) return ReportError("rollback", NotReexecutable(o.run_dir));
  auto result = kind == RunKind::kLaunched
                    ? replay::RollbackLaunchedRun(o, vm.count("allow-changed-program") > 0)
                    : model::Rollback(o);
  if (!result.ok()) return ReportError("rollback", result.status());
  if (!quiet) {
    for (const auto& skipped : result->skipped_checkpoints) {
      ReportWarning("rollback", "skipped " + skipped);
    }
  }
  if (vm.count("json")) {
    std::cout << ToJson(o.run_dir, *result).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << Summary(o.run_dir, *result) << "\n";
  }
  return kExitOk;
}

}  // namespace

// 4: the run's own per-step SDC check stops the re-execution; 5: the
// re-execution did not reproduce the traces (the run is left untouched).
DGRR_COMMAND(rollback, "leave a run as if it had stopped after step S, ready for train --resume",
             RunRollback, kExitOk, kExitUsage, kExitIO, kExitInvalidData, kExitDivergence, kExitReplayIntegrity);

}  // namespace dgrr::cli
