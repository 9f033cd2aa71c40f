#include "replay/bisect.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/coding.h"
#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "replay/trace_items.h"
#include "runtime/json_input.h"
#include "runtime/run_directory.h"
#include "trace_format/reader.h"

namespace dgrr::replay {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// A STEP end record's parameter fingerprint, and its loss: a run whose loss
// differs does not agree, even where the parameters still do.
struct ParamsFingerprint {
  uint64_t xor64 = 0, xxh3 = 0;
  uint64_t loss_bits = 0;
  bool operator==(const ParamsFingerprint&) const = default;
};
// step -> the parameter fingerprint of its STEP end record, one map per rank.
using StepMap = std::map<uint64_t, ParamsFingerprint>;

// Whether the run's config.json says it was recorded in mode off (no traces
// written); false when the config is missing or unreadable.
bool RecordedInModeOff(const std::string& run_dir) {
  auto config = ReadJsonFile(ConfigPathFor(run_dir));
  return config.ok() && config->is_object() && config->contains("mode") && (*config)["mode"] == "off";
}

// The run's world size from its traces, validated as compare validates them
// (every rank's trace present, one run id); 0 only for a run recorded in mode
// off. A run whose traces are missing is refused (OpenRunInput names the
// file), never taken for one with nothing to compare.
StatusOr<uint32_t> RecordedRanks(const std::string& run_dir) {
  if (!PathExists(TracePathFor(run_dir, 0)) && RecordedInModeOff(run_dir)) return 0u;
  DGRR_ASSIGN_OR_RETURN(RunInput input, OpenRunInput(run_dir));
  return input.world_size;
}

StatusOr<StepMap> ReadStepEnds(const std::string& trace_path) {
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(trace_path));
  StepMap steps;
  trace::Record record;
  for (bool done = false;;) {
    DGRR_RETURN_IF_ERROR(reader->Next(&record, &done));
    if (done) break;
    const auto* step = std::get_if<trace::StepRecord>(&record.body);
    if (step != nullptr && step->kind == trace::StepKind::kEnd) {
      steps[step->step] = {step->params_xor64, step->params_xxh3, step->loss_bits};
    }
  }
  return steps;
}

StatusOr<std::vector<StepMap>> ReadRunStepEnds(const std::string& run_dir, uint32_t ranks) {
  std::vector<StepMap> out;
  for (uint32_t r = 0; r < ranks; ++r) {
    DGRR_ASSIGN_OR_RETURN(StepMap m, ReadStepEnds(TracePathFor(run_dir, static_cast<int>(r))));
    out.push_back(std::move(m));
  }
  return out;
}

// Steps with a STEP end record on every rank of both runs.
std::vector<uint64_t> CommonSteps(const std::vector<StepMap>& good, const std::vector<StepMap>& bad) {
  std::vector<uint64_t> common;
  if (good.empty() || bad.empty()) return common;
  for (const auto& [step, unused] : good[0]) {
    bool everywhere = true;
    for (const auto* run : {&good, &bad}) {
      for (size_t r = 0; r < run->size() && everywhere; ++r) everywhere = (*run)[r].count(step) > 0;
    }
    if (everywhere) common.push_back(step);
  }
  return common;
}

// Equal world sizes: rank r against rank r. Different ones: a STEP record
// holds replicated values (the parameters, the global loss), so every rank of
// both runs is held to the good run's rank 0; a rank whose copy alone was
// corrupted is seen whichever world size it ran in (docs/compare.md §6.3).
bool StepAgrees(const std::vector<StepMap>& good, const std::vector<StepMap>& bad, uint64_t step) {
  if (good.size() == bad.size()) {
    for (size_t r = 0; r < good.size(); ++r) {
      if (!(good[r].at(step) == bad[r].at(step))) return false;
    }
    return true;
  }
  const ParamsFingerprint& reference = good[0].at(step);
  for (const auto* run : {&good, &bad}) {
    for (const StepMap& rank : *run) {
      if (!(rank.at(step) == reference)) return false;
    }
  }
  return true;
}

// The binary search over the common checkpoints: state digests are read
// from the headers alone, each at most once.
class CheckpointSearch {
 public:
  CheckpointSearch(std::string good, std::string bad, std::vector<uint64_t> steps)
      : good_(std::move(good)), bad_(std::move(bad)), steps_(std::move(steps)) {}

  // Assumes agreement is a prefix property (a state that differs once keeps
  // differing): finds the last agreeing and first differing checkpoints.
  Status Run() {
    int64_t lo = -1, hi = static_cast<int64_t>(steps_.size());
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      DGRR_ASSIGN_OR_RETURN(bool agree, Agrees(steps_[static_cast<size_t>(mid)]));
      (agree ? lo : hi) = mid;
    }
    if (lo >= 0) last_agreeing_ = steps_[static_cast<size_t>(lo)];
    if (hi < static_cast<int64_t>(steps_.size())) first_differing_ = steps_[static_cast<size_t>(hi)];
    return Status::OK();
  }
  std::optional<uint64_t> last_agreeing() const { return last_agreeing_; }
  std::optional<uint64_t> first_differing() const { return first_differing_; }
  uint64_t headers_read() const { return headers_read_; }

 private:
  StatusOr<bool> Agrees(uint64_t step) {
    DGRR_ASSIGN_OR_RETURN(auto a, checkpoint::ReadCheckpointHeader(checkpoint::CheckpointPath(good_, step)));
    DGRR_ASSIGN_OR_RETURN(auto b, checkpoint::ReadCheckpointHeader(checkpoint::CheckpointPath(bad_, step)));
    headers_read_ += 2;
    return a.state_digest == b.state_digest;
  }
  std::string good_, bad_;
  std::vector<uint64_t> steps_;
  std::optional<uint64_t> last_agreeing_, first_differing_;
  uint64_t headers_read_ = 0;
};

std::vector<uint64_t> Intersect(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  std::vector<uint64_t> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// Whether the replay in `replay_dir` recorded, for every step of
// [first, last] that `recorded` has, the same parameters as the recording.
StatusOr<std::optional<bool>> ReplayMatchesRecording(const std::vector<StepMap>& recorded,
                                                     const std::string& replay_dir, uint64_t first,
                                                     uint64_t last) {
  if (recorded.empty()) return std::optional<bool>();
  DGRR_ASSIGN_OR_RETURN(auto replayed, ReadRunStepEnds(replay_dir, static_cast<uint32_t>(recorded.size())));
  bool checked = false;
  for (size_t r = 0; r < recorded.size(); ++r) {
    for (auto it = recorded[r].lower_bound(first); it != recorded[r].end() && it->first <= last; ++it) {
      auto mine = replayed[r].find(it->first);
      if (mine == replayed[r].end() || !(mine->second == it->second)) return std::optional<bool>(false);
      checked = true;
    }
  }
  return checked ? std::optional<bool>(true) : std::optional<bool>();
}

// The directory the two replays go into: a scratch directory, removed at
// scope exit, or the user's --keep directory, which must be new.
class ReplayDirectory {
 public:
  static StatusOr<ReplayDirectory> Create(const std::string& keep_dir) {
    if (keep_dir.empty()) {
      DGRR_ASSIGN_OR_RETURN(ScratchDirectory scratch, ScratchDirectory::Create("dgrr-bisect"));
      std::string path = scratch.path();  // before the move empties it
      return ReplayDirectory(std::move(path), std::move(scratch));
    }
    std::error_code ec;
    if (fs::exists(keep_dir, ec)) return Status::InvalidArgument(keep_dir + " exists: --keep needs a new directory");
    DGRR_RETURN_IF_ERROR(CreateDirectories(keep_dir));
    return ReplayDirectory(keep_dir, std::nullopt);
  }
  const std::string& path() const { return path_; }
  bool kept() const { return !scratch_.has_value(); }

 private:
  ReplayDirectory(std::string path, std::optional<ScratchDirectory> scratch)
      : path_(std::move(path)), scratch_(std::move(scratch)) {}
  std::string path_;
  std::optional<ScratchDirectory> scratch_;
};

void Report(const BisectOptions& options, const std::string& line) {
  if (options.progress) options.progress(line);
}

std::string StepRange(uint64_t first, uint64_t last) {
  return first == last ? "step " + std::to_string(first)
                       : "steps " + std::to_string(first) + ".." + std::to_string(last);
}

// Step 1: the last step of agreement and the interval to replay.
struct Interval {
  std::optional<uint64_t> from_checkpoint;
  uint64_t first = 0, last = 0;
};

StatusOr<std::optional<Interval>> FindInterval(const std::string& good, const std::string& bad,
                                               const BisectOptions& options,
                                               std::vector<StepMap>* good_steps,
                                               std::vector<StepMap>* bad_steps, BisectResult* result) {
  DGRR_ASSIGN_OR_RETURN(const uint32_t good_ranks, RecordedRanks(good));
  DGRR_ASSIGN_OR_RETURN(const uint32_t bad_ranks, RecordedRanks(bad));
  const uint32_t ranks = std::min(good_ranks, bad_ranks) == 0 ? 0 : std::max(good_ranks, bad_ranks);
  std::vector<uint64_t> common;
  if (ranks > 0) {
    DGRR_ASSIGN_OR_RETURN(*good_steps, ReadRunStepEnds(good, good_ranks));
    DGRR_ASSIGN_OR_RETURN(*bad_steps, ReadRunStepEnds(bad, bad_ranks));
    common = CommonSteps(*good_steps, *bad_steps);
  }
  std::optional<uint64_t> differing;  // the first step the evidence says differs
  if (!common.empty()) {
    result->evidence = BisectEvidence::kStepFingerprints;
    result->ranks_compared = ranks;
    for (uint64_t step : common) {
      ++result->steps_compared;
      if (!StepAgrees(*good_steps, *bad_steps, step)) {
        differing = step;
        break;
      }
      result->last_agreeing_step = step;
    }
    result->last_common_step = common.back();
    Report(options, "STEP parameter fingerprints of " + std::to_string(ranks) + " rank(s): " +
                        (differing ? "first differ at step " + std::to_string(*differing)
                                   : "agree over all " + std::to_string(common.size()) + " common steps"));
  } else {
    good_steps->clear();
    bad_steps->clear();
    result->evidence = BisectEvidence::kCheckpointDigests;
  }

  DGRR_ASSIGN_OR_RETURN(auto good_ckpts, checkpoint::ListCheckpointSteps(good));
  DGRR_ASSIGN_OR_RETURN(auto bad_ckpts, checkpoint::ListCheckpointSteps(bad));
  std::vector<uint64_t> ckpts = Intersect(good_ckpts, bad_ckpts);
  // Only a checkpoint before the differing step can start the replay.
  if (differing) ckpts.erase(std::lower_bound(ckpts.begin(), ckpts.end(), *differing), ckpts.end());
  if (common.empty() && ckpts.empty()) {
    return Status::InvalidArgument("nothing to bisect with: " + good + " and " + bad +
                                   " share neither STEP records (mode off?) nor checkpoint steps");
  }
  CheckpointSearch search(good, bad, ckpts);
  DGRR_RETURN_IF_ERROR(search.Run());
  result->checkpoints_compared = search.headers_read();
  if (!ckpts.empty()) {
    Report(options, "checkpoint state digests (" + std::to_string(ckpts.size()) + " common, " +
                        std::to_string(search.headers_read()) + " headers read): " +
                        (search.last_agreeing() ? "agree through step " + std::to_string(*search.last_agreeing())
                                                : "differ from the first") +
                        (search.first_differing() ? ", differ at step " + std::to_string(*search.first_differing())
                                                  : ""));
  }
  if (common.empty()) {
    result->last_agreeing_step = search.last_agreeing();
    result->last_common_step = ckpts.back();
  }
  if (search.first_differing()) {
    // The state (moments, counters) can differ before the parameters do.
    differing = search.first_differing();
    result->last_agreeing_step = search.last_agreeing();
  }
  result->first_differing_step = differing;
  if (!differing) return std::optional<Interval>();

  Interval interval;
  interval.from_checkpoint = search.last_agreeing();
  interval.first = interval.from_checkpoint ? *interval.from_checkpoint + 1 : 0;
  interval.last = *differing;
  return std::optional<Interval>(interval);
}

}  // namespace

std::string_view BisectEvidenceName(BisectEvidence e) {
  return e == BisectEvidence::kStepFingerprints ? "step_fingerprints" : "checkpoint_digests";
}

std::string_view BisectVerdictName(BisectVerdict v) {
  switch (v) {
    case BisectVerdict::kAgree: return "agree";
    case BisectVerdict::kDiverged: return "divergence";
    case BisectVerdict::kNotReproduced: return "not_reproduced";
  }
  return "?";
}

StatusOr<BisectResult> Bisect(const std::string& good, const std::string& bad,
                              IntervalReplayer& replayer, const BisectOptions& options) {
  for (const std::string* run : {&good, &bad}) {
    if (!IsDirectory(*run)) return Status::NotFound(*run + ": not a run directory");
  }
  BisectResult result;
  result.good = good;
  result.bad = bad;
  std::vector<StepMap> good_steps, bad_steps;
  DGRR_ASSIGN_OR_RETURN(auto interval,
                        FindInterval(good, bad, options, &good_steps, &bad_steps, &result));
  if (!interval) {
    result.verdict = BisectVerdict::kAgree;
    return result;
  }

  // Step 2: both runs again over the interval, every boundary recorded.
  DGRR_ASSIGN_OR_RETURN(ReplayDirectory dir, ReplayDirectory::Create(options.keep_dir));
  BisectReplay replay;
  replay.from_checkpoint = interval->from_checkpoint;
  replay.first_step = interval->first;
  replay.last_step = interval->last;
  replay.good_dir = dir.path() + "/good";
  replay.bad_dir = dir.path() + "/bad";
  replay.kept = dir.kept();
  const std::string from = interval->from_checkpoint
                               ? "the checkpoint of step " + std::to_string(*interval->from_checkpoint)
                               : "the start";
  for (const auto& [run, out] : {std::pair{good, replay.good_dir}, std::pair{bad, replay.bad_dir}}) {
    Report(options, "replaying " + StepRange(interval->first, interval->last) + " of " + run + " from " +
                        from + " in full mode");
    Status s = replayer.Replay(run, interval->from_checkpoint, interval->last, out);
    if (!s.ok()) return s.WithPrefix("replaying " + run);
  }
  DGRR_ASSIGN_OR_RETURN(replay.good_matches_recording,
                        ReplayMatchesRecording(good_steps, replay.good_dir, interval->first, interval->last));
  DGRR_ASSIGN_OR_RETURN(replay.bad_matches_recording,
                        ReplayMatchesRecording(bad_steps, replay.bad_dir, interval->first, interval->last));

  // Step 3: compare the replays.
  Report(options, "comparing the replays");
  DGRR_ASSIGN_OR_RETURN(CompareResult compared, CompareRuns(replay.good_dir, replay.bad_dir, options.compare));
  result.verdict = compared.found_difference() ? BisectVerdict::kDiverged : BisectVerdict::kNotReproduced;
  result.compare = std::move(compared);
  result.replay = std::move(replay);
  return result;
}

namespace {

ordered_json OptionalStep(const std::optional<uint64_t>& s) {
  return s ? ordered_json(*s) : ordered_json(nullptr);
}
ordered_json OptionalBool(const std::optional<bool>& b) {
  return b ? ordered_json(*b) : ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json BisectJson(const BisectResult& r) {
  ordered_json j = {{"schema", "dgrr.bisect/1"},
                    {"verdict", std::string(BisectVerdictName(r.verdict))},
                    {"good", r.good},
                    {"bad", r.bad}};
  j["evidence"] = {{"kind", std::string(BisectEvidenceName(r.evidence))},
                   {"ranks_compared", r.ranks_compared},
                   {"steps_compared", r.steps_compared},
                   {"checkpoint_headers_read", r.checkpoints_compared},
                   {"last_agreeing_step", OptionalStep(r.last_agreeing_step)},
                   {"first_differing_step", OptionalStep(r.first_differing_step)},
                   {"last_common_step", OptionalStep(r.last_common_step)}};
  if (r.replay) {
    const BisectReplay& p = *r.replay;
    j["replay"] = {{"from_checkpoint", OptionalStep(p.from_checkpoint)},
                   {"first_step", p.first_step},
                   {"last_step", p.last_step},
                   {"steps_replayed", p.steps()},
                   {"runs_replayed", 2},
                   {"mode", "full"},
                   {"good_dir", p.kept ? ordered_json(p.good_dir) : ordered_json(nullptr)},
                   {"bad_dir", p.kept ? ordered_json(p.bad_dir) : ordered_json(nullptr)},
                   {"good_matches_recording", OptionalBool(p.good_matches_recording)},
                   {"bad_matches_recording", OptionalBool(p.bad_matches_recording)}};
  } else {
    j["replay"] = nullptr;
  }
  if (r.compare) {
    ordered_json c = CompareJson(*r.compare);
    const bool diverged = !c.at("divergence").is_null();
    j["divergence"] = diverged ? c.at("divergence").at("first") : ordered_json(nullptr);
    // Boundaries of the replays never compared before that pair: when not 0
    // it is only the first compared difference (compare's same key).
    j["earlier_uncompared"] =
        diverged ? c.at("divergence").at("earlier_uncompared") : ordered_json(nullptr);
    j["compare"] = std::move(c);
  } else {
    j["divergence"] = nullptr;
    j["earlier_uncompared"] = nullptr;
    j["compare"] = nullptr;
  }
  return j;
}

std::string BisectText(const BisectResult& r) {
  std::ostringstream o;
  o << "bisect: good " << r.good << ", bad " << r.bad << "\n";
  if (r.evidence == BisectEvidence::kStepFingerprints) {
    o << "evidence: STEP parameter fingerprints of " << r.ranks_compared << " rank(s) over "
      << r.steps_compared << " common step(s)";
  } else {
    o << "evidence: checkpoint state digests only (no STEP records)";
  }
  o << "; " << r.checkpoints_compared << " checkpoint header(s) read\n";
  if (r.verdict == BisectVerdict::kAgree) {
    o << "result: the runs agree through step "
      << (r.last_common_step ? std::to_string(*r.last_common_step) : std::string("?"))
      << " (the last step both recorded)\n";
    return o.str();
  }
  o << "last agreeing step: "
    << (r.last_agreeing_step ? std::to_string(*r.last_agreeing_step) : std::string("none"))
    << "; first differing step: " << *r.first_differing_step << "\n";
  const BisectReplay& p = *r.replay;
  o << "replayed " << StepRange(p.first_step, p.last_step) << " (" << p.steps() << " per run, 2 runs) from "
    << (p.from_checkpoint ? "the checkpoint of step " + std::to_string(*p.from_checkpoint)
                          : std::string("the start"))
    << " in full mode" << (p.kept ? " into " + p.good_dir + " and " + p.bad_dir : std::string()) << "\n";
  auto reproduced = [](const std::optional<bool>& b) {
    return !b ? std::string("nothing recorded to check") : *b ? std::string("yes") : std::string("NO");
  };
  o << "replays reproduce their recordings: good " << reproduced(p.good_matches_recording) << ", bad "
    << reproduced(p.bad_matches_recording) << "\n";
  o << "--- comparison of the replays ---\n" << CompareText(*r.compare);
  if (r.verdict == BisectVerdict::kNotReproduced) {
    o << "result: the recordings differ at step " << *r.first_differing_step
      << " but the replays agree: the difference did not reproduce (a transient fault such as a race or a "
         "hardware error, or state the replay does not capture)\n";
  }
  return o.str();
}

}  // namespace dgrr::replay
