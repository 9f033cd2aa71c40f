// dgrr rollback: leave a run directory as if training had stopped right after
// a given step, so resuming it continues from there (replay/rollback.h; the
// program re-launched from its launch record, model/launch.h).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "cli/command.h"
#include "model/launch.h"
#include "model/rollback.h"
#include "replay/trust.h"

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
  if (r.removed_checkpoint_shards > 0) {
    line += " (and their " + std::to_string(r.removed_checkpoint_shards) + " rank shard file(s))";
  }
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
  j["removed_checkpoint_shards"] = r.removed_checkpoint_shards;
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
                               "(every record is still verified)")(
      "trust", "start the run's program as its launch.json says, environment and interpreter included, "
               "even when the run directory is not yours (docs/launch-record.md, Security)");
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  int rc = ParseCommandLine(
      "rollback", "dgrr rollback RUN_DIR --step S [--fallback] [--trust] [--allow-changed-program] [--quiet] [--json]",
      "Leaves RUN_DIR as if training had stopped right after step S (0-based), so that resuming it\n"
      "('dgrr train --out RUN_DIR --resume', or re-running a program's own command) continues from\n"
      "step S+1 and ends with the traces and parameters of the uninterrupted run. The run's program\n"
      "(dgrr train's too) is re-executed from RUN_DIR/launch.json under a control file\n"
      "(docs/control-file.md), as an MPI job when it ran as one. The state after S comes from RUN_DIR's checkpoint of\n"
      "S, or is re-executed from the newest good checkpoint before S (or from the start) in a\n"
      "scratch directory, checking every record against RUN_DIR's traces (a mismatch: exit 5,\n"
      "RUN_DIR untouched). Then, in this order: the checkpoint of S is written to RUN_DIR/ckpt,\n"
      "every rank's trace is cut after step S's end with a ROLLED_BACK event, and the\n"
      "checkpoints of later steps are removed. Killed part way, run it again: it finishes the job.\n"
      "A re-execution is refused (exit 1) when RUN_DIR or its launch.json is not yours or is writable\n"
      "by others, unless --trust or RUN_DIR is in ~/.config/dgrr/trusted; the command line and how its\n"
      "environment differs from yours go to stderr first (docs/launch-record.md, Security).\n"
      "Progress goes to stderr; the last line on stdout says what was done (docs/rollback.md).",
      options, positional, args, vm);
  if (rc >= 0) return rc;
  o.fallback = vm.count("fallback") > 0;
  const bool quiet = vm.count("quiet") > 0;
  replay::ReexecuteOptions reexecute;
  reexecute.allow_changed_program = vm.count("allow-changed-program") > 0;
  reexecute.trust = vm.count("trust") > 0;
  reexecute.preview = [quiet](const std::vector<std::string>& lines, bool security_relevant) {
    if (quiet && !security_relevant) return;
    for (const std::string& line : lines) std::fprintf(stderr, "dgrr rollback: %s\n", line.c_str());
  };
  if (!quiet) {
    // The re-executed program's progress (its session under a control file
    // says "dgrr: re-executed step N", whatever the program), said as this
    // rollback's.
    reexecute.output = [&](const std::string& line) {
      const std::string prefix = "dgrr: ";
      if (line.rfind(prefix + "re-executed step ", 0) != 0) return;
      std::fprintf(stderr, "dgrr rollback: %s (rolling back to step %lld)\n", line.substr(prefix.size()).c_str(),
                   static_cast<long long>(o.step));
    };
  }
  // One path for every run: its program is launched again from its launch
  // record (model/launch.h gives dgrr train's runs that kept none).
  if (o.step < 0) {
    return ReportError("rollback", Status::InvalidArgument("--step must not be negative, got " + std::to_string(o.step)));
  }
  auto launch = model::LaunchOfRun(o.run_dir);
  if (!launch.ok()) return ReportError("rollback", launch.status());
  // A run that is not the user's is refused before anything in it changes,
  // whether or not its program would be started (replay/trust.h).
  if (auto trusted = replay::CheckRunTrust(o.run_dir, reexecute.trust); !trusted.ok()) {
    return ReportError("rollback", trusted.status());
  }
  reexecute.launch = std::move(launch).value();
  auto result = replay::RollbackLaunchedRun(o, reexecute);
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
