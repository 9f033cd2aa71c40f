// dgrr env: print the environment fingerprint of this machine and build.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <system_error>

#include "base/coding.h"
#include "base/environment.h"
#include "base/version.h"
#include "cli/command.h"
#include "fingerprint/fingerprint.h"
#include "model/matmul.h"
#include "model/trainer.h"
#include "rng/philox_fill.h"
#include "runtime/environment.h"
#include "trace_format/boundary_scan.h"
#include "trace_format/crc32c.h"

namespace dgrr::cli {
namespace {

void PrintHuman(const nlohmann::json& env, uint64_t digest) {
  const auto& d = env["dgrr"];
  std::cout << "dgrr " << d["version"].get<std::string>() << " (commit "
            << d["git_commit"].get<std::string>() << ", " << d["build_type"].get<std::string>()
            << (d["cuda_build"].get<bool>() ? ", CUDA" : ", CPU-only") << ")\n"
            << "compiler: " << env["compiler"]["id"].get<std::string>() << "\n"
            << "flags:    " << env["compiler"]["cxx_flags"].get<std::string>() << "\n"
            << "cpu:      " << env["host"]["cpu_model"].get<std::string>() << " ("
            << env["host"]["hardware_threads"] << " hardware threads)\n"
            << "os:       " << env["host"]["os"].get<std::string>() << "\n";
  const auto& gpu = env["gpu"];
  if (gpu["available"].get<bool>()) {
    std::cout << "gpu:      " << gpu["name"].get<std::string>() << ", " << gpu["sm_count"]
              << " SMs, sm_" << gpu["compute_capability"] << ", CUDA runtime "
              << gpu["cuda_runtime_version"] << ", driver " << gpu["cuda_driver_version"] << "\n";
  } else {
    std::cout << "gpu:      none (" << gpu["reason"].get<std::string>() << ")\n";
  }
  if (gpu.contains("cublas_version")) {
    std::cout << "cublas:   " << gpu["cublas_version"].get<std::string>() << "\n";
  }
  if (gpu.contains("nccl_version")) {
    std::cout << "nccl:     " << gpu["nccl_version"].get<std::string>() << "\n";
  }
  std::cout << "controls:\n";
  for (const auto& c : env["controls"]) {
    std::string origin = c["origin"].get<std::string>();
    if (c.contains("source")) origin += " (" + c["source"].get<std::string>() + ")";
    std::cout << "  " << std::left << std::setw(26) << c["name"].get<std::string>()
              << std::setw(12) << c["value"].get<std::string>() << origin << "\n";
  }
  std::cout << "digest:   " << Hex64(digest) << "\n";
}

// The kernels this process dispatches to on this CPU, under DGRR_MAX_ISA
// (base/cpu_isa.h). Not part of the fingerprint: every choice gives the
// same bits, so two machines that differ only here record equal runs.
void PrintKernels() {
  const std::string cap = GetEnvOrEmpty("DGRR_MAX_ISA");
  std::cout << "kernels (same bits on every choice; DGRR_MAX_ISA caps them: "
            << (cap.empty() ? "unset" : cap) << "):\n"
            << "  model products and layers: " << model::GemmIsaName(model::BestGemmIsa()) << "\n"
            << "  fingerprint stripes:       " << FingerprintKernelName() << "\n"
            << "  trace CRC32C blocks:       " << crc32c::BlockKernelName(crc32c::SelectedBlockKernel()) << "\n"
            << "  trace record scan:         " << trace::ScanKernelName(trace::SelectedScanKernel()) << "\n"
            << "  Philox fills:              " << rng::FillKernelName(rng::BestFillKernel()) << "\n";
}

// Where the zstd HDF5 plugin is, so h5dump and h5py read dgrr's compressed
// datasets (docs/install.md). The installed copy is found next to this
// binary's prefix (bin/../lib/dgrr/hdf5-plugins), so a moved prefix still
// works; the build tree's copy is where checkpoint/plugin builds it.
void PrintHdf5Plugin() {
  namespace fs = std::filesystem;
  auto has_plugin = [](const fs::path& dir) {
    std::error_code ec;
    return !dir.empty() && fs::is_regular_file(dir / DGRR_HDF5_PLUGIN_FILE, ec);
  };
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  fs::path installed = fs::path(DGRR_INSTALLED_HDF5_PLUGIN_DIR);
  if (!ec) {
    const fs::path beside = (exe.parent_path() / DGRR_BIN_TO_HDF5_PLUGIN_DIR).lexically_normal();
    if (has_plugin(beside)) installed = beside;
  }
  const fs::path build_tree = fs::path(DGRR_BUILD_HDF5_PLUGIN_DIR);
  std::cout << "hdf5 plugin (zstd filter 32015; h5dump, h5py read checkpoints through it):\n"
            << "  installed:  " << installed.string()
            << (has_plugin(installed) ? "" : "  (not installed)") << "\n";
  if (!build_tree.empty()) {
    std::cout << "  build tree: " << build_tree.string()
              << (has_plugin(build_tree) ? "" : "  (not built)") << "\n";
  }
  // The copy this binary belongs to: installed when it runs from the prefix.
  fs::path use = installed;
  if (!has_plugin(installed) && has_plugin(build_tree)) use = build_tree;
  std::cout << "  export HDF5_PLUGIN_PATH=" << use.string() << "\n";
}

int RunEnv(const std::vector<std::string>& args) {
  po::options_description options("Options");
  options.add_options()("json", "print the fingerprint as JSON (schema dgrr.env/1, docs/environment.md)")(
      "threads", po::value<int>()->default_value(1), "worker threads per rank to record");
  po::positional_options_description positional;
  po::variables_map vm;
  int rc = ParseCommandLine(
      "env", "dgrr env [--json] [--threads N]",
      "Prints the environment fingerprint of this machine and build: dgrr version and commit,\n"
      "compiler and flags, CPU, GPU, CUDA/cuBLAS/NCCL versions, and every determinism control\n"
      "(NCCL algorithm, protocol, channels, cuBLAS workspace, ...) with the origin of its value.\n"
      "A warning names each setting that endangers bitwise reproducibility. Then the vector\n"
      "kernels this CPU runs (DGRR_MAX_ISA=avx2 or sse2 caps them; the bits never change), and\n"
      "last where the zstd HDF5 plugin is (installed and in this build tree) and the\n"
      "HDF5_PLUGIN_PATH to export so h5dump and h5py read dgrr checkpoints (docs/install.md).",
      options, positional, args, vm);
  if (rc >= 0) return rc;

  DeterminismOptions opts;
  opts.threads = vm["threads"].as<int>();
  if (opts.threads < 1 || opts.threads > model::kMaxThreads) {
    return ReportError("env", Status::InvalidArgument("--threads must be in [1, " +
                                                      std::to_string(model::kMaxThreads) + "], got " +
                                                      std::to_string(opts.threads)));
  }
  opts.gpu = DGRR_HAVE_CUDA_BUILD != 0;
  auto controls = DeterminismControls::Apply(opts, RealProcessEnvironment());
  if (!controls.ok()) return ReportError("env", controls.status());
  nlohmann::json env = CollectEnvironment(*controls);
  uint64_t digest = EnvironmentDigest(env);
  if (vm.count("json")) {
    env["digest"] = Hex64(digest);
    std::cout << env.dump(2) << "\n";
  } else {
    PrintHuman(env, digest);
    PrintKernels();
    PrintHdf5Plugin();
  }
  for (const auto& w : controls->Warnings()) ReportWarning("env", w);
  return kExitOk;
}

}  // namespace

// Reads no trace, checkpoint or run file, and compares nothing.
DGRR_COMMAND(env, "print this machine's environment fingerprint and determinism controls", RunEnv, kExitOk,
             kExitUsage, kExitIO);

}  // namespace dgrr::cli
