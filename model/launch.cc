#include "model/launch.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "base/environment.h"
#include "base/file.h"
#include "runtime/json_input.h"
#include "runtime/session.h"

namespace dgrr::model {
namespace {

std::mutex g_executable_mu;
std::string g_executable;  // guarded by g_executable_mu

}  // namespace

std::string DgrrExecutable() {
  if (std::string env = GetEnvOrEmpty("DGRR_EXECUTABLE"); !env.empty()) return env;
  std::lock_guard<std::mutex> lock(g_executable_mu);
  return g_executable;
}

void SetDgrrExecutable(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_executable_mu);
  g_executable = path;
}

StatusOr<LaunchRecord> TrainLaunch(const std::string& run_dir) {
  const std::string executable = DgrrExecutable();
  if (executable.empty()) {
    return Status::FailedPrecondition(
        "the dgrr executable is not known to this process (set DGRR_EXECUTABLE to re-run dgrr train runs)");
  }
  DGRR_ASSIGN_OR_RETURN(LaunchRecord record, CaptureLaunchRecord());
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::canonical(executable, ec);
  record.executable = ec ? executable : absolute.string();
  DGRR_ASSIGN_OR_RETURN(record.executable_xxh3, FileContentDigest(record.executable));
  record.argv = {record.executable, "train", "--out", run_dir, "--resume"};
  record.script.clear();
  record.script_xxh3 = 0;
  // One rank process of an MPI job is re-launched as the whole run, in threads.
  std::erase_if(record.environment, [](const auto& v) { return IsMpiJobVariable(v.first); });
  return record;
}

StatusOr<LaunchRecord> LaunchOfRun(const std::string& run_dir) {
  if (!IsDirectory(run_dir)) return Status::NotFound(run_dir + ": not a dgrr run (no such directory)");
  const std::string config_path = ConfigPathFor(run_dir);
  bool train_run = false;
  if (PathExists(config_path)) {
    DGRR_ASSIGN_OR_RETURN(const nlohmann::json config, ReadJsonFile(config_path));
    train_run = config.is_object() && config.contains("schema") && config["schema"] == kRunConfigSchema;
  }
  if (train_run) {
    // The re-launch reads the config: a damaged one, or one naming a fault
    // target or data file the trainer refuses, is the run file's error now
    // (Trainer::Create validates everything and touches nothing on disk).
    DGRR_ASSIGN_OR_RETURN(const TrainOptions o, TrainOptionsFromRun(run_dir));
    DGRR_RETURN_IF_ERROR(Trainer::Create(o).status());
  }
  auto recorded = ReadLaunchRecord(run_dir);
  if (recorded.ok() && train_run) {
    // The settings are those of the run where it is now: a run directory
    // moved or copied since the recording names its old place in --out.
    std::error_code ec;
    const std::filesystem::path here = std::filesystem::absolute(run_dir, ec);
    recorded->argv = {recorded->executable, "train", "--out", ec ? run_dir : here.lexically_normal().string(),
                      "--resume"};
  }
  if (recorded.ok() || !recorded.status().IsNotFound()) return recorded;
  if (!train_run) {
    return Status::Corruption(run_dir + ": no " + kLaunchFileName +
                              ": the run does not say how to run it again (not a run of dgrr train, and its "
                              "program did not record a launch)");
  }
  // A run of a dgrr train older than the launch record.
  return TrainLaunch(run_dir);
}

}  // namespace dgrr::model
