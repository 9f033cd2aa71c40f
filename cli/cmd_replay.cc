// dgrr replay: re-execute part of a recorded run and check every boundary
// against its trace as it goes; stop at the first difference.
#include <stdlib.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/coding.h"
#include "checkpoint/checkpoint_file.h"
#include "cli/command.h"
#include "model/trainer.h"
#include "replay/trace_check.h"

namespace dgrr::cli {
namespace {

// The newest checkpoint of `run_dir` whose step is before `from` and loads;
// nullopt when there is none (the replay then starts at step 0).
StatusOr<std::optional<std::pair<uint64_t, std::string>>> CheckpointBefore(const std::string& run_dir,
                                                                           uint64_t from) {
  std::optional<std::pair<uint64_t, std::string>> found;
  auto steps = checkpoint::ListCheckpointSteps(run_dir);
  if (!steps.ok()) {
    if (steps.status().IsNotFound()) return found;
    return steps.status();
  }
  for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
    if (*it >= from) continue;
    const std::string path = checkpoint::CheckpointPath(run_dir, *it);
    auto header = checkpoint::ReadCheckpointHeader(path);
    if (!header.ok()) {
      ReportWarning("replay", "skipping " + header.status().message());
      continue;
    }
    return std::optional<std::pair<uint64_t, std::string>>{{*it, path}};
  }
  return found;
}

int RunReplay(const std::vector<std::string>& args) {
  std::string run_dir;
  int64_t from = 0, to = -1;
  po::options_description options("Options");
  options.add_options()("run", po::value(&run_dir)->required(), "run directory (positional)")(
      "from", po::value(&from)->default_value(0), "first step to check")(
      "to", po::value(&to), "last step to check (default: the run's last)")(
      "json", "print the result as JSON (schema dgrr.replay/1)");
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  int rc = ParseCommandLine(
      "replay", "dgrr replay RUN_DIR [--from STEP] [--to STEP] [--json]",
      "Re-executes the recorded run in RUN_DIR from its newest checkpoint before --from (or from\n"
      "the start) through --to, in a scratch directory, comparing every boundary and step end with\n"
      "the recorded traces as it goes. At the first difference it stops and names the step, rank,\n"
      "boundary and both fingerprints (exit 5); otherwise it reports how many records it verified.\n"
      "The run's own config (RUN_DIR/config.json) drives the re-execution, faults included.",
      options, positional, args, vm);
  if (rc >= 0) return rc;

  auto opts = model::TrainOptionsFromRun(run_dir);
  if (!opts.ok()) return ReportError("replay", opts.status());
  if (!vm.count("to")) to = opts->steps - 1;
  if (from < 0 || to < from || to >= opts->steps) {
    return ReportError("replay", Status::InvalidArgument(
                                     "need 0 <= --from <= --to < " + std::to_string(opts->steps) +
                                     " (the run's steps)"));
  }
  auto ckpt = CheckpointBefore(run_dir, static_cast<uint64_t>(from));
  if (!ckpt.ok()) return ReportError("replay", ckpt.status());

  char scratch_template[] = "/tmp/dgrr-replay-XXXXXX";
  if (::mkdtemp(scratch_template) == nullptr) {
    return ReportError("replay", Status::FromErrno("create scratch directory", "/tmp", errno));
  }
  const std::string scratch = scratch_template;
  model::TrainOptions o = *opts;
  o.out_dir = scratch + "/run";
  o.verify_against = run_dir;
  o.last_step = to;
  o.write_checkpoints = false;
  if (*ckpt) o.restore_checkpoint = (*ckpt)->second;

  model::TrainResult result;
  Status s;
  auto trainer = model::Trainer::Create(o);
  s = trainer.ok() ? (*trainer)->Run(nullptr, &result) : trainer.status();
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  if (!s.ok() && s.code() != StatusCode::kIntegrityFailure) return ReportError("replay", s);

  const int64_t first = *ckpt ? static_cast<int64_t>((*ckpt)->first) + 1 : 0;
  if (vm.count("json")) {
    nlohmann::ordered_json j = {{"schema", "dgrr.replay/1"},
                                {"run", run_dir},
                                {"from_checkpoint", *ckpt ? nlohmann::ordered_json((*ckpt)->first)
                                                         : nlohmann::ordered_json(nullptr)},
                                {"first_step", first},
                                {"last_step", to},
                                {"result", s.ok() ? "verified" : "diverged"},
                                {"boundaries_verified", result.boundaries_verified},
                                {"steps_verified", result.steps_verified}};
    if (!s.ok()) j["message"] = s.message();
    std::cout << j.dump(2) << "\n";
  } else if (s.ok()) {
    std::cout << "replayed steps " << first << ".." << to << " of " << run_dir
              << (*ckpt ? " from the checkpoint of step " + std::to_string((*ckpt)->first) : " from the start")
              << ": " << result.boundaries_verified << " boundaries and " << result.steps_verified
              << " step ends match the recorded traces\n";
  }
  if (!s.ok()) return ReportError("replay", s);
  return kExitOk;
}

}  // namespace

DGRR_COMMAND(replay, "re-execute part of a run, checking every boundary against its trace", RunReplay);

}  // namespace dgrr::cli
