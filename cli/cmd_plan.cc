// dgrr plan: what a run's checkpoints save, what resume fast-forwards, what is
// dropped, and why: DETrain's Needed analysis over the training program.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/fast_forward.h"
#include "cli/command.h"
#include "cli/run_kind.h"
#include "model/run_config.h"
#include "model/training_program.h"
#include "runtime/session.h"
#include "trace_format/shape_text.h"

namespace dgrr::cli {
namespace {

// One saved entry with the rank that holds it (nullopt: replicated).
struct ListedEntry {
  const checkpoint::SavedEntry* entry;
  std::optional<int> rank;
};

std::vector<ListedEntry> ListEntries(const checkpoint::Checkpoint& ckpt) {
  std::vector<ListedEntry> out;
  for (const auto& e : ckpt.replicated) out.push_back({&e, std::nullopt});
  for (const auto& r : ckpt.ranks) {
    for (const auto& e : r.entries) out.push_back({&e, r.rank});
  }
  return out;
}

// The roles no saved entry has, of those a training loop usually keeps
// (parameter, optimizer, counter, cursor): state a program keeps but did not
// register is not saved, and is invisible here, so the absence is said.
std::vector<std::string> RolesAbsent(const checkpoint::Checkpoint& ckpt) {
  std::vector<std::string> absent;
  const std::vector<ListedEntry> entries = ListEntries(ckpt);
  for (StateRole role : {StateRole::kParameter, StateRole::kOptimizer, StateRole::kCounter, StateRole::kCursor}) {
    const bool present =
        std::any_of(entries.begin(), entries.end(), [&](const ListedEntry& l) { return l.entry->role == role; });
    if (!present) absent.push_back(StateRoleName(role));
  }
  return absent;
}

void PrintEntriesText(const std::string& run_dir, const checkpoint::Checkpoint& ckpt) {
  std::cout << run_dir << ": no program IR: the entries the program registered are saved; what it did not "
            << "register is not, and is not listed\n"
            << "checkpoint of step " << ckpt.meta.step << " (" << ckpt.path << "), " << ckpt.meta.world_size
            << " rank" << (ckpt.meta.world_size == 1 ? "" : "s") << ":\n";
  const std::vector<ListedEntry> entries = ListEntries(ckpt);
  size_t width = 4;
  for (const auto& l : entries) width = std::max(width, l.entry->name.size());
  auto pad = [](std::string s, size_t n) { return s.size() < n ? s + std::string(n - s.size(), ' ') : s; };
  std::cout << "  " << pad("name", width) << "  " << pad("role", 11) << pad("dtype", 7) << pad("shape", 14)
            << pad("bytes", 12) << "replicated\n";
  uint64_t total = 0;
  for (const auto& l : entries) {
    const checkpoint::SavedEntry& e = *l.entry;
    total += e.data.size();
    std::cout << "  " << pad(e.name, width) << "  " << pad(StateRoleName(e.role), 11)
              << pad(std::string(DTypeName(e.dtype)), 7) << pad(trace::ShapeText(e.shape), 14)
              << pad(std::to_string(e.data.size()), 12)
              << (l.rank ? "no (rank " + std::to_string(*l.rank) + ")" : std::string("yes")) << "\n";
  }
  std::cout << entries.size() << " entr" << (entries.size() == 1 ? "y" : "ies") << ", " << total
            << " bytes saved per checkpoint\n";
  const std::vector<std::string> absent = RolesAbsent(ckpt);
  if (!absent.empty()) {
    std::string roles;
    for (size_t i = 0; i < absent.size(); ++i) roles += (i ? ", " : "") + absent[i];
    std::cout << "no entry has role " << roles << ": state of that kind the program keeps (a data cursor, an "
              << "optimizer's moments or step count) is not saved, and a resume or replay starts it over "
              << "(register it: docs/api.md)\n";
  }
}

nlohmann::ordered_json EntriesJson(const std::string& run_dir, const checkpoint::Checkpoint* ckpt) {
  nlohmann::ordered_json j = {{"schema", "dgrr.saved-state/1"}, {"run", run_dir}};
  j["checkpoint_step"] = ckpt ? nlohmann::ordered_json(ckpt->meta.step) : nlohmann::ordered_json(nullptr);
  j["checkpoint"] = ckpt ? nlohmann::ordered_json(ckpt->path) : nlohmann::ordered_json(nullptr);
  j["world_size"] = ckpt ? nlohmann::ordered_json(ckpt->meta.world_size) : nlohmann::ordered_json(nullptr);
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  if (ckpt) {
    for (const auto& l : ListEntries(*ckpt)) {
      const checkpoint::SavedEntry& e = *l.entry;
      entries.push_back({{"name", e.name},
                         {"role", StateRoleName(e.role)},
                         {"dtype", std::string(DTypeName(e.dtype))},
                         {"shape", e.shape},
                         {"bytes", e.data.size()},
                         {"replicated", !l.rank},
                         {"rank", l.rank ? nlohmann::ordered_json(*l.rank) : nlohmann::ordered_json(nullptr)}});
    }
  }
  j["entries"] = entries;
  j["roles_absent"] = ckpt ? nlohmann::ordered_json(RolesAbsent(*ckpt)) : nlohmann::ordered_json::array();
  return j;
}

// What the checkpoints of any program's run save: the fast-forward plan the
// program stored (it describes its loop in the program IR), or else every
// registered entry, read from the newest good checkpoint.
int RunLaunchedPlan(const std::string& run_dir, bool json) {
  auto steps = checkpoint::ListCheckpointSteps(run_dir);
  if (!steps.ok()) return ReportError("plan", steps.status());
  if (steps->empty()) {
    if (json) {
      std::cout << EntriesJson(run_dir, nullptr).dump(2) << "\n";
    } else {
      std::cout << run_dir << " has no checkpoint: nothing is saved yet (everything the program registers "
                << "will be, unless it describes its loop in the program IR)\n";
    }
    return kExitOk;
  }
  std::vector<std::string> skipped;
  auto ckpt = checkpoint::FindNewestGoodCheckpoint(run_dir, UINT64_MAX, /*fallback=*/true, &skipped);
  for (const std::string& why : skipped) ReportWarning("plan", "skipping " + why);
  if (!ckpt.ok()) return ReportError("plan", ckpt.status());
  if (!ckpt->meta.plan_json.empty()) {
    auto plans = checkpoint::PlansFromJson(ckpt->meta.plan_json, ckpt->path);
    if (!plans.ok()) return ReportError("plan", plans.status());
    if (json) {
      std::cout << ckpt->meta.plan_json << "\n";
    } else {
      std::cout << "fast-forward plan of " << run_dir << " (stored in " << ckpt->path << "):\n"
                << checkpoint::PlansToText(*plans);
    }
    return kExitOk;
  }
  if (json) {
    std::cout << EntriesJson(run_dir, &*ckpt).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    PrintEntriesText(run_dir, *ckpt);
  }
  return kExitOk;
}

int RunPlan(const std::vector<std::string>& args) {
  std::string run_dir;
  po::options_description options("Options");
  options.add_options()("run", po::value(&run_dir)->required(), "run directory (positional)")(
      "json", "print the plan as JSON (schema dgrr.plan/1, docs/program-ir.md)");
  po::positional_options_description positional;
  positional.add("run", 1);
  po::variables_map vm;
  int rc = ParseCommandLine(
      "plan", "dgrr plan RUN_DIR [--json]",
      "Prints the fast-forward plan of a run: for each variable of its training program, whether\n"
      "checkpoints save it, resume regenerates it by re-executing the statements that define it\n"
      "(fast-forward), or it is dropped, with the reason. The plan comes from DETrain's Needed\n"
      "analysis over the program the trainer describes itself as; when the run has checkpoints,\n"
      "the plan stored in the newest one is checked against it.\n"
      "For a run of any other program (it has a launch.json), the newest good checkpoint says what\n"
      "is saved: the plan it stores when the program describes its loop in the program IR, otherwise\n"
      "every registered entry (name, role, dtype, shape, bytes, replicated); --json then prints\n"
      "schema dgrr.saved-state/1 (docs/json/plan.md).",
      options, positional, args, vm);
  if (rc >= 0) return rc;

  const RunKind kind = ClassifyRun(run_dir);
  if (kind == RunKind::kNeither) return ReportError("plan", NotReexecutable(run_dir));
  if (kind == RunKind::kLaunched) return RunLaunchedPlan(run_dir, vm.count("json") > 0);
  // The run's config, parsed and checked as train --resume would.
  auto config = model::ReadRunConfig(run_dir);
  if (!config.ok()) return ReportError("plan", config.status());
  auto plan = model::TrainingPlan();
  if (!plan.ok()) return ReportError("plan", plan.status());
  const std::string json = checkpoint::PlansToJson({*plan});

  auto steps = checkpoint::ListCheckpointSteps(run_dir);
  if (!steps.ok()) return ReportError("plan", steps.status());
  if (!steps->empty()) {
    const std::string path = checkpoint::CheckpointPath(run_dir, steps->back());
    auto ckpt = checkpoint::ReadCheckpoint(path);
    if (!ckpt.ok()) return ReportError("plan", ckpt.status());
    if (ckpt->meta.plan_json != json) {
      ReportWarning("plan", path + " was written under a different plan (an older dgrr?)");
    }
  }
  if (vm.count("json")) {
    std::cout << json << "\n";
  } else {
    std::cout << "training program of " << run_dir << ":\n"
              << model::TrainingProgram().Dump() << "\n"
              << checkpoint::PlansToText({*plan});
  }
  return kExitOk;
}

}  // namespace

DGRR_COMMAND(plan, "show what a run's checkpoints save, fast-forward or drop, and why", RunPlan, kExitOk,
             kExitUsage, kExitIO, kExitInvalidData);

}  // namespace dgrr::cli
