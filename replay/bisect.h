// Bisecting two long runs recorded cheaply (docs/bisect.md; JSON:
// docs/json/bisect.md): find the last step at which a good and a bad run
// agree from what they recorded anyway (per-step parameter fingerprints in
// the STEP records, checkpoint state digests), then re-execute both over the
// diverging interval only, recording every boundary, and compare the two
// replays to name the first divergent operator, step and rank.
//
//   MyReplayer replayer;                 // re-executes a run of yours
//   auto r = Bisect("runs/good", "runs/bad", replayer, {});
//   if (r.ok()) std::cout << BisectText(*r);
//
// Re-execution is the application's (dgrr's own CLI plugs in the reference
// workload): replay/ knows traces and checkpoints, not how to train.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "replay/compare.h"

namespace dgrr::replay {

// Re-executes part of a recorded run with every boundary recorded.
class IntervalReplayer {
 public:
  virtual ~IntervalReplayer() = default;
  // Re-executes `run_dir` from the state of its checkpoint of step
  // `checkpoint_step` (nullopt: from the start) through step `last_step`,
  // recording every boundary (mode full), into the new run directory
  // `out_dir` (which does not exist yet), with the same rank layout.
  virtual Status Replay(const std::string& run_dir, std::optional<uint64_t> checkpoint_step,
                        uint64_t last_step, const std::string& out_dir) = 0;
};

struct BisectOptions {
  CompareOptions compare;      // for the comparison of the two replays
  // Where the two replays go (DIR/good, DIR/bad). Empty: a temporary
  // directory, removed afterwards; otherwise DIR must not exist yet and is kept.
  std::string keep_dir;
  std::function<void(const std::string&)> progress;  // one line per stage
};

// The last step of agreement, from the recorded evidence.
enum class BisectEvidence {
  kStepFingerprints,    // STEP records of every common rank, one pass
  kCheckpointDigests,   // no STEP records: binary search over checkpoints
};
std::string_view BisectEvidenceName(BisectEvidence e);

enum class BisectVerdict {
  kAgree,           // no difference in the recorded evidence (exit 0)
  kDiverged,        // the replays differ: first_divergence names where (exit 4)
  kNotReproduced,   // the recordings differ but the replays agree (exit 5)
};
std::string_view BisectVerdictName(BisectVerdict v);

struct BisectReplay {
  std::optional<uint64_t> from_checkpoint;  // the common checkpoint restored
  uint64_t first_step = 0;
  uint64_t last_step = 0;
  uint64_t steps() const { return last_step - first_step + 1; }
  std::string good_dir, bad_dir;  // replay directories (gone unless kept)
  bool kept = false;
  // Whether each replay's STEP records equal its own recording's over the
  // interval (nullopt: nothing recorded to check against).
  std::optional<bool> good_matches_recording;
  std::optional<bool> bad_matches_recording;
};

struct BisectResult {
  std::string good, bad;
  BisectEvidence evidence = BisectEvidence::kStepFingerprints;
  uint32_t ranks_compared = 0;            // ranks whose STEP records were compared
  uint64_t steps_compared = 0;            // common steps with STEP records
  uint64_t checkpoints_compared = 0;      // checkpoint headers read (both runs)
  std::optional<uint64_t> last_agreeing_step;   // nullopt: none (or unknown)
  std::optional<uint64_t> first_differing_step; // from the evidence
  std::optional<uint64_t> last_common_step;     // the end of what was compared
  BisectVerdict verdict = BisectVerdict::kAgree;
  std::optional<BisectReplay> replay;           // absent when the runs agree
  std::optional<CompareResult> compare;         // the two replays compared
};

// Bisects `good` against `bad` (run directories). NotFound/IOError (exit 2)
// for a missing run, Corruption (exit 3) for an invalid trace or checkpoint,
// InvalidArgument when neither STEP records nor common checkpoints exist.
StatusOr<BisectResult> Bisect(const std::string& good, const std::string& bad,
                              IntervalReplayer& replayer, const BisectOptions& options);

// The dgrr.bisect/1 document (docs/json/bisect.md) and the short report.
nlohmann::ordered_json BisectJson(const BisectResult& result);
std::string BisectText(const BisectResult& result);

}  // namespace dgrr::replay
