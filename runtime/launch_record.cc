#include "runtime/launch_record.h"
#include "runtime/launch_record_json.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "base/coding.h"
#include "base/environment.h"
#include "base/file.h"
#include "base/file_system.h"
#include "fingerprint/fingerprint.h"
#include "runtime/json_input.h"

extern char** environ;

namespace dgrr {
namespace {

constexpr uint64_t kMaxLaunchBytes = 16 << 20;

StatusOr<std::string> ReadLink(const char* path) {
  char buffer[PATH_MAX + 1];
  const ssize_t n = ::readlink(path, buffer, PATH_MAX);
  if (n < 0) return Status::FromErrno("readlink", path, errno);
  return std::string(buffer, static_cast<size_t>(n));
}

}  // namespace

bool MpiLauncherPresent(const MpiLauncher& launcher, const std::function<const char*(const char*)>& getenv) {
  for (const char* name : {launcher.size_var, launcher.rank_var, launcher.other_var}) {
    if (name != nullptr && getenv(name) != nullptr) return true;
  }
  return false;
}

MpiLaunchPosition FindMpiLaunchPosition(const std::function<const char*(const char*)>& getenv) {
  auto number = [&](const char* name) -> int {
    const char* v = getenv(name);
    return v != nullptr && *v != '\0' ? std::atoi(v) : -1;
  };
  for (const MpiLauncher& launcher : kMpiLaunchers) {
    if (launcher.size_var == nullptr) continue;
    const int size = number(launcher.size_var), rank = number(launcher.rank_var);
    if (size > 0 && rank >= 0 && rank < size) return {rank, size};
  }
  return {};
}

namespace {
bool IsMpiLauncherMarker(const std::string& name) {
  for (const MpiLauncher& launcher : kMpiLaunchers) {
    if (name == launcher.marker()) return true;
  }
  return false;
}
}  // namespace

const std::pair<std::string, std::string>* MpiLauncherVariable(const LaunchRecord& launch) {
  for (const auto& variable : launch.environment) {
    if (IsMpiLauncherMarker(variable.first)) return &variable;
  }
  return nullptr;
}

bool IsMpiJobVariable(const std::string& name) {
  static const char* const kPrefixes[] = {"OMPI_COMM_WORLD_", "OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix",
                                          "PMIX_", "PMI_"};
  static const char* const kNames[] = {"OMPI_MCA_initial_wdir", "OMPI_MCA_mpi_oversubscribe",
                                       "OMPI_MCA_rmaps_base_oversubscribe", "OMPI_MCA_shmem_RUNTIME_QUERY_hint"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

bool LaunchVariableMatters(const std::string& name) {
  static const char* const kPrefixes[] = {"DGRR_", "OMP_", "MKL_", "OPENBLAS_", "GOMP_", "KMP_",
                                          "CUDA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "NCCL_",
                                          "TORCH_", "PYTORCH_", "PYTHON", "OMPI_MCA_"};
  // The launcher variables say that an MPI launcher started the program
  // (MpiLauncherVariable): a re-executor must not start it alone.
  static const char* const kNames[] = {"PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "HDF5_PLUGIN_PATH",
                                       "CUBLAS_WORKSPACE_CONFIG"};
  // The control file is the re-executor's to set, never the recording's.
  if (name == "DGRR_CONTROL") return false;
  // Test hooks (DGRR_TEST_KILL_AT, ...) belong to the test that set them: a
  // re-execution that inherited one would kill itself where the recording died.
  if (name.rfind("DGRR_TEST_", 0) == 0) return false;
  if (IsMpiLauncherMarker(name)) return true;
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

bool LaunchVariableNamesCode(const std::string& name) {
  static const char* const kInertPython[] = {"PYTHONHASHSEED",  "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
                                             "PYTHONIOENCODING", "PYTHONUTF8",       "PYTHONNOUSERSITE",
                                             "PYTHONSAFEPATH"};
  static const char* const kParts[] = {"PATH",   "FILE",  "DIR",    "HOME",   "LIB",   "PLUGIN",  "INJECT", "PRELOAD",
                                       "TOOL",   "PREFIX", "CACHE", "EXEC",   "MPIRUN", "COMMAND", "SHELL"};
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("LD_", 0) == 0) return true;
  if (upper.rfind("PYTHON", 0) == 0) {
    return std::find_if(std::begin(kInertPython), std::end(kInertPython),
                        [&](const char* n) { return name == n; }) == std::end(kInertPython);
  }
  for (const char* part : kParts) {
    if (upper.find(part) != std::string::npos) return true;
  }
  return false;
}

StatusOr<uint64_t> FileContentDigest(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(auto file, FileSystem::Default()->NewRandomAccessFile(path));
  return Xxh3OfFile(*file);
}

StatusOr<LaunchRecord::Launcher> TorchrunLauncherFromEnvironment() {
  LaunchRecord::Launcher launcher;
  // Every torchrun worker has TORCHELASTIC_RUN_ID (torch.distributed.elastic's
  // LocalElasticAgent sets it with RANK, LOCAL_WORLD_SIZE, WORLD_SIZE, ...).
  if (!GetEnv("TORCHELASTIC_RUN_ID")) return launcher;
  auto count = [](const char* name) -> StatusOr<int> {
    const std::optional<std::string> v = GetEnv(name);
    char* end = nullptr;
    const long n = v ? std::strtol(v->c_str(), &end, 10) : 0;
    if (!v || v->empty() || *end != '\0' || n < 1 || n > (1 << 20)) {
      return Status::InvalidArgument(std::string("torchrun started this process (TORCHELASTIC_RUN_ID is set) but ") +
                                     name + " is " + (v ? "'" + *v + "'" : std::string("unset")) +
                                     ", not a number of processes");
    }
    return static_cast<int>(n);
  };
  DGRR_ASSIGN_OR_RETURN(const int local, count("LOCAL_WORLD_SIZE"));
  DGRR_ASSIGN_OR_RETURN(const int world, count("WORLD_SIZE"));
  launcher.name = kTorchrunLauncher;
  launcher.nproc_per_node = local;
  launcher.nnodes = world % local == 0 ? world / local : 0;  // 0: nodes of unequal sizes
  return launcher;
}

StatusOr<LaunchRecord> CaptureLaunchRecord() {
  LaunchRecord r;
  DGRR_ASSIGN_OR_RETURN(std::string cmdline, ReadFileToString("/proc/self/cmdline", kMaxLaunchBytes));
  // NUL-separated, with a trailing NUL.
  size_t start = 0;
  for (size_t i = 0; i < cmdline.size(); ++i) {
    if (cmdline[i] == '\0') {
      r.argv.push_back(cmdline.substr(start, i - start));
      start = i + 1;
    }
  }
  if (start < cmdline.size()) r.argv.push_back(cmdline.substr(start));
  DGRR_ASSIGN_OR_RETURN(r.working_directory, ReadLink("/proc/self/cwd"));
  DGRR_ASSIGN_OR_RETURN(r.executable, ReadLink("/proc/self/exe"));
  DGRR_ASSIGN_OR_RETURN(r.executable_xxh3, FileContentDigest(r.executable));
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    std::string name(*e, static_cast<size_t>(eq - *e));
    if (LaunchVariableMatters(name)) r.environment.emplace_back(std::move(name), std::string(eq + 1));
  }
  std::sort(r.environment.begin(), r.environment.end());
  DGRR_ASSIGN_OR_RETURN(r.launcher, TorchrunLauncherFromEnvironment());
  return r;
}

std::string LaunchPathFor(const std::string& run_dir) { return run_dir + "/" + kLaunchFileName; }

nlohmann::ordered_json LaunchRecordJson(const LaunchRecord& record) {
  nlohmann::ordered_json j;
  j["schema"] = record.launcher.name.empty() ? kLaunchSchemaV1 : kLaunchSchema;
  j["argv"] = record.argv;
  j["working_directory"] = record.working_directory;
  j["executable"] = record.executable;
  j["executable_xxh3"] = Hex64(record.executable_xxh3);
  if (!record.script.empty()) {
    j["script"] = record.script;
    j["script_xxh3"] = Hex64(record.script_xxh3);
  }
  nlohmann::ordered_json env = nlohmann::ordered_json::object();
  for (const auto& [name, value] : record.environment) env[name] = value;
  j["environment"] = env;
  if (!record.launcher.name.empty()) {
    nlohmann::ordered_json l;
    l["name"] = record.launcher.name;
    l["nproc_per_node"] = record.launcher.nproc_per_node;
    l["nnodes"] = record.launcher.nnodes;
    j["launcher"] = l;
  }
  return j;
}

Status WriteLaunchRecord(const std::string& run_dir, const LaunchRecord& record) {
  return WriteFileAtomically(
      LaunchPathFor(run_dir),
      LaunchRecordJson(record).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

StatusOr<LaunchRecord> ReadLaunchRecord(const std::string& run_dir) {
  const std::string path = LaunchPathFor(run_dir);
  if (!PathExists(path)) {
    return Status::NotFound(run_dir + ": no " + kLaunchFileName +
                            ": the run does not say how to run it again (recorded by a program that "
                            "opened its session before dgrr kept launch records, or not a run directory)");
  }
  DGRR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxLaunchBytes));
  DGRR_ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, path));
  if (!doc.is_object()) return Status::Corruption(path + ": not a JSON object");
  JsonObjectReader r(doc, path);
  DGRR_ASSIGN_OR_RETURN(std::string schema, r.String("schema"));
  if (schema != kLaunchSchema && schema != kLaunchSchemaV1) {
    return r.Error("schema", "'" + schema + "' is not " + kLaunchSchema + " (or " + kLaunchSchemaV1 + ")");
  }
  LaunchRecord out;
  DGRR_ASSIGN_OR_RETURN(const nlohmann::json* argv, r.Array("argv"));
  if (argv->empty()) return r.Error("argv", "must name the program");
  for (const auto& a : *argv) {
    if (!a.is_string()) return r.Error("argv", "expected strings");
    out.argv.push_back(a.get<std::string>());
  }
  DGRR_ASSIGN_OR_RETURN(out.working_directory, r.String("working_directory"));
  DGRR_ASSIGN_OR_RETURN(out.executable, r.String("executable"));
  DGRR_ASSIGN_OR_RETURN(out.executable_xxh3, r.Hex64("executable_xxh3"));
  if (doc.contains("script")) {
    DGRR_ASSIGN_OR_RETURN(out.script, r.String("script"));
    DGRR_ASSIGN_OR_RETURN(out.script_xxh3, r.Hex64("script_xxh3"));
  }
  DGRR_ASSIGN_OR_RETURN(JsonObjectReader env, r.Object("environment"));
  for (auto it = doc["environment"].begin(); it != doc["environment"].end(); ++it) {
    if (!it.value().is_string()) return env.Error(it.key(), "expected a string");
    out.environment.emplace_back(it.key(), it.value().get<std::string>());
  }
  const bool v2 = schema == kLaunchSchema;
  if (v2 && doc.contains("launcher")) {
    DGRR_ASSIGN_OR_RETURN(JsonObjectReader l, r.Object("launcher"));
    DGRR_ASSIGN_OR_RETURN(out.launcher.name, l.String("name"));
    if (out.launcher.name != kTorchrunLauncher) {
      return l.Error("name", "'" + out.launcher.name + "' is not a launcher dgrr knows (torchrun)");
    }
    DGRR_ASSIGN_OR_RETURN(const int64_t nproc, l.Int("nproc_per_node", 1, 1 << 20));
    DGRR_ASSIGN_OR_RETURN(const int64_t nnodes, l.Int("nnodes", 0, 1 << 20));
    out.launcher.nproc_per_node = static_cast<int>(nproc);
    out.launcher.nnodes = static_cast<int>(nnodes);
    for (auto it = doc["launcher"].begin(); it != doc["launcher"].end(); ++it) {
      if (it.key() != "name" && it.key() != "nproc_per_node" && it.key() != "nnodes") {
        return l.Error(it.key(), std::string("is not part of ") + kLaunchSchema);
      }
    }
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    static const char* const kKnown[] = {"schema", "argv", "working_directory", "executable",
                                         "executable_xxh3", "script", "script_xxh3", "environment", "launcher"};
    if ((it.key() == "launcher" && !v2) ||
        std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return it.key() == k; }) ==
            std::end(kKnown)) {
      return r.Error(it.key(), "is not part of " + schema);
    }
  }
  return out;
}

}  // namespace dgrr
