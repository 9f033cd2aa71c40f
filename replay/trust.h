// Whether a run directory's program may be re-executed, and how far its
// launch record is believed (docs/launch-record.md, "Security").
//
// `dgrr replay`, `rollback` and `bisect` start the program a run's
// launch.json names, with the environment it records; whoever wrote the
// record chooses both. As git refuses a repository owned by someone else, the
// re-executor (replay/reexecute.h) starts nothing from a run directory that
// is not the invoking user's own, unless the user trusts it explicitly:
//
//   auto trust = CheckRunTrust("runs/a", /*trust_flag=*/false);
//   if (!trust.ok()) ...   // FailedPrecondition (exit 1): the path, why, and how to trust it
//   trust->level == RunTrust::kOwned     // yours: the program runs, but the variables that
//                                        // name code (LaunchVariableNamesCode) and a
//                                        // script's interpreter come from your environment
//   trust->level == RunTrust::kExplicit  // --trust or listed: the record is taken as written
#pragma once

#include <string>

#include "base/status.h"

namespace dgrr::replay {

enum class RunTrust {
  kOwned,     // the directory and its launch.json are yours and writable by no one else
  kExplicit,  // --trust, or listed in the per-user trusted list
};

struct TrustDecision {
  RunTrust level = RunTrust::kOwned;
  std::string why;  // "owned by you", "--trust", "listed in ~/.config/dgrr/trusted"
};

// The per-user list of trusted paths: $XDG_CONFIG_HOME/dgrr/trusted when
// XDG_CONFIG_HOME is set (absolute), else $HOME/.config/dgrr/trusted; ""
// when neither is known. One absolute path per line (blank lines and lines
// starting with '#' are skipped); a path trusts that directory and every
// directory below it, compared after resolving symbolic links on both
// sides; a line "*" trusts every run.
std::string TrustedListPath();

// Decides whether `run_dir`'s program may be re-executed. With `trust_flag`
// (--trust), or when `run_dir` is listed, kExplicit. Otherwise the run
// directory (its real path) and its launch.json (the file a symbolic link
// names), when there is one, must be owned by the effective user and not
// writable by group or others: kOwned. Root is no exception: a directory
// another user owns is refused for root too. FailedPrecondition (exit 1)
// naming the path, what is wrong and how to trust it; IOError when the
// directory cannot be examined, or when the trusted list is unreadable or
// not safe (not the user's own, or writable by others: it is not used).
StatusOr<TrustDecision> CheckRunTrust(const std::string& run_dir, bool trust_flag);

}  // namespace dgrr::replay
