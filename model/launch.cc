#include "model/launch.h"

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "model/run_config.h"
#include "model/trainer.h"
#include "runtime/json_input.h"
#include "runtime/session.h"

namespace dgrr::model {

StatusOr<LaunchRecord> LaunchOfRun(const std::string& run_dir) {
  if (!IsDirectory(run_dir)) return Status::NotFound(run_dir + ": not a dgrr run (no such directory)");
  const std::string config_path = ConfigPathFor(run_dir);
  bool train_run = false;
  if (PathExists(config_path)) {
    DGRR_ASSIGN_OR_RETURN(const nlohmann::json config, ReadJsonFile(config_path));
    train_run = IsRunConfig(config);
  }
  if (train_run) {
    // The re-launch reads the config: a damaged one, or one naming a fault
    // target or data file the trainer refuses, is the run file's error now
    // (Trainer::Create validates everything and touches nothing on disk).
    DGRR_ASSIGN_OR_RETURN(const TrainOptions o, TrainOptionsFromRun(run_dir));
    DGRR_RETURN_IF_ERROR(Trainer::Create(o).status());
    return LaunchOfTrainRun(run_dir);
  }
  auto recorded = ReadLaunchRecord(run_dir);
  if (recorded.ok() || !recorded.status().IsNotFound()) return recorded;
  return Status::Corruption(run_dir + ": no " + kLaunchFileName +
                            ": the run does not say how to run it again (not a run of dgrr train, and its "
                            "program did not record a launch)");
}

}  // namespace dgrr::model
