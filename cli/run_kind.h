// Which re-execution path a run directory takes: `dgrr train`'s reference
// runs (config.json of schema dgrr.run-config/1) keep the in-process
// trainer; any other program's run is launched again from its launch.json
// (replay/reexecute.h).
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
  kLaunched,   // has launch.json
  kNeither,    // a directory with neither a reference config nor launch.json
};

inline RunKind ClassifyRun(const std::string& run_dir) {
  const std::string config_path = ConfigPathFor(run_dir);
  bool config_readable = false;
  if (PathExists(config_path)) {
    auto config = ReadJsonFile(config_path);
    if (config.ok() && config->is_object() && config->contains("schema") &&
        (*config)["schema"] == model::kRunConfigSchema) {
      return RunKind::kReference;
    }
    config_readable = config.ok() && config->is_object();
  }
  if (PathExists(LaunchPathFor(run_dir))) return RunKind::kLaunched;
  // A missing directory, or a damaged config.json, is reported as before.
  if (!IsDirectory(run_dir) || (PathExists(config_path) && !config_readable)) return RunKind::kReference;
  return RunKind::kNeither;
}

// The one line for a run that says nothing about how to run it again (exit 3).
inline Status NotReexecutable(const std::string& run_dir) {
  return Status::Corruption(run_dir + ": no " + kLaunchFileName +
                            ": the run does not say how to run it again (not a run of dgrr train, and "
                            "its program did not record a launch; was it written by an older dgrr?)");
}

}  // namespace dgrr::cli
