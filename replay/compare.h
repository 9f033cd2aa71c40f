// Comparing two runs end to end: the trace-file front end of the mapper and
// certification (docs/compare.md, sections 6-8; JSON: docs/json/compare.md).
//
//   CompareOptions options;  options.context = 3;
//   auto result = CompareRuns("runs/a", "runs/b", options);
//   if (result.ok()) std::cout << CompareText(*result);   // or CompareJson()
//
// Configs and environment fingerprints are diffed key by key first. Then the
// boundaries are streamed through LockstepComparer in chunks; only when the
// keys stop lining up are both sides loaded into memory, the pairs before the
// first key mismatch kept as they are and the rest handed to the
// schedule-tolerant mapper.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "replay/certify.h"
#include "replay/compare_logical.h"
#include "replay/mapper.h"
#include "replay/trace_items.h"

namespace dgrr::replay {

struct CompareOptions {
  std::vector<std::string> ignore_globs;  // --ignore: dropped from both sides first
  uint32_t context = 3;                   // --context: pairs shown around the divergence
  uint32_t band = 64;                     // --band: the tolerant mapper's reach (docs/compare.md §3.3)
  uint32_t isolation_window = 8;
  size_t chunk_items = 4096;              // lockstep streaming chunk (cache-sized)
  // Keep both sequences and the whole alignment in the result (the Perfetto
  // export needs them); forces the in-memory path.
  bool keep_sequences = false;
  // Whether a difference in a config.json key (dotted: "optimizer.lr") can
  // change a recorded value; the others are marked "never changes results".
  // What a key means is the business of the program that wrote the config,
  // not of replay/: `dgrr` passes its run-config codec's attribute
  // (model::RunConfigKeyChangesResults). Null: every key may.
  std::function<bool(std::string_view key)> config_key_changes_results;
};

// One key of config.json or of the environment fingerprint whose values
// differ; a value is the compact JSON text, absent when the key is missing.
struct KeyDifference {
  std::string key;
  std::optional<std::string> a;
  std::optional<std::string> b;
  // False for a setting that never changes results (the thread count):
  // CompareOptions::config_key_changes_results for a config key.
  bool changes_results = true;
};

struct SideSummary {
  std::string path;
  bool is_run_dir = false;
  uint32_t world_size = 1;
  std::vector<std::string> trace_paths;
  uint64_t boundaries = 0;  // compared (after --ignore)
  uint64_t ignored = 0;     // dropped by --ignore
  std::vector<std::string> warnings;  // torn tails
  // Logical comparison only: replicated boundaries of ranks other than 0
  // checked against rank 0's (docs/compare.md §6.3).
  uint64_t replicas_checked = 0;
};

// A boundary of one pair as reported: its record re-read from its trace.
struct ReportedBoundary {
  std::string trace;
  uint64_t record_index = 0;
  uint64_t index = 0;  // position in the compared sequence
  uint32_t world_size = 1;  // of the run holding it (record.rank is "rank r of world_size")
  std::string name;
  trace::BoundaryRecord record;
};

struct ReportedPair {
  uint64_t ordinal = 0;
  PairStatus status = PairStatus::kEqual;
  Difference difference = Difference::kNone;  // what differs: values, dtype, shape
  ReportedBoundary a;
  ReportedBoundary b;
};

// A boundary that was never compared, as reported.
struct UncomparedBoundary {
  char side = 'A';  // 'A' or 'B'
  Unpaired why = Unpaired::kNoCounterpart;
  ReportedBoundary boundary;
};
inline constexpr size_t kListedUncompared = 5;  // listed in the report and the JSON

// A rank whose replicated boundary disagrees with its own run's rank 0
// (logical comparison only), as reported.
struct ReportedRankDisagreement {
  char side = 'A';
  RankDisagreement::Kind kind = RankDisagreement::Kind::kDiffers;
  uint64_t step = 0;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  std::optional<ReportedBoundary> reference;  // rank 0's copy
  std::optional<ReportedBoundary> copy;       // the disagreeing rank's copy
};

struct CompareResult {
  SideSummary a, b;
  bool ranks_paired = true;  // RanksComparable: rank r with rank r
  // World sizes differ and both sides are whole runs: each is compared as
  // one logical run (docs/compare.md §6.3). Otherwise ranks are merged by
  // example (§6.2) when not paired.
  bool logical = false;

  // Listed first: the likely explanation of a divergence.
  bool configs_available = false;  // both config.json found
  bool config_digests_differ = false;
  std::vector<KeyDifference> config_differences;
  bool environments_available = false;
  bool env_digests_differ = false;
  std::vector<KeyDifference> environment_differences;

  bool lockstep = false;        // the sequences lined up end to end
  uint64_t lockstep_prefix = 0; // pairs before the first key mismatch
  AlignmentStats stats;         // over the whole sequences
  uint64_t unmatched_a = 0;     // deletions
  uint64_t unmatched_b = 0;     // insertions
  // Boundaries never compared, by reason, and the first few of them (both
  // sides, by position); all zero and empty in lockstep.
  Coverage coverage;
  std::vector<UncomparedBoundary> uncompared;

  CertifyReport certify;
  // Logical comparison: ranks disagreeing with their own run's rank 0 (both
  // sides, the first few by side and step) and how many in all. The first
  // ends the certified prefix (certify is adjusted, and then
  // prefix_ends_at_rank_disagreement).
  uint64_t rank_disagreement_count = 0;
  std::vector<ReportedRankDisagreement> rank_disagreements;
  bool prefix_ends_at_rank_disagreement = false;
  std::optional<ReportedPair> first_divergence;
  std::vector<ReportedPair> before, after;
  // Boundaries never compared that lie before the first divergence on their
  // own side (A before its A boundary, B before its B boundary): when not 0,
  // the first divergence is only the first *compared* difference, and the
  // true first may be among these. The first few of them, by position.
  uint64_t earlier_uncompared = 0;
  std::vector<UncomparedBoundary> earlier_uncompared_listed;

  // Only with CompareOptions::keep_sequences (then has_sequences).
  bool has_sequences = false;
  std::vector<BoundaryItem> items_a, items_b;
  Alignment alignment;
  NameTable names_a, names_b;

  // A pair of the two runs differs.
  bool diverged() const { return certify.first_divergence.has_value(); }
  // Anything differs: a pair, or a rank with its own run's rank 0 (exit 4).
  bool found_difference() const { return diverged() || rank_disagreement_count > 0; }
};

// Compares run (or trace) `a` with `b`. NotFound/IOError (exit 2) for a
// missing or unreadable file, Corruption (exit 3) for an invalid trace or
// JSON file, each naming the file. A divergence is a successful result.
StatusOr<CompareResult> CompareRuns(const std::string& a, const std::string& b,
                                    const CompareOptions& options);

// Key-by-key differences of two JSON documents, flattened to dotted paths
// ("optimizer.lr", "layers[2]"); sorted by key.
std::vector<KeyDifference> DiffJson(const nlohmann::json& a, const nlohmann::json& b);
// The environment fingerprint (dgrr.env/1) prepared for diffing: the per-run
// fields (collected_unix_ns, host.hostname) dropped, controls keyed by name.
nlohmann::json EnvironmentForDiff(const nlohmann::json& env);

// The dgrr.compare/4 document (docs/json/compare.md).
nlohmann::ordered_json CompareJson(const CompareResult& result);
// The short human report.
std::string CompareText(const CompareResult& result);
// What a differing pair differs in, for people: "values differ",
// "dtype f32 -> bf16", "shape [8,32] -> [8,16]" (A -> B), or both of the
// last two joined by ", "; empty for an equal pair.
std::string DifferenceText(const ReportedPair& pair);

}  // namespace dgrr::replay
