// dgrr bisect --good A --bad B: the first divergent step and boundary of two
// long runs recorded cheaply, by replaying only the interval where they part
// (docs/bisect.md; JSON schema dgrr.bisect/1, docs/json/bisect.md).
#include <iostream>
#include <map>

#include "checkpoint/checkpoint_file.h"
#include "cli/command.h"
#include "cli/deleted_paths.h"
#include "model/launch.h"
#include "model/run_config.h"
#include "replay/bisect.h"
#include "replay/reexecute.h"
#include "replay/trust.h"

namespace dgrr::cli {
namespace {

constexpr const char* kName = "bisect";

// Re-executes a run of any program that links libdgrr (dgrr train's too)
// from its launch record, under a control file: the program's own loop, every boundary recorded,
// stopped after the interval (replay/reexecute.h). Nothing is verified: the
// replays are what bisect compares.
class LaunchedReplayer : public replay::IntervalReplayer {
 public:
  LaunchedReplayer(replay::ReexecuteOptions options, std::map<std::string, LaunchRecord> launches)
      : options_(std::move(options)), launches_(std::move(launches)) {}
  Status Replay(const std::string& run_dir, std::optional<uint64_t> checkpoint_step, uint64_t last_step,
                const std::string& out_dir) override {
    ControlFile control;
    control.mode = RecordMode::kFull;
    if (checkpoint_step) control.restore_checkpoint = checkpoint::CheckpointPath(run_dir, *checkpoint_step);
    control.stop_after_step = last_step;
    replay::ReexecuteOptions options = options_;
    options.launch = launches_.at(run_dir);
    auto reexecuted = replay::Reexecute(run_dir, out_dir, control, options);
    // A run its SDC check stopped (a rank's copy of the state was corrupted)
    // stops the same way when replayed, after recording the step where the
    // ranks parted: the replay holds what bisect compares, and whether it
    // matches the recording is checked from its STEP records.
    if (reexecuted.status().code() == StatusCode::kDivergence) return Status::OK();
    DGRR_ASSIGN_OR_RETURN(replay::ReexecuteResult result, std::move(reexecuted));
    for (const ControlResult& r : result.ranks) {
      if (!r.last_step || *r.last_step < last_step) {
        return Status::IntegrityFailure(run_dir + ": the replay of rank " + std::to_string(r.rank) + " stopped " +
                                        (r.last_step ? "after step " + std::to_string(*r.last_step)
                                                     : "before its first step") +
                                        ", before step " + std::to_string(last_step));
      }
    }
    return Status::OK();
  }

 private:
  replay::ReexecuteOptions options_;  // all but the launch
  std::map<std::string, LaunchRecord> launches_;  // by run directory
};

// The replays' scratch directory is gone by the time the report is printed
// (unless --keep): every path into it is shown as a label saying so, never
// as a path the user would try to open.
constexpr const char* kDeletedGood = "(deleted good replay)";
constexpr const char* kDeletedBad = "(deleted bad replay)";

bool ReplaysDeleted(const replay::BisectResult& r) { return r.replay && !r.replay->kept; }

std::string RelabelDeletedReplays(const replay::BisectResult& r, std::string text) {
  if (!ReplaysDeleted(r)) return text;
  const std::string before = text;
  text = RelabelDirectory(RelabelDirectory(text, r.replay->good_dir, kDeletedGood), r.replay->bad_dir, kDeletedBad);
  if (text != before) {
    text += std::string("note: ") + kDeletedGood + " and " + kDeletedBad +
            " were temporary and are deleted; rerun with --keep DIR to keep them\n";
  }
  return text;
}

void RelabelDeletedReplays(const replay::BisectResult& r, nlohmann::ordered_json& j) {
  if (!r.replay) return;
  j["replay"]["deleted"] = ReplaysDeleted(r);
  if (!ReplaysDeleted(r)) return;
  RelabelDirectory(j, r.replay->good_dir, kDeletedGood);
  RelabelDirectory(j, r.replay->bad_dir, kDeletedBad);
}

int RunBisect(const std::vector<std::string>& args) {
  po::options_description options("Options");
  options.add_options()
      ("good", po::value<std::string>()->required(), "run directory of the run taken as correct")
      ("bad", po::value<std::string>()->required(), "run directory of the run that went wrong")
      ("json", po::bool_switch(), "print the dgrr.bisect/1 JSON document instead of the report")
      ("keep", po::value<std::string>(), "keep the two replays in DIR/good and DIR/bad (DIR must "
                                         "not exist) for dgrr compare, replay or inspect")
      ("context", po::value<uint32_t>()->default_value(3), "aligned pairs shown around the divergence")
      ("ignore", po::value<std::vector<std::string>>()->composing(),
       "drop boundaries whose name matches GLOB from both replays (repeatable)")
      ("quiet,q", po::bool_switch(), "no progress lines on stderr")
      ("allow-changed-program", po::bool_switch(),
       "re-execute even when a program's executable changed since its recording")
      ("trust", po::bool_switch(),
       "start both runs' programs as their launch.json says, environment and interpreter included, even "
       "when a run directory is not yours (docs/launch-record.md, Security)");
  po::positional_options_description positional;
  po::variables_map vm;
  int parsed = ParseCommandLine(
      kName, "dgrr bisect --good RUN_A --bad RUN_B [--json] [--keep DIR] [--context N] [--ignore GLOB]...",
      "Finds where two runs of the same training stop agreeing, for runs recorded cheaply (mode sdc\n"
      "or trusted) with checkpoints. 1. The STEP records' per-step parameter fingerprints (one pass)\n"
      "and the checkpoints' state digests (a binary search over the headers) give the last step\n"
      "at which the runs agree. 2. Both runs are re-executed from their newest common agreeing\n"
      "checkpoint through the first differing step only, in full mode, into a scratch directory.\n"
      "3. The two replays are compared as by dgrr compare, naming the first divergent boundary,\n"
      "step and rank. Exit 0 when the runs agree, 4 when the replays name a divergence, 5 when\n"
      "the recordings differ but the replays do not (the difference did not reproduce).\n"
      "Both runs' programs are started again from their launch.json (dgrr train's runs that kept\n"
      "none: 'dgrr train' with their config.json), under a control file (docs/bisect.md). A run\n"
      "directory that is not yours, or is writable by others, is refused before anything starts (exit 1)\n"
      "unless --trust or it is in ~/.config/dgrr/trusted; each program's command line and how its\n"
      "environment differs from yours go to stderr first (docs/launch-record.md, Security).",
      options, positional, args, vm);
  if (parsed >= 0) return parsed;

  replay::BisectOptions bisect;
  bisect.compare.config_key_changes_results = model::RunConfigKeyChangesResults;
  if (vm.count("ignore")) bisect.compare.ignore_globs = vm["ignore"].as<std::vector<std::string>>();
  bisect.compare.context = vm["context"].as<uint32_t>();
  if (vm.count("keep")) bisect.keep_dir = vm["keep"].as<std::string>();
  if (!vm["quiet"].as<bool>()) {
    bisect.progress = [](const std::string& line) { std::cerr << "dgrr bisect: " << line << "\n"; };
  }
  const std::string good = vm["good"].as<std::string>(), bad = vm["bad"].as<std::string>();
  // How to start each run's program again, before anything is bisected: a
  // run that cannot be re-executed is refused in one line.
  // Neither is started unless both may be (replay/trust.h).
  const bool trust = vm["trust"].as<bool>();
  std::map<std::string, LaunchRecord> launches;
  for (const std::string& dir : {good, bad}) {
    auto launch = model::LaunchOfRun(dir);
    if (!launch.ok()) return ReportError(kName, launch.status());
    if (auto trusted = replay::CheckRunTrust(dir, trust); !trusted.ok()) return ReportError(kName, trusted.status());
    launches[dir] = std::move(launch).value();
  }
  replay::ReexecuteOptions reexecute;
  reexecute.allow_changed_program = vm["allow-changed-program"].as<bool>();
  reexecute.trust = trust;
  reexecute.preview = [quiet = vm["quiet"].as<bool>()](const std::vector<std::string>& lines, bool security_relevant) {
    if (quiet && !security_relevant) return;
    for (const std::string& line : lines) std::cerr << "dgrr bisect: " << line << "\n";
  };
  LaunchedReplayer replayer(std::move(reexecute), std::move(launches));
  auto result = replay::Bisect(good, bad, replayer, bisect);
  if (!result.ok()) return ReportError(kName, result.status());
  if (vm["json"].as<bool>()) {
    nlohmann::ordered_json j = replay::BisectJson(*result);
    RelabelDeletedReplays(*result, j);
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << RelabelDeletedReplays(*result, replay::BisectText(*result));
  }
  switch (result->verdict) {
    case replay::BisectVerdict::kAgree: return kExitOk;
    case replay::BisectVerdict::kDiverged: return kExitDivergence;
    case replay::BisectVerdict::kNotReproduced: return kExitReplayIntegrity;
  }
  return kExitOk;
}

}  // namespace

// 1: also a run not trusted (docs/launch-record.md, Security); 4: the replays
// name a divergence; 5: the recordings differ but the replays do not.
DGRR_COMMAND(bisect, "find the first divergent step and boundary of two long runs by replaying", RunBisect,
             kExitOk, kExitUsage, kExitIO, kExitInvalidData, kExitDivergence, kExitReplayIntegrity);

}  // namespace dgrr::cli
