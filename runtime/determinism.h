// Determinism controls: the settings that decide reduction order and kernel
// choice, applied before any work starts and recorded with where each value
// came from.
//
// Following NCCL's own parameter discipline, every control is a named setting
// read once, with its origin (process environment, an NCCL config file, or
// dgrr's default). A value the user set is respected, never overwritten; a value
// known to break bitwise reproducibility gives a warning that names it.
#pragma once

#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace dgrr {

// Where a control's value came from.
enum class ControlOrigin {
  kEnvironment,   // the process environment, set before dgrr started
  kNcclConfFile,  // $NCCL_CONF_FILE, ~/.nccl.conf or /etc/nccl.conf (NCCL applies it itself)
  kDgrrDefault,   // dgrr set it because nothing else did
  kSession,       // an option given to the session (e.g. the thread count)
  kNotApplicable, // not used by this build (GPU controls in a CPU-only build)
};
const char* ControlOriginName(ControlOrigin origin);

struct ControlSetting {
  std::string name;       // "NCCL_ALGO", "dgrr.threads", ...
  std::string value;      // as in effect ("" when unset and not applicable)
  ControlOrigin origin;
  std::string source;     // for kNcclConfFile: the file's path
  std::string warning;    // non-empty when the value endangers bitwise reproducibility
};

// Access to the process environment and the config files NCCL reads, behind an
// interface so tests can run without touching the real environment.
class ProcessEnvironment {
 public:
  virtual ~ProcessEnvironment() = default;
  virtual std::optional<std::string> Get(const std::string& name) const = 0;
  virtual void Set(const std::string& name, const std::string& value) = 0;
  virtual std::optional<std::string> ReadTextFile(const std::string& path) const = 0;

  // What dgrr itself set in this environment: a later session of the same
  // process (replay, bisect, tests) must record such a value as dgrr's
  // default, not as the user's choice, or two identical runs would differ in
  // their environment fingerprints by the order they ran in.
  void NoteSetByDgrr(const std::string& name, const std::string& value);
  bool WasSetByDgrr(const std::string& name, const std::string& value) const;

 private:
  mutable std::mutex set_by_dgrr_mu_;
  std::map<std::string, std::string> set_by_dgrr_;
};
// The real environment (getenv/setenv, the filesystem).
ProcessEnvironment& RealProcessEnvironment();

struct DeterminismOptions {
  int threads = 1;            // worker threads per rank, recorded (results never depend on it)
  bool gpu = false;           // apply the GPU controls (NCCL, cuBLAS)
  int nccl_channels = 4;      // the fixed channel count when the user set neither bound
};

class DeterminismControls {
 public:
  // Reads every control, sets dgrr defaults for the unset GPU ones (through
  // `env`, so NCCL and cuBLAS see them when they initialise later) and records
  // all of them. Must run before NCCL or cuBLAS initialise.
  static StatusOr<DeterminismControls> Apply(const DeterminismOptions& options,
                                             ProcessEnvironment& env);

  const std::vector<ControlSetting>& settings() const { return settings_; }
  // The warnings, one line each, naming the setting and why it is dangerous.
  std::vector<std::string> Warnings() const;
  const ControlSetting* Find(const std::string& name) const;

 private:
  std::vector<ControlSetting> settings_;
};

// The NCCL settings recorded even though dgrr does not pin them: they change
// reduction order or algorithm choice when present (tuning, topology, plugins).
const std::vector<std::string>& RecordedNcclSettings();

// Parses NCCL's config file syntax: NAME=VALUE lines, '#' comments, blanks.
std::vector<std::pair<std::string, std::string>> ParseNcclConf(const std::string& text);

}  // namespace dgrr
