// The process environment, read and written under one process-wide lock.
//
// glibc's setenv may move the environ array while another thread's getenv
// is walking it (getenv takes no lock), and ranks open their sessions from
// parallel threads: one rank's session setting NCCL_ALGO crashed another's
// read of DGRR_CONTROL (SIGSEGV in getenv, tests/train/kill_resume_test.cc
// under load). So every read and write of the environment in dgrr goes
// through here. Libraries dgrr calls (HDF5, MPI, CUDA) read it without the
// lock; dgrr writes only variables those read when they initialise, and a
// session holds the lock while it writes them (runtime/session.cc).
#pragma once

#include <mutex>
#include <optional>
#include <string>

namespace dgrr {

// Held while touching the environment; recursive, so a holder may call
// GetEnv and SetEnvIfUnset.
std::unique_lock<std::recursive_mutex> LockEnvironment();

// The value of `name`, copied under the lock; nullopt when unset.
std::optional<std::string> GetEnv(const char* name);
// The value of `name`, or "" when it is unset or empty.
std::string GetEnvOrEmpty(const char* name);
// setenv(name, value, 0) under the lock: a value already there stays.
void SetEnvIfUnset(const std::string& name, const std::string& value);

}  // namespace dgrr
