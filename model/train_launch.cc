#include "model/train_launch.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "base/environment.h"
#include "base/file.h"

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

StatusOr<LaunchRecord> LaunchOfTrainRun(const std::string& run_dir) {
  auto recorded = ReadLaunchRecord(run_dir);
  if (recorded.ok()) {
    // The settings are those of the run where it is now: a run directory
    // moved or copied since the recording names its old place in --out.
    std::error_code ec;
    const std::filesystem::path here = std::filesystem::absolute(run_dir, ec);
    recorded->argv = {recorded->executable, "train", "--out", ec ? run_dir : here.lexically_normal().string(),
                      "--resume"};
  }
  if (recorded.ok() || !recorded.status().IsNotFound()) return recorded;
  // A run of a dgrr train older than the launch record.
  return TrainLaunch(run_dir);
}

}  // namespace dgrr::model
