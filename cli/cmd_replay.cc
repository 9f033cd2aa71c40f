// dgrr replay: re-execute part of a recorded run and check every boundary
// against its trace as it goes; stop at the first difference. With --dump it
// also writes the full tensors of chosen boundaries (docs/tensor-dump.md).
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/coding.h"
#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/tensor_file.h"
#include "cli/command.h"
#include "model/trainer.h"
#include "runtime/trace_check.h"

namespace dgrr::cli {
namespace {

// The newest checkpoint of `run_dir` whose step is before `from` and loads;
// nullopt when there is none (the replay then starts at step 0).
StatusOr<std::optional<std::pair<uint64_t, std::string>>> CheckpointBefore(const std::string& run_dir,
                                                                           uint64_t from) {
  std::optional<std::pair<uint64_t, std::string>> found;
  DGRR_ASSIGN_OR_RETURN(auto steps, checkpoint::ListCheckpointSteps(run_dir));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
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

// One --dump NAME@STEP[:RANK]; the rank is optional (all ranks).
struct DumpSpec {
  std::string boundary;
  int64_t step = 0;
  std::optional<int> rank;
};

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 18 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

StatusOr<DumpSpec> ParseDumpSpec(const std::string& text) {
  // The name is everything before the last '@' (boundary names have no '@'
  // today, but nothing forbids one).
  const size_t at = text.rfind('@');
  const auto bad = Status::InvalidArgument("--dump '" + text + "': expected NAME@STEP[:RANK]");
  if (at == std::string::npos || at == 0) return bad;
  DumpSpec d;
  d.boundary = text.substr(0, at);
  std::string step = text.substr(at + 1), rank;
  if (const size_t colon = step.find(':'); colon != std::string::npos) {
    rank = step.substr(colon + 1);
    step.resize(colon);
    if (!AllDigits(rank) || rank.size() > 6) return bad;
    d.rank = std::stoi(rank);
  }
  if (!AllDigits(step)) return bad;
  d.step = std::stoll(step);
  return d;
}

int RunReplay(const std::vector<std::string>& args) {
  std::string run_dir, dump_dir = ".";
  std::vector<std::string> dump_texts;
  int64_t from = 0, to = -1;
  po::options_description options("Options");
  options.add_options()("run", po::value(&run_dir)->required(), "run directory (positional)")(
      "from", po::value(&from)->default_value(0), "first step to check")(
      "to", po::value(&to), "last step to check (default: the last step every rank's trace completed)")(
      "dump", po::value(&dump_texts)->composing(),
      "NAME@STEP[:RANK]: write the full tensor(s) of boundary NAME at STEP on RANK (default: every "
      "rank) to DUMP_DIR/NAME@STEP.rankR.h5; repeatable")(
      "dump-dir", po::value(&dump_dir), "directory for --dump files (default: the current one)")(
      "json", "print the result as JSON (schema dgrr.replay/1)");
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  int rc = ParseCommandLine(
      "replay",
      "dgrr replay RUN_DIR [--from STEP] [--to STEP] [--dump NAME@STEP[:RANK]]... [--dump-dir DIR] [--json]",
      "Re-executes the recorded run in RUN_DIR from its newest checkpoint before --from (or from\n"
      "the start) through --to, in a scratch directory, comparing every boundary and step end with\n"
      "the recorded traces as it goes. At the first difference it stops and names the step, rank,\n"
      "boundary and both fingerprints (exit 5); otherwise it reports how many records it verified.\n"
      "The run's own config (RUN_DIR/config.json) drives the re-execution, faults included.\n"
      "--dump writes the tensors recorded at a boundary (per-example boundaries: one dataset per\n"
      "example of the rank's shard) to an HDF5 file (docs/tensor-dump.md) once that step is done;\n"
      "compare two runs' dumps with 'dgrr diff-tensor'. With --dump and neither --from nor --to,\n"
      "only the steps from the first to the last dump step are checked.",
      options, positional, args, vm);
  if (rc >= 0) return rc;

  std::vector<DumpSpec> specs;
  for (const std::string& text : dump_texts) {
    auto spec = ParseDumpSpec(text);
    if (!spec.ok()) return ReportError("replay", spec.status());
    specs.push_back(*spec);
  }
  auto opts = model::TrainOptionsFromRun(run_dir);
  if (!opts.ok()) return ReportError("replay", opts.status());
  // A run stopped early (killed, or rolled back) has recorded fewer steps
  // than its config names: replay what every rank recorded, not past it.
  auto recorded = LastStepCompletedByEveryRank(run_dir, opts->ranks);
  if (!recorded.ok()) return ReportError("replay", recorded.status());
  const int64_t last_recorded = std::min<int64_t>(*recorded, opts->steps - 1);
  if (last_recorded < 0) {
    return ReportError("replay", Status::FailedPrecondition(
                                     run_dir + " has no completed step on every rank: nothing to replay"));
  }
  if (!vm.count("to")) to = last_recorded;
  if (!specs.empty() && vm["from"].defaulted() && !vm.count("to")) {
    // Just the steps the dumps need.
    from = to = specs[0].step;
    for (const DumpSpec& d : specs) {
      from = std::min(from, d.step);
      to = std::max(to, d.step);
    }
  }
  if (from < 0 || to < from || to > last_recorded) {
    return ReportError("replay", Status::InvalidArgument(
                                     "need 0 <= --from <= --to <= " + std::to_string(last_recorded) +
                                     (last_recorded < opts->steps - 1
                                          ? " (the last step every rank's trace completed; the run stopped early)"
                                          : " (the run's last step)")));
  }
  auto ckpt = CheckpointBefore(run_dir, static_cast<uint64_t>(from));
  if (!ckpt.ok()) return ReportError("replay", ckpt.status());

  auto scratch = ScratchDirectory::Create("dgrr-replay");
  if (!scratch.ok()) return ReportError("replay", scratch.status());
  model::TrainOptions o = *opts;
  o.out_dir = scratch->path() + "/run";
  o.verify_against = run_dir;
  o.last_step = to;
  o.write_checkpoints = false;
  if (*ckpt) o.restore_checkpoint = (*ckpt)->second;
  // One request per rank, so every file's path is known up front.
  for (const DumpSpec& d : specs) {
    const int first_rank = d.rank.value_or(0), last_rank = d.rank.value_or(opts->ranks - 1);
    for (int rank = first_rank; rank <= last_rank; ++rank) {
      o.dumps.push_back({d.boundary, d.step, rank,
                         checkpoint::TensorDumpPath(dump_dir, d.boundary, static_cast<uint64_t>(d.step), rank)});
    }
  }

  model::TrainResult result;
  Status s;
  auto trainer = model::Trainer::Create(o);
  s = trainer.ok() ? (*trainer)->Run(nullptr, &result) : trainer.status();
  const std::vector<std::string> written =
      trainer.ok() ? (*trainer)->dumps_written() : std::vector<std::string>{};
  auto was_written = [&](const std::string& path) {
    return std::find(written.begin(), written.end(), path) != written.end();
  };
  std::string not_written;
  for (const model::DumpRequest& d : o.dumps) {
    if (!was_written(d.path)) not_written += (not_written.empty() ? "" : ", ") + d.path;
  }
  if (s.code() == StatusCode::kIntegrityFailure && !not_written.empty()) {
    ReportWarning("replay", "not written (the replay stopped first): " + not_written);
  }
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
    nlohmann::ordered_json dumps = nlohmann::ordered_json::array();
    for (const model::DumpRequest& d : o.dumps) {
      dumps.push_back({{"boundary", d.boundary},
                       {"step", d.step},
                       {"rank", *d.rank},
                       {"path", d.path},
                       {"written", was_written(d.path)}});
    }
    j["dumps"] = dumps;
    if (!s.ok()) j["message"] = s.message();
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else if (s.ok()) {
    std::cout << "replayed steps " << first << ".." << to << " of " << run_dir
              << (*ckpt ? " from the checkpoint of step " + std::to_string((*ckpt)->first) : " from the start")
              << ": " << result.boundaries_verified << " boundaries and " << result.steps_verified
              << " step ends match the recorded traces\n";
    for (const std::string& path : written) std::cout << "wrote " << path << "\n";
  }
  if (!s.ok()) return ReportError("replay", s);
  return kExitOk;
}

}  // namespace

DGRR_COMMAND(replay, "re-execute part of a run, checking every boundary against its trace", RunReplay);

}  // namespace dgrr::cli
