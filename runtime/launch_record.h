// The launch record: how to run a recorded program again
// (docs/launch-record.md, schema "dgrr.launch/2", RUN_DIR/launch.json).
//
// Rank 0's Session writes it when a run starts: the program's argv, working
// directory, executable path and content digest, and the environment
// variables that change what a training program does (dgrr's own, the
// threading, CUDA, NCCL and cuBLAS ones, the loader's paths). `dgrr replay`,
// `rollback` and `bisect` re-launch the program from it (replay/reexecute.h),
// and refuse when the executable is no longer the one that was recorded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dgrr {

// Version 2 adds the optional `launcher` (a torchrun job). A record without
// one is written as version 1, which every reader of version 2 reads too.
inline constexpr const char* kLaunchSchema = "dgrr.launch/2";
inline constexpr const char* kLaunchSchemaV1 = "dgrr.launch/1";
inline constexpr const char* kLaunchFileName = "launch.json";

struct LaunchRecord {
  std::vector<std::string> argv;       // argv[0] as the program was started
  std::string working_directory;       // absolute
  std::string executable;              // absolute path of the running binary
  uint64_t executable_xxh3 = 0;        // XXH3-64 (seed 0) of its bytes
  // An interpreted program's script (set by a language binding): its path
  // and digest are checked like the executable's. Empty when none.
  std::string script;
  uint64_t script_xxh3 = 0;
  // The variables that matter, by name (sorted), with their values then.
  std::vector<std::pair<std::string, std::string>> environment;
  // The launcher that started the program as one worker of a job, when it
  // is one a re-executor starts again itself: today torchrun
  // (torch.distributed.run), from the variables it sets for its workers
  // (TORCHELASTIC_RUN_ID, LOCAL_WORLD_SIZE, WORLD_SIZE). Empty name: none.
  struct Launcher {
    std::string name;           // "torchrun" or empty
    int nproc_per_node = 0;     // LOCAL_WORLD_SIZE
    int nnodes = 0;             // WORLD_SIZE / LOCAL_WORLD_SIZE
    bool operator==(const Launcher&) const = default;
  } launcher;
};

inline constexpr const char* kTorchrunLauncher = "torchrun";

// The torchrun launcher of this process, from the variables torchrun sets
// for each worker; an empty Launcher when torchrun did not start it.
// InvalidArgument when the variables are there but do not add up.
StatusOr<LaunchRecord::Launcher> TorchrunLauncherFromEnvironment();

// The MPI launchers dgrr recognises, and the variables each sets for a
// process it starts: the one list every launcher check reads (the launch
// record's marker, the MPI communicator's environment check, `dgrr train`'s
// world size under mpirun).
//   Open MPI (mpirun, orterun)  OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK
//   PMIx (srun --mpi=pmix; also under Open MPI's mpirun)  PMIX_RANK, PMIX_NAMESPACE
//   PMI-2 (srun --mpi=pmi2, MPICH's hydra)  PMI_SIZE, PMI_RANK
struct MpiLauncher {
  const char* name;       // for messages
  const char* size_var;   // the job's size; null: the launcher sets none
  const char* rank_var;   // this process's rank
  const char* other_var;  // another variable only it sets; null: none
  // The variable whose presence shows the launcher started a process (the
  // size, else the rank): what launch.json keeps of the launch.
  const char* marker() const { return size_var != nullptr ? size_var : rank_var; }
};
inline constexpr MpiLauncher kOpenMpiLauncher{"Open MPI", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", nullptr};
inline constexpr MpiLauncher kPmixLauncher{"PMIx", nullptr, "PMIX_RANK", "PMIX_NAMESPACE"};
inline constexpr MpiLauncher kPmiLauncher{"PMI", "PMI_SIZE", "PMI_RANK", nullptr};
inline constexpr MpiLauncher kMpiLaunchers[] = {kOpenMpiLauncher, kPmixLauncher, kPmiLauncher};

// Whether `launcher` set any of its variables, per `getenv`.
bool MpiLauncherPresent(const MpiLauncher& launcher, const std::function<const char*(const char*)>& getenv);

// This process's rank and the job's size as the first launcher that sets
// both (a size and a rank with 0 <= rank < size) says; size 0 when none does.
struct MpiLaunchPosition {
  int rank = 0;
  int size = 0;
};
MpiLaunchPosition FindMpiLaunchPosition(const std::function<const char*(const char*)>& getenv);

// The variable that shows an MPI launcher (mpirun, srun) started the
// recorded program, or null: such a program is one rank of a job and cannot
// be re-executed on its own.
const std::pair<std::string, std::string>* MpiLauncherVariable(const LaunchRecord& launch);

// Whether environment variable `name` is one an MPI launcher sets for one
// job (the launcher variables above, Open MPI's per-job OMPI_MCA_orte_*,
// OMPI_MCA_ess*, OMPI_MCA_pmix*, its oversubscription and working-directory
// settings, PMIX_* and PMI_*): a re-execution leaves them out, as a new job
// gets its own. A user's MCA tuning (OMPI_MCA_btl, ...) is kept.
bool IsMpiJobVariable(const std::string& name);

// Whether environment variable `name` is one the launch record keeps.
bool LaunchVariableMatters(const std::string& name);

// Whether environment variable `name` can decide what code a program loads
// or runs, or where it reads or writes files: the re-executor takes such a
// variable from a record only when the run is trusted explicitly
// (docs/launch-record.md, "Security"). By name: PATH, every LD_*, every
// PYTHON* but the few that only tune the interpreter (PYTHONHASHSEED,
// PYTHONUNBUFFERED, PYTHONDONTWRITEBYTECODE, PYTHONIOENCODING, PYTHONUTF8,
// PYTHONNOUSERSITE, PYTHONSAFEPATH), and any name containing PATH, FILE, DIR,
// HOME, LIB, PLUGIN, INJECT, PRELOAD, TOOL, PREFIX, CACHE, EXEC, MPIRUN,
// COMMAND or SHELL (HDF5_PLUGIN_PATH, OMP_TOOL_LIBRARIES,
// CUDA_INJECTION64_PATH, NCCL_NET_PLUGIN, NCCL_DEBUG_FILE, DGRR_EXECUTABLE,
// OMPI_MCA_mca_base_component_path, ...). Deliberately broad: a name it
// catches that is harmless costs only a line in the printed difference.
bool LaunchVariableNamesCode(const std::string& name);

// This process's launch (from /proc/self and the environment).
StatusOr<LaunchRecord> CaptureLaunchRecord();

// XXH3-64 of a file's bytes (the executable's and script's digest).
StatusOr<uint64_t> FileContentDigest(const std::string& path);

std::string LaunchPathFor(const std::string& run_dir);
// The document itself: LaunchRecordJson in runtime/launch_record_json.h (this
// header is installed, and keeps nlohmann/json out of the public surface).
// Atomically (write, fsync, rename).
Status WriteLaunchRecord(const std::string& run_dir, const LaunchRecord& record);
// NotFound when RUN_DIR has no launch.json (a run recorded before dgrr kept
// one); Corruption naming the file and key for anything malformed.
StatusOr<LaunchRecord> ReadLaunchRecord(const std::string& run_dir);

}  // namespace dgrr
