// dgrr plan: what a run's checkpoints save, what resume fast-forwards, what is
// dropped, and why: DETrain's Needed analysis over the training program.
#include <iostream>

#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "cli/command.h"
#include "model/trainer.h"
#include "model/training_program.h"
#include "runtime/session.h"

namespace dgrr::cli {
namespace {

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
      "the plan stored in the newest one is checked against it.",
      options, positional, args, vm);
  if (rc >= 0) return rc;

  // The run's config, parsed and checked as train --resume would.
  auto config = model::TrainOptionsFromRun(run_dir);
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

DGRR_COMMAND(plan, "show what a run's checkpoints save, fast-forward or drop, and why", RunPlan);

}  // namespace dgrr::cli
