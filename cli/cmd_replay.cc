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
#include "model/launch.h"
#include "replay/reexecute.h"
#include "runtime/trace_check.h"
#include "runtime/session.h"

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


// What the command line asks of a replay, parsed.
struct ReplayRequest {
  std::string run_dir;
  std::string dump_dir;
  std::vector<DumpSpec> specs;
  int64_t from = 0, to = -1;
  bool from_given = false, to_given = false;
  std::optional<uint64_t> checkpoint;  // --checkpoint
  std::string keep_dir;
  bool json = false;
  bool quiet = false;
  bool allow_changed_program = false;
  bool trust = false;
};

// --checkpoint STEP: exactly that checkpoint, which must exist.
StatusOr<std::optional<std::pair<uint64_t, std::string>>> NamedCheckpoint(const std::string& run_dir,
                                                                          uint64_t step) {
  const std::string path = checkpoint::CheckpointPath(run_dir, step);
  if (!PathExists(path)) {
    return Status::NotFound(run_dir + ": no checkpoint of step " + std::to_string(step) + " (" + path +
                            " does not exist)");
  }
  DGRR_RETURN_IF_ERROR(checkpoint::ReadCheckpointHeader(path).status());
  return std::optional<std::pair<uint64_t, std::string>>{{step, path}};
}

void WarnIfProgramChanged(const std::string& run_dir) {
  auto launch = ReadLaunchRecord(run_dir);
  if (!launch.ok()) return;
  auto now = FileContentDigest(launch->executable);
  if (now.ok() && *now != launch->executable_xxh3) {
    ReportWarning("replay", launch->executable + " changed since the recording (digest " +
                                Hex64(launch->executable_xxh3) + ", now " + Hex64(*now) +
                                "): replaying it anyway, as --allow-changed-program asks");
  }
}

// Replays a run of any program that links libdgrr, dgrr train's included:
// its launch.json says how to start it again (model/launch.h for a dgrr
// train run that kept none), and a control file tells its session to restore
// the checkpoint, verify every record against the recorded traces and stop
// after --to (replay/reexecute.h).
int Replay(ReplayRequest q) {
  const std::string& run_dir = q.run_dir;
  auto launch = model::LaunchOfRun(run_dir);
  if (!launch.ok()) return ReportError("replay", launch.status());
  auto world = replay::RecordedWorldSize(run_dir);
  if (!world.ok()) return ReportError("replay", world.status());
  auto recorded = LastStepCompletedByEveryRank(run_dir, *world);
  if (!recorded.ok()) return ReportError("replay", recorded.status());
  const int64_t last_recorded = *recorded;
  if (last_recorded < 0) {
    return ReportError("replay", Status::FailedPrecondition(
                                     run_dir + " has no completed step on every rank: nothing to replay"));
  }
  if (!q.to_given) q.to = last_recorded;
  if (!q.specs.empty() && !q.from_given && !q.to_given && !q.checkpoint) {
    q.from = q.to = q.specs[0].step;
    for (const DumpSpec& d : q.specs) {
      q.from = std::min(q.from, d.step);
      q.to = std::max(q.to, d.step);
    }
  }
  if (q.checkpoint && !q.from_given) q.from = static_cast<int64_t>(*q.checkpoint) + 1;
  if (q.from < 0 || q.to < q.from || q.to > last_recorded) {
    return ReportError("replay", Status::InvalidArgument(
                                     "need 0 <= --from <= --to <= " + std::to_string(last_recorded) +
                                     " (the last step every rank's trace completed; a run that stopped early, "
                                     "was killed or rolled back replays what it recorded)"));
  }
  auto ckpt = q.checkpoint ? NamedCheckpoint(run_dir, *q.checkpoint)
                           : CheckpointBefore(run_dir, static_cast<uint64_t>(q.from));
  if (!ckpt.ok()) return ReportError("replay", ckpt.status());
  if (*ckpt && static_cast<int64_t>((*ckpt)->first) >= q.to) {
    return ReportError("replay", Status::InvalidArgument(
                                     "--checkpoint " + std::to_string((*ckpt)->first) +
                                     " leaves nothing to replay through --to " + std::to_string(q.to)));
  }

  ControlFile control;
  if (*ckpt) control.restore_checkpoint = (*ckpt)->second;
  control.verify_run_dir = run_dir;
  control.stop_after_step = static_cast<uint64_t>(q.to);
  for (const DumpSpec& d : q.specs) {
    const int first_rank = d.rank.value_or(0), last_rank = d.rank.value_or(*world - 1);
    for (int rank = first_rank; rank <= last_rank; ++rank) {
      control.dumps.push_back({d.boundary, static_cast<uint64_t>(d.step), rank,
                               checkpoint::TensorDumpPath(q.dump_dir, d.boundary, static_cast<uint64_t>(d.step), rank)});
    }
  }
  const std::vector<ControlDump> requested = control.dumps;

  std::optional<ScratchDirectory> scratch;
  std::string out_dir = q.keep_dir;
  if (out_dir.empty()) {
    auto created = ScratchDirectory::Create("dgrr-replay");
    if (!created.ok()) return ReportError("replay", created.status());
    scratch.emplace(std::move(created).value());
    out_dir = scratch->path() + "/run";
  }
  if (q.allow_changed_program) WarnIfProgramChanged(run_dir);
  replay::ReexecuteOptions options;
  options.allow_changed_program = q.allow_changed_program;
  options.launch = std::move(launch).value();
  options.trust = q.trust;
  options.preview = [quiet = q.quiet](const std::vector<std::string>& lines, bool security_relevant) {
    if (quiet && !security_relevant) return;
    for (const std::string& line : lines) std::cerr << "dgrr replay: " << line << "\n";
  };
  auto result = replay::Reexecute(run_dir, out_dir, control, options);
  if (!result.ok()) {
    Status s = result.status();
    if (s.code() == StatusCode::kIntegrityFailure && q.keep_dir.empty() &&
        s.message().find("did not complete") != std::string::npos) {
      s = Status::IntegrityFailure(s.message() + " (--keep DIR keeps its output)");
    }
    return ReportError("replay", s);
  }

  // Verified through --to: no mismatch, and every rank got there.
  Status s = Status::OK();
  if (result->mismatch) {
    s = Status::IntegrityFailure(replay::MismatchText(*result->mismatch));
  } else {
    for (const ControlResult& r : result->ranks) {
      if (!r.last_step || static_cast<int64_t>(*r.last_step) < q.to) {
        s = Status::IntegrityFailure(
            "rank " + std::to_string(r.rank) + " stopped " +
            (r.last_step ? "after step " + std::to_string(*r.last_step) : "before its first step") +
            ", before --to " + std::to_string(q.to) + ": the program ended its loop early");
        break;
      }
    }
  }
  std::vector<std::string> written;
  for (const ControlResult& r : result->ranks) {
    written.insert(written.end(), r.dumps_written.begin(), r.dumps_written.end());
  }
  // The session reports the absolute paths the control file named.
  auto was_written = [&](const ControlDump& d) {
    const std::string absolute = std::filesystem::absolute(d.path).lexically_normal().string();
    return std::find(written.begin(), written.end(), absolute) != written.end();
  };
  std::string not_written;
  for (const ControlDump& d : requested) {
    if (!was_written(d)) not_written += (not_written.empty() ? "" : ", ") + d.path;
  }
  if (!s.ok() && !not_written.empty()) {
    ReportWarning("replay", "not written (the replay stopped first): " + not_written);
  }

  const int64_t first = *ckpt ? static_cast<int64_t>((*ckpt)->first) + 1 : 0;
  if (q.json) {
    nlohmann::ordered_json j = {{"schema", "dgrr.replay/1"},
                                {"run", run_dir},
                                {"from_checkpoint", *ckpt ? nlohmann::ordered_json((*ckpt)->first)
                                                         : nlohmann::ordered_json(nullptr)},
                                {"first_step", first},
                                {"last_step", q.to},
                                {"result", s.ok() ? "verified" : "diverged"},
                                {"boundaries_verified", result->boundaries_verified},
                                {"steps_verified", result->steps_verified}};
    nlohmann::ordered_json dumps = nlohmann::ordered_json::array();
    for (const ControlDump& d : requested) {
      dumps.push_back({{"boundary", d.boundary},
                       {"step", d.step},
                       {"rank", *d.rank},
                       {"path", d.path},
                       {"written", was_written(d)}});
    }
    j["dumps"] = dumps;
    if (!s.ok()) j["message"] = s.message();
    j["program_exit_code"] = result->exit_code;
    if (!q.keep_dir.empty()) j["replay_dir"] = q.keep_dir;
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else if (s.ok() && !q.quiet) {
    std::cout << "replayed steps " << first << ".." << q.to << " of " << run_dir
              << (*ckpt ? " from the checkpoint of step " + std::to_string((*ckpt)->first) : " from the start")
              << ": " << result->boundaries_verified << " boundaries and " << result->steps_verified
              << " step ends match the recorded traces\n";
    for (const ControlDump& d : requested) {
      if (was_written(d)) std::cout << "wrote " << d.path << "\n";
    }
  }
  if (!s.ok()) return ReportError("replay", s);
  return kExitOk;
}

int RunReplay(const std::vector<std::string>& args) {
  ReplayRequest q;
  q.dump_dir = ".";
  std::vector<std::string> dump_texts;
  po::options_description options("Options");
  options.add_options()("run", po::value(&q.run_dir)->required(), "run directory (positional)")(
      "from", po::value(&q.from)->default_value(0), "first step to check")(
      "to", po::value(&q.to), "last step to check (default: the last step every rank's trace completed)")(
      "dump", po::value(&dump_texts)->composing(),
      "NAME@STEP[:RANK]: write the full tensor(s) of boundary NAME at STEP on RANK (default: every "
      "rank) to DUMP_DIR/NAME@STEP.rankR.h5; repeatable")(
      "dump-dir", po::value(&q.dump_dir), "directory for --dump files (default: the current one)")(
      "json", "print the result as JSON (schema dgrr.replay/1)")(
      "quiet,q", "print nothing on success: the exit code says (errors and warnings still go to stderr; "
                 "--json still prints its object)")(
      "checkpoint", po::value<uint64_t>(),
      "restore exactly the checkpoint of this step (it must exist) instead of "
      "the newest one before --from")(
      "keep", po::value<std::string>(),
      "re-execute into DIR (which must not exist) and keep it")(
      "allow-changed-program",
      "replay even when the executable's digest differs from the recording")(
      "trust", "start the run's program as its launch.json says, environment and interpreter included, "
               "even when the run directory is not yours (docs/launch-record.md, Security)");
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  int rc = ParseCommandLine(
      "replay",
      "dgrr replay RUN_DIR [--from STEP | --checkpoint STEP] [--to STEP] [--dump NAME@STEP[:RANK]]...\n"
      "                    [--dump-dir DIR] [--keep DIR] [--allow-changed-program] [--trust] [--json] [-q]",
      "Re-executes the recorded run in RUN_DIR from its newest checkpoint before --from (or from\n"
      "the start) through --to, in a scratch directory, comparing every boundary and step end with\n"
      "the recorded traces as it goes. At the first difference it stops and names the step, rank,\n"
      "boundary and both fingerprints (exit 5); otherwise it reports how many records it verified.\n"
      "The recorded program is started again from RUN_DIR/launch.json (a run of dgrr train that kept\n"
      "none: 'dgrr train' with its config.json, faults included) under a control file that tells its\n"
      "session to restore the checkpoint, verify every record and stop after --to; it is refused\n"
      "(exit 5) when its executable changed since the recording, unless --allow-changed-program,\n"
      "and (exit 1) when RUN_DIR or its launch.json is not yours or is writable by others, unless\n"
      "--trust or RUN_DIR is in ~/.config/dgrr/trusted. The command line and how its environment\n"
      "differs from yours go to stderr before it starts (docs/launch-record.md, Security).\n"
      "--dump writes the tensors recorded at a boundary (per-example boundaries: one dataset per\n"
      "example of the rank's shard) to an HDF5 file (docs/tensor-dump.md) once that step is done;\n"
      "compare two runs' dumps with 'dgrr diff-tensor'. With --dump and neither --from nor --to,\n"
      "only the steps from the first to the last dump step are checked.",
      options, positional, args, vm);
  if (rc >= 0) return rc;

  for (const std::string& text : dump_texts) {
    auto spec = ParseDumpSpec(text);
    if (!spec.ok()) return ReportError("replay", spec.status());
    q.specs.push_back(*spec);
  }
  q.from_given = !vm["from"].defaulted();
  q.to_given = vm.count("to") > 0;
  if (vm.count("checkpoint")) q.checkpoint = vm["checkpoint"].as<uint64_t>();
  if (vm.count("keep")) q.keep_dir = vm["keep"].as<std::string>();
  q.json = vm.count("json") > 0;
  q.quiet = vm.count("quiet") > 0;
  q.allow_changed_program = vm.count("allow-changed-program") > 0;
  q.trust = vm.count("trust") > 0;
  return Replay(std::move(q));
}

}  // namespace

// 1: also a run not trusted (docs/launch-record.md, Security); 3: a damaged
// run file, the program's own refusal of one included; 4: the run's own
// per-step SDC check stops the re-execution as it stopped the recording
// (docs/bisect.md); 5: a record not reproduced.
DGRR_COMMAND(replay, "re-execute part of a run, checking every boundary against its trace", RunReplay, kExitOk,
             kExitUsage, kExitIO, kExitInvalidData, kExitDivergence, kExitReplayIntegrity);

}  // namespace dgrr::cli
