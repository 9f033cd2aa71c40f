// Which plan a run directory shows (dgrr plan): a run of `dgrr train`
// (config.json of schema dgrr.run-config/1) shows the trainer's program and
// its fast-forward plan even before its first checkpoint; any other
// program's run (it has launch.json) shows what its newest checkpoint saved.
// The commands that re-execute (replay, rollback, bisect) take one path for
// every run instead (model/launch.h, replay/reexecute.h).
#pragma once

#include <string>

#include "base/file.h"
#include "model/trainer.h"
#include "runtime/json_input.h"
#include "runtime/launch_record.h"
#include "runtime/session.h"

namespace dgrr::cli {

enum class RunKind {
  kReference,  // dgrr train's, or not recognisably anything: the reference path reports it
  kLaunched,   // another program's, with launch.json
  kNeither,    // a directory with neither a reference config nor launch.json
};

inline RunKind ClassifyRun(const std::string& run_dir) {
  const std::string config_path = ConfigPathFor(run_dir);
  if (PathExists(config_path)) {
    auto config = ReadJsonFile(config_path);
    // A damaged config.json is reported by the reference path, naming it.
    if (!config.ok() || !config->is_object()) return RunKind::kReference;
    if (config->contains("schema") && (*config)["schema"] == model::kRunConfigSchema) return RunKind::kReference;
  }
  if (PathExists(LaunchPathFor(run_dir))) return RunKind::kLaunched;
  // A missing directory is reported as before.
  if (!IsDirectory(run_dir)) return RunKind::kReference;
  return RunKind::kNeither;
}

// The one line for a run that says nothing about how to run it again (exit 3).
inline Status NotReexecutable(const std::string& run_dir) {
  return Status::Corruption(run_dir + ": no " + kLaunchFileName +
                            ": the run does not say how to run it again (not a run of dgrr train, and "
                            "its program did not record a launch)");
}

}  // namespace dgrr::cli
