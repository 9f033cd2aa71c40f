#include "runtime/determinism.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/environment.h"

namespace dgrr {
namespace {

class RealEnvironment final : public ProcessEnvironment {
 public:
  std::optional<std::string> Get(const std::string& name) const override { return GetEnv(name.c_str()); }
  void Set(const std::string& name, const std::string& value) override { SetEnvIfUnset(name, value); }
  std::optional<std::string> ReadTextFile(const std::string& path) const override {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

std::string Upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// The NCCL config files in the order NCCL consults them: the user's file
// ($NCCL_CONF_FILE, else ~/.nccl.conf) wins over the system-wide one.
struct ConfFile {
  std::string path;
  std::vector<std::pair<std::string, std::string>> values;
};

std::vector<ConfFile> LoadNcclConfFiles(const ProcessEnvironment& env) {
  std::vector<std::string> paths;
  if (auto conf = env.Get("NCCL_CONF_FILE"); conf && !conf->empty()) {
    paths.push_back(*conf);
  } else if (auto home = env.Get("HOME"); home && !home->empty()) {
    paths.push_back(*home + "/.nccl.conf");
  }
  paths.push_back("/etc/nccl.conf");
  std::vector<ConfFile> files;
  for (const auto& path : paths) {
    if (auto text = env.ReadTextFile(path)) files.push_back({path, ParseNcclConf(*text)});
  }
  return files;
}

// What the user chose for `name`, if anything, and where.
struct Found {
  std::string value;
  ControlOrigin origin;
  std::string source;
};
std::optional<Found> Lookup(const std::string& name, const ProcessEnvironment& env,
                            const std::vector<ConfFile>& confs) {
  if (auto v = env.Get(name); v && !env.WasSetByDgrr(name, *v)) {
    return Found{*v, ControlOrigin::kEnvironment, ""};
  }
  for (const auto& conf : confs) {
    for (const auto& [k, v] : conf.values) {
      if (k == name) return Found{v, ControlOrigin::kNcclConfFile, conf.path};
    }
  }
  return std::nullopt;
}

// Why `value` of a pinned control endangers reproducibility ("" when it does not).
std::string PinnedValueWarning(const std::string& name, const std::string& value) {
  const std::string v = Upper(Trim(value));
  if (name == "NCCL_ALGO" && v != "RING") {
    return "NCCL_ALGO=" + value +
           " lets NCCL pick algorithms other than Ring (Tree, CollNet, NVLS, PAT sum in a "
           "topology-dependent order); bitwise reproducibility needs NCCL_ALGO=Ring";
  }
  if (name == "NCCL_PROTO" && v != "SIMPLE") {
    return "NCCL_PROTO=" + value +
           " allows protocols whose choice varies with message size and tuning; dgrr pins Simple";
  }
  if ((name == "NCCL_NVLS_ENABLE" || name == "NCCL_COLLNET_ENABLE") && v != "0") {
    return name + "=" + value +
           " enables in-switch reductions whose order dgrr cannot control; set it to 0";
  }
  if (name == "CUBLAS_WORKSPACE_CONFIG" && v != ":4096:8" && v != ":16:8") {
    return "CUBLAS_WORKSPACE_CONFIG=" + value +
           " is not one of cuBLAS's documented deterministic settings (:4096:8 or :16:8)";
  }
  return "";
}

}  // namespace

ProcessEnvironment& RealProcessEnvironment() {
  static RealEnvironment env;
  return env;
}

void ProcessEnvironment::NoteSetByDgrr(const std::string& name, const std::string& value) {
  std::lock_guard<std::mutex> lock(set_by_dgrr_mu_);
  set_by_dgrr_[name] = value;
}

bool ProcessEnvironment::WasSetByDgrr(const std::string& name, const std::string& value) const {
  std::lock_guard<std::mutex> lock(set_by_dgrr_mu_);
  auto it = set_by_dgrr_.find(name);
  return it != set_by_dgrr_.end() && it->second == value;
}

const char* ControlOriginName(ControlOrigin origin) {
  switch (origin) {
    case ControlOrigin::kEnvironment: return "environment";
    case ControlOrigin::kNcclConfFile: return "nccl.conf";
    case ControlOrigin::kDgrrDefault: return "dgrr default";
    case ControlOrigin::kSession: return "session option";
    case ControlOrigin::kNotApplicable: return "not applicable";
  }
  return "unknown";
}

std::vector<std::pair<std::string, std::string>> ParseNcclConf(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    out.emplace_back(Trim(line.substr(0, eq)), Trim(line.substr(eq + 1)));
  }
  return out;
}

const std::vector<std::string>& RecordedNcclSettings() {
  static const std::vector<std::string> names = {
      "NCCL_PAT_ENABLE",  "NCCL_NTHREADS",    "NCCL_BUFFSIZE",     "NCCL_CHUNK_SIZE",
      "NCCL_TOPO_FILE",   "NCCL_GRAPH_FILE",  "NCCL_TUNER_PLUGIN", "NCCL_NET_PLUGIN",
      "NCCL_ENV_PLUGIN",  "NCCL_CONF_FILE",   "NCCL_P2P_LEVEL",    "NCCL_IB_DISABLE",
      "NVIDIA_TF32_OVERRIDE",
  };
  return names;
}

StatusOr<DeterminismControls> DeterminismControls::Apply(const DeterminismOptions& options,
                                                         ProcessEnvironment& env) {
  if (options.threads < 1) {
    return Status::InvalidArgument("thread count must be at least 1, got " +
                                   std::to_string(options.threads));
  }
  if (options.nccl_channels < 1) {
    return Status::InvalidArgument("NCCL channel count must be at least 1");
  }
  DeterminismControls controls;
  auto& out = controls.settings_;
  out.push_back({"dgrr.threads", std::to_string(options.threads), ControlOrigin::kSession, "", ""});

  const std::vector<ConfFile> confs = LoadNcclConfFiles(env);
  auto pin = [&](const std::string& name, const std::string& dgrr_value) {
    if (!options.gpu) {
      out.push_back({name, "", ControlOrigin::kNotApplicable, "", ""});
      return;
    }
    if (auto found = Lookup(name, env, confs)) {
      out.push_back({name, found->value, found->origin, found->source,
                     PinnedValueWarning(name, found->value)});
      return;
    }
    // Unset, or set by an earlier session of this process (Lookup skips those).
    if (auto earlier = env.Get(name)) {
      std::string warning;
      if (*earlier != dgrr_value) {
        warning = name + "=" + *earlier + " was set by an earlier dgrr session of this process; this "
                  "session would have set " + dgrr_value;
      }
      out.push_back({name, *earlier, ControlOrigin::kDgrrDefault, "", warning});
      return;
    }
    env.Set(name, dgrr_value);
    env.NoteSetByDgrr(name, dgrr_value);
    out.push_back({name, dgrr_value, ControlOrigin::kDgrrDefault, "", ""});
  };

  pin("NCCL_ALGO", "Ring");
  pin("NCCL_PROTO", "Simple");
  // A fixed channel count: when the user bounded one side, the other follows it.
  auto min_ch = Lookup("NCCL_MIN_NCHANNELS", env, confs);
  auto max_ch = Lookup("NCCL_MAX_NCHANNELS", env, confs);
  std::string channels = std::to_string(options.nccl_channels);
  if (min_ch && !max_ch) channels = min_ch->value;
  if (max_ch && !min_ch) channels = max_ch->value;
  pin("NCCL_MIN_NCHANNELS", channels);
  pin("NCCL_MAX_NCHANNELS", channels);
  if (options.gpu) {
    const ControlSetting* lo = controls.Find("NCCL_MIN_NCHANNELS");
    ControlSetting* hi = &out.back();
    if (Trim(lo->value) != Trim(hi->value)) {
      hi->warning = "NCCL_MIN_NCHANNELS=" + lo->value + " differs from NCCL_MAX_NCHANNELS=" +
                    hi->value + ": the channel count, and with it the reduction order, may vary";
    }
  }
  pin("NCCL_NVLS_ENABLE", "0");
  pin("NCCL_COLLNET_ENABLE", "0");
  pin("CUBLAS_WORKSPACE_CONFIG", ":4096:8");

  for (const auto& name : RecordedNcclSettings()) {
    if (auto found = Lookup(name, env, confs)) {
      std::string warning;
      if (name == "NVIDIA_TF32_OVERRIDE" && Trim(found->value) != "0") {
        warning = "NVIDIA_TF32_OVERRIDE=" + found->value + " can force TF32 math on; set it to 0";
      }
      out.push_back({name, found->value, found->origin, found->source, warning});
    }
  }
  return controls;
}

std::vector<std::string> DeterminismControls::Warnings() const {
  std::vector<std::string> warnings;
  for (const auto& s : settings_) {
    if (!s.warning.empty()) warnings.push_back(s.warning);
  }
  return warnings;
}

const ControlSetting* DeterminismControls::Find(const std::string& name) const {
  for (const auto& s : settings_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace dgrr
