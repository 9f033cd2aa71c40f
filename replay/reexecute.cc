#include "replay/reexecute.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include "base/coding.h"
#include "base/environment.h"
#include "base/file.h"
#include "runtime/control_file_json.h"
#include "runtime/run_directory.h"
#include "trace_format/reader.h"

extern char** environ;

namespace dgrr::replay {
namespace {

// The program runs in its recorded working directory, so every path the
// control file names must not depend on ours.
std::string Absolute(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

Status CheckDigest(const std::string& what, const std::string& path, uint64_t recorded, bool allow) {
  DGRR_ASSIGN_OR_RETURN(uint64_t now, FileContentDigest(path));
  if (now == recorded || allow) return Status::OK();
  return Status::IntegrityFailure(path + ": the " + what + " changed since the recording (digest " +
                                  Hex64(recorded) + ", now " + Hex64(now) +
                                  "); pass --allow-changed-program to replay it anyway");
}

// The caller's environment, by name.
std::map<std::string, std::string> OurEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

// "VALUE" or "unset".
std::string Yours(const std::map<std::string, std::string>& ours, const std::string& name) {
  const auto it = ours.find(name);
  return it == ours.end() ? "unset" : it->second;
}

// A command-line word as a POSIX shell would need it.
std::string ShellWord(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_./=:,+@%-").find(c) != std::string_view::npos;
  });
  if (plain) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// What the child is started with, and the lines that say so.
struct ChildStart {
  std::vector<std::string> environment;  // NAME=VALUE
  std::vector<std::string> set_lines;    // recorded values that differ from the caller's
  std::vector<std::string> kept_lines;   // recorded values not taken (the record is not trusted explicitly)
  bool security_relevant = false;
};

// The child's environment: ours, with the recorded variables set over it
// (but, for a record not trusted explicitly, none that names code: those
// stay ours) and DGRR_CONTROL naming the control file.
ChildStart ChildEnvironment(const LaunchRecord& launch, const std::string& control_path, RunTrust trust) {
  const std::map<std::string, std::string> ours = OurEnvironment();
  std::map<std::string, std::string> env = ours;
  ChildStart start;
  for (const auto& [name, value] : launch.environment) {
    const auto it = ours.find(name);
    const bool differs = it == ours.end() || it->second != value;
    const bool names_code = LaunchVariableNamesCode(name);
    if (names_code && trust != RunTrust::kExplicit) {
      if (differs) start.kept_lines.push_back("    " + name + "=" + value + " (yours: " + Yours(ours, name) + ")");
      continue;
    }
    env[name] = value;
    if (!differs) continue;
    start.set_lines.push_back("    " + name + "=" + value + " (yours: " + Yours(ours, name) + ")");
    if (names_code) start.security_relevant = true;
  }
  env[kControlEnvVar] = control_path;
  start.environment.reserve(env.size());
  for (const auto& [name, value] : env) start.environment.push_back(name + "=" + value);
  return start;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The child being waited for, for the signal handlers (0: none yet), and a
// signal that arrived before it was started.
std::atomic<pid_t> g_child{0};
std::atomic<int> g_pending_signal{0};

void ForwardSignal(int signo) {
  g_pending_signal.store(signo);
  const pid_t child = g_child.load();
  if (child > 0) ::kill(child, signo);
}

// Forwards SIGINT/SIGTERM to the child for this object's lifetime. Installed
// before the child starts, so no signal falls between its start and the wait;
// one that arrives before Attach is delivered by it.
class SignalForwarding {
 public:
  SignalForwarding() {
    g_child.store(0);
    g_pending_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = ForwardSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  void Attach(pid_t child) {
    g_child.store(child);
    if (const int pending = g_pending_signal.exchange(0); pending != 0) ::kill(child, pending);
  }
  ~SignalForwarding() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    g_child.store(0);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// Copies the program's output into the log, line by line to `output`.
class OutputSink {
 public:
  OutputSink(WritableFile* log, const std::function<void(const std::string&)>& output)
      : log_(log), output_(output) {}
  Status Add(const char* data, size_t n) {
    DGRR_RETURN_IF_ERROR(log_->Append(data, n));
    if (!output_) return Status::OK();
    partial_.append(data, n);
    for (size_t nl; (nl = partial_.find('\n')) != std::string::npos;) {
      output_(partial_.substr(0, nl));
      partial_.erase(0, nl + 1);
    }
    return Status::OK();
  }
  void Finish() {
    if (output_ && !partial_.empty()) output_(partial_);
    partial_.clear();
  }

 private:
  WritableFile* log_;
  const std::function<void(const std::string&)>& output_;
  std::string partial_;
};

struct Launched {
  pid_t pid = -1;
  int output_fd = -1;  // read end of the program's stdout+stderr
};

// Forks and execs the recorded program. Everything the child touches is
// prepared before the fork (only async-signal-safe calls after it); an exec
// failure comes back through a close-on-exec pipe.
StatusOr<Launched> Spawn(const LaunchRecord& launch, const std::vector<std::string>& environment) {
  std::vector<std::string> argv_storage = launch.argv, env_storage = environment;
  std::vector<char*> argv = CStrings(argv_storage), envp = CStrings(env_storage);
  const std::string& exe = launch.executable;
  const std::string& cwd = launch.working_directory;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return Status::FromErrno("pipe", "program output", errno);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return Status::FromErrno("pipe", "exec status", e);
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return Status::FromErrno("fork", exe, e);
  }
  if (pid == 0) {
    // Its own process group: a terminal's Ctrl-C reaches dgrr, which
    // forwards it once, instead of reaching both.
    ::setpgid(0, 0);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(out_pipe[1], 2);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGINT, &dfl, nullptr);
    ::sigaction(SIGTERM, &dfl, nullptr);
    ::sigaction(SIGPIPE, &dfl, nullptr);
    int stage = 0;  // 0: chdir failed, 1: exec failed
    if (::chdir(cwd.c_str()) == 0) {
      stage = 1;
      ::execve(exe.c_str(), argv.data(), envp.data());
    }
    const int report[2] = {stage, errno};
    ssize_t ignored = ::write(err_pipe[1], report, sizeof report);
    (void)ignored;
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  int report[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(err_pipe[0], report, sizeof report);
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof report)) {
    ::close(out_pipe[0]);
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return report[0] == 0 ? Status::FromErrno("chdir", cwd + " (the recorded working directory)", report[1])
                          : Status::FromErrno("exec", exe, report[1]);
  }
  return Launched{pid, out_pipe[0]};
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

// Copies the program's output until it exits and returns its exit code. The
// child is reaped even when a descendant keeps the output pipe open: after
// it exits, whatever is buffered is drained and the pipe is let go.
StatusOr<int> CollectAndWait(const Launched& child, OutputSink& sink) {
  Status copy = Status::OK();
  std::optional<int> exit_status;
  char buffer[1 << 14];
  bool open = true;
  while (open) {
    struct pollfd p {child.output_fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, exit_status ? 0 : 200);
    if (ready < 0 && errno != EINTR) break;
    if (ready > 0) {
      const ssize_t n = ::read(child.output_fd, buffer, sizeof buffer);
      if (n > 0) {
        if (copy.ok()) copy = sink.Add(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) open = false;
      continue;
    }
    if (exit_status) break;  // exited, and nothing more is buffered
    int status;
    const pid_t w = ::waitpid(child.pid, &status, WNOHANG);
    if (w == child.pid) exit_status = status;
  }
  ::close(child.output_fd);
  if (!exit_status) {
    int status = 0;
    while (::waitpid(child.pid, &status, 0) < 0) {
      if (errno != EINTR) return Status::FromErrno("waitpid", "the replayed program", errno);
    }
    exit_status = status;
  }
  sink.Finish();
  DGRR_RETURN_IF_ERROR(copy);
  return ExitCodeOf(*exit_status);
}

std::string LastLogLine(const std::string& log_path) {
  auto text = ReadFileToString(log_path, 64 << 20);
  if (!text.ok()) return "";
  std::string s = *text;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  const size_t nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

bool Earlier(const ControlMismatch& a, const ControlMismatch& b) {
  return a.step != b.step ? a.step < b.step : a.rank < b.rank;
}

// Reads every rank's result into `result`; an error for a rank that did not
// report a finished execution (unless another rank's mismatch explains it).
Status CollectResults(int world_size, ReexecuteResult& result) {
  std::vector<std::string> problems;
  const std::string exit_text = "the program exited with code " + std::to_string(result.exit_code);
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string path = ControlResultPath(result.out_dir, rank);
    ControlResult r;
    r.rank = rank;
    if (!PathExists(path)) {
      const std::string last = LastLogLine(result.log_path);
      problems.push_back("rank " + std::to_string(rank) + " reported no result (" + exit_text + ")" +
                         (last.empty() ? "" : ": " + last));
      result.ranks.push_back(r);
      continue;
    }
    auto read = ReadControlResult(path);
    if (!read.ok()) {
      problems.push_back("rank " + std::to_string(rank) + ": " + read.status().message() + " (" + exit_text + ")");
      result.ranks.push_back(r);
      continue;
    }
    r = std::move(read).value();
    result.boundaries_verified += r.boundaries_verified;
    result.steps_verified += r.steps_verified;
    if (r.outcome == ControlOutcome::kMismatch && r.mismatch) {
      if (!result.mismatch || Earlier(*r.mismatch, *result.mismatch)) result.mismatch = r.mismatch;
    } else if (r.outcome == ControlOutcome::kRunning) {
      const std::string last = LastLogLine(result.log_path);
      problems.push_back("rank " + std::to_string(rank) + " did not finish (" + exit_text + ")" +
                         (last.empty() ? "" : ": " + last));
    } else if (r.outcome == ControlOutcome::kFailed || r.outcome == ControlOutcome::kMismatch) {
      const std::string why = r.message.empty() ? LastLogLine(result.log_path) : r.message;
      problems.push_back("rank " + std::to_string(rank) + " failed (" + exit_text + ")" +
                         (why.empty() ? "" : ": " + why));
    }
    result.ranks.push_back(std::move(r));
  }
  // A rank that stops at a mismatch takes its peers down with it: the
  // mismatch is the finding, their failures its consequence.
  if (result.mismatch || problems.empty()) return Status::OK();
  // The program's own divergence check, or a request it refused: said as such.
  for (const ControlResult& r : result.ranks) {
    if (r.outcome != ControlOutcome::kFailed || !r.failure_code) continue;
    const std::string where = "the replayed program, rank " + std::to_string(r.rank) + ": " + r.message;
    if (*r.failure_code == StatusCode::kDivergence) return Status::Divergence(where);
    if (*r.failure_code == StatusCode::kInvalidArgument) return Status::InvalidArgument(where);
    // A damaged checkpoint or run file the program refused (it names file and offset).
    if (*r.failure_code == StatusCode::kCorruption) return Status::Corruption(where);
  }
  return Status::IntegrityFailure("the replayed program did not complete: " + problems.front() +
                                  (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) +
                                                             " more rank" + (problems.size() > 2 ? "s" : "") + ")"
                                                       : ""));
}

// `name` found in a directory of PATH, as an absolute path; NotFound otherwise.
StatusOr<std::string> FindOnPath(const std::string& name) {
  const std::string dirs = GetEnvOrEmpty("PATH");
  for (size_t begin = 0; begin <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::string dir = dirs.substr(begin, end - begin);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return Absolute(candidate);
    begin = end + 1;
  }
  return Status::NotFound(name + " is not on PATH");
}

// What to start for `launch`: the program itself, or, when an MPI launcher
// started it (one rank of a job), Open MPI's mpirun with the recorded number
// of processes, the recorded executable and its arguments. The variables the
// launcher set for the recorded job are left out (mpirun sets its own for
// the new one: IsMpiJobVariable); as root, Open
// MPI is told that this is meant (as the tests and CI run it); on a machine
// with fewer cores than ranks the job is oversubscribed, which changes no bit.
StatusOr<LaunchRecord> MpiJobOf(const std::string& run_dir, const LaunchRecord& launch, int world_size) {
  const auto* mpi = MpiLauncherVariable(launch);
  if (mpi == nullptr || !launch.launcher.name.empty()) return launch;  // torchrun's job: TorchrunJobOf
  auto mpirun = FindOnPath("mpirun");
  if (!mpirun.ok()) {
    return Status::FailedPrecondition(run_dir + ": the program ran as " + std::to_string(world_size) +
                                      " rank(s) started by an MPI launcher (" + mpi->first + "=" + mpi->second +
                                      " in launch.json), and " + mpirun.status().message() +
                                      " to start the job again");
  }
  LaunchRecord job = launch;
  job.executable = *mpirun;
  job.argv = {*mpirun, "--oversubscribe", "-np", std::to_string(world_size), launch.executable};
  job.argv.insert(job.argv.end(), launch.argv.begin() + (launch.argv.empty() ? 0 : 1), launch.argv.end());
  std::erase_if(job.environment, [](const auto& v) { return IsMpiJobVariable(v.first); });
  if (::geteuid() == 0) {
    job.environment.emplace_back("OMPI_ALLOW_RUN_AS_ROOT", "1");
    job.environment.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }
  return job;
}

// What to start for a worker of a torchrun job (launch.launcher): torchrun
// again, as `INTERPRETER -m torch.distributed.run --standalone --nnodes 1
// --nproc-per-node N --max-restarts 0 SCRIPT ARGS...`, with the interpreter
// the worker ran under (already the one from the caller's PATH unless the run
// is trusted explicitly, and digest-checked like any executable), so torchrun
// is that interpreter's own. --standalone: a fresh rendezvous on a free local
// port (the recorded job's endpoint may be taken; where the processes meet
// changes no bit). --max-restarts 0: a re-execution that fails is a finding,
// not something to retry. torchrun starts each worker as `INTERPRETER -u
// SCRIPT ARGS` (or `-u -m MODULE ARGS`), which is what the record's argv holds.
StatusOr<LaunchRecord> TorchrunJobOf(const std::string& run_dir, const LaunchRecord& launch, int world_size) {
  if (launch.launcher.name != kTorchrunLauncher) return launch;
  const LaunchRecord::Launcher& l = launch.launcher;
  if (l.nnodes != 1) {
    return Status::FailedPrecondition(
        run_dir + ": the program ran as a torchrun job on " +
        (l.nnodes == 0 ? std::string("nodes of unequal sizes") : std::to_string(l.nnodes) + " nodes") +
        " (launch.json's launcher); dgrr re-executes single-node torchrun jobs only");
  }
  if (l.nproc_per_node != world_size) {
    return Status::Corruption(LaunchPathFor(run_dir) + ": launcher: nproc_per_node " +
                              std::to_string(l.nproc_per_node) + " differs from the traces' world size " +
                              std::to_string(world_size));
  }
  if (launch.argv.size() < 3 || launch.argv[1] != "-u" ||
      (launch.argv[2] == "-m" ? launch.argv.size() < 4 : launch.argv[2].rfind('-', 0) == 0)) {
    return Status::FailedPrecondition(run_dir + ": the program ran under torchrun, but its recorded command line (" +
                                      (launch.argv.empty() ? std::string() : launch.argv[0]) +
                                      " ...) is not the `PYTHON -u SCRIPT ARGS` torchrun starts a worker with; "
                                      "dgrr cannot start that job again");
  }
  LaunchRecord job = launch;
  job.argv = {launch.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
              "--nproc-per-node", std::to_string(world_size), "--max-restarts", "0"};
  job.argv.insert(job.argv.end(), launch.argv.begin() + 2, launch.argv.end());
  return job;
}

// A record not trusted explicitly does not choose a script's interpreter:
// the one its argv[0] names (by file name) is looked up on the caller's PATH
// and replaces the recorded executable and argv[0]; its digest is then
// checked against the recorded one like any executable's.
StatusOr<LaunchRecord> InterpreterFromOurPath(const std::string& run_dir, const LaunchRecord& launch,
                                              std::string* note) {
  const std::string named = launch.argv.empty() ? launch.executable : launch.argv[0];
  const std::string name = std::filesystem::path(named).filename().string();
  auto found = name.empty() ? StatusOr<std::string>(Status::NotFound("no name")) : FindOnPath(name);
  if (!found.ok()) {
    return Status::FailedPrecondition(
        run_dir + ": not starting its recorded program: its interpreter '" + (name.empty() ? named : name) +
        "' is not on your PATH (a run not trusted explicitly does not choose the interpreter; it recorded " +
        launch.executable + "); put one on PATH, or pass --trust (docs/launch-record.md, Security)");
  }
  LaunchRecord out = launch;
  out.executable = *found;
  if (out.argv.empty()) out.argv.push_back(*found);
  else out.argv[0] = *found;
  if (*found != launch.executable || named != *found) {
    *note = "  interpreter: " + *found + ", from your PATH (the record names " + named +
            (named == launch.executable ? std::string() : ", " + launch.executable) + ")";
  }
  return out;
}

// What a run directory holds, to tell afterwards whether the re-executed
// program changed it: every regular file and symlink below it (but `skip`,
// the re-execution's own directory when it lies inside) by its path, with
// size, modification time and inode. A re-executed program must write only
// where its control file says (`session.run_dir`); a script that writes its
// own files into the directory its command line names (a replay of a script
// overwrote the original run's own ckpt.pt) is caught here. At most
// kMaxSnapshotEntries entries: beyond that the check is not made.
struct DirEntryState {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  bool operator==(const DirEntryState&) const = default;
};
using DirSnapshot = std::map<std::string, DirEntryState>;
constexpr size_t kMaxSnapshotEntries = 200000;

std::optional<DirSnapshot> SnapshotRunDir(const std::string& run_dir, const std::string& skip) {
  namespace fs = std::filesystem;
  DirSnapshot snapshot;
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(run_dir, ec);
  const fs::path skipped = fs::weakly_canonical(skip, ec);
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) return std::nullopt;
  for (; it != end; it.increment(ec)) {
    if (ec) return std::nullopt;
    if (it->path() == skipped) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
    if (snapshot.size() >= kMaxSnapshotEntries) return std::nullopt;
    snapshot[it->path().lexically_relative(root).string()] = {
        static_cast<uint64_t>(st.st_size), int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
        static_cast<uint64_t>(st.st_ino)};
  }
  return snapshot;
}

Status CheckRunDirUnchanged(const std::string& run_dir, const DirSnapshot& before, const std::string& skip) {
  std::optional<DirSnapshot> after = SnapshotRunDir(run_dir, skip);
  if (!after) return Status::OK();
  std::vector<std::string> changes;
  for (const auto& [path, state] : before) {
    auto it = after->find(path);
    if (it == after->end()) {
      changes.push_back(path + " (removed)");
    } else if (!(it->second == state)) {
      changes.push_back(path + " (modified)");
    }
  }
  for (const auto& [path, state] : *after) {
    if (!before.count(path)) changes.push_back(path + " (added)");
  }
  if (changes.empty()) return Status::OK();
  std::string named;
  for (size_t i = 0; i < changes.size() && i < 5; ++i) named += (i ? ", " : "") + changes[i];
  if (changes.size() > 5) named += " and " + std::to_string(changes.size() - 5) + " more";
  return Status::IntegrityFailure(
      "the re-executed program changed the run it replays, " + run_dir + ": " + named +
      "; under a control file a program must write only below its session's run_dir "
      "(docs/control-file.md; Python: session.run_dir, docs/python.md)");
}

}  // namespace

StatusOr<int> RecordedWorldSize(const std::string& run_dir) {
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(TracePathFor(run_dir, 0)));
  const uint32_t world = reader->header().world_size;
  if (world == 0 || world > (1u << 20)) {
    return Status::Corruption(reader->path() + ": header: world_size " + std::to_string(world) +
                              " is not a number of ranks");
  }
  return static_cast<int>(world);
}

StatusOr<ReexecuteResult> Reexecute(const std::string& run_dir, const std::string& out_dir,
                                    ControlFile control, const ReexecuteOptions& options) {
  ReexecuteResult result;
  // Before anything of the run is read: is it the caller's to start?
  DGRR_ASSIGN_OR_RETURN(const TrustDecision trust, CheckRunTrust(run_dir, options.trust));
  if (options.launch) {
    result.launch = *options.launch;
  } else {
    DGRR_ASSIGN_OR_RETURN(result.launch, ReadLaunchRecord(run_dir));
  }
  DGRR_ASSIGN_OR_RETURN(const int world_size, RecordedWorldSize(run_dir));
  LaunchRecord launch = result.launch;
  std::string interpreter_note;
  if (!launch.script.empty() && trust.level != RunTrust::kExplicit) {
    DGRR_ASSIGN_OR_RETURN(launch, InterpreterFromOurPath(run_dir, launch, &interpreter_note));
  }
  // One rank of an MPI job: the job is started again, under mpirun; one
  // worker of a torchrun job: under torchrun.
  DGRR_ASSIGN_OR_RETURN(const LaunchRecord torchrun_job, TorchrunJobOf(run_dir, launch, world_size));
  DGRR_ASSIGN_OR_RETURN(const LaunchRecord start, MpiJobOf(run_dir, torchrun_job, world_size));
  if (Status s = CheckDigest(interpreter_note.empty() ? "executable" : "interpreter found on your PATH",
                             launch.executable, launch.executable_xxh3, options.allow_changed_program);
      !s.ok()) {
    if (interpreter_note.empty()) return s;
    // Usually another interpreter of the same name first on PATH (a venv not
    // activated, a pyenv shim): say how to get the recorded one.
    return Status::IntegrityFailure(s.message() + ", put the recording's interpreter (" + result.launch.executable +
                                    ") first on your PATH, or pass --trust to run it as recorded");
  }
  if (!launch.script.empty()) {
    DGRR_RETURN_IF_ERROR(CheckDigest("script", launch.script, launch.script_xxh3, options.allow_changed_program));
  }

  result.out_dir = Absolute(out_dir);
  if (PathExists(result.out_dir)) {
    return Status::FailedPrecondition(out_dir + " already exists: a re-execution writes into a new directory");
  }
  DGRR_RETURN_IF_ERROR(CreateDirectories(result.out_dir));
  control.run_dir = result.out_dir;
  control.restore_checkpoint = Absolute(control.restore_checkpoint);
  control.verify_run_dir = Absolute(control.verify_run_dir);
  for (ControlDump& d : control.dumps) d.path = Absolute(d.path);
  control.path = result.out_dir + "/control.json";
  DGRR_RETURN_IF_ERROR(WriteFileAtomically(
      control.path,
      ControlFileJson(control).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"));

  result.log_path = result.out_dir + "/program.log";
  DGRR_ASSIGN_OR_RETURN(auto log, OpenWritableFile(result.log_path, /*truncate=*/true));
  SignalForwarding forwarding;
  ChildStart child_start = ChildEnvironment(start, control.path, trust.level);
  if (!launch.script.empty() && trust.level == RunTrust::kExplicit) {
    // The record's interpreter, where the caller's PATH would give another.
    const std::string named = launch.argv.empty() ? launch.executable : launch.argv[0];
    auto ours = FindOnPath(std::filesystem::path(named).filename().string());
    if (!ours.ok() || *ours != named) {
      child_start.security_relevant = true;
      interpreter_note = "  interpreter: " + named + ", from the record (your PATH gives " +
                         (ours.ok() ? *ours : std::string("none")) + ")";
    }
  }
  if (options.preview) {
    std::vector<std::string> lines;
    lines.push_back("starting the recorded program of " + run_dir + " (" +
                    (trust.level == RunTrust::kExplicit ? "trusted: " : "") + trust.why + "):");
    std::string command;
    for (const std::string& word : start.argv) command += (command.empty() ? "  " : " ") + ShellWord(word);
    if (start.argv.empty() || start.argv[0] != start.executable) command += "  (executable " + start.executable + ")";
    lines.push_back(command);
    lines.push_back("  in " + start.working_directory);
    if (!interpreter_note.empty()) lines.push_back(interpreter_note);
    if (child_start.set_lines.empty()) {
      lines.push_back("  environment: yours" + std::string(child_start.kept_lines.empty() ? ", unchanged" : ""));
    } else {
      lines.push_back("  environment: yours, with these from the record:");
      lines.insert(lines.end(), child_start.set_lines.begin(), child_start.set_lines.end());
    }
    if (!child_start.kept_lines.empty()) {
      lines.push_back("  not taken from the record (it names code or files; yours are kept; --trust takes them):");
      lines.insert(lines.end(), child_start.kept_lines.begin(), child_start.kept_lines.end());
    }
    options.preview(lines, child_start.security_relevant);
  }
  const std::optional<DirSnapshot> before = SnapshotRunDir(run_dir, result.out_dir);
  DGRR_ASSIGN_OR_RETURN(Launched child, Spawn(start, child_start.environment));
  forwarding.Attach(child.pid);
  OutputSink sink(log.get(), options.output);
  auto exit_code = CollectAndWait(child, sink);
  Status closed = log->Close();
  DGRR_RETURN_IF_ERROR(exit_code.status());
  DGRR_RETURN_IF_ERROR(closed);
  result.exit_code = *exit_code;
  if (before) DGRR_RETURN_IF_ERROR(CheckRunDirUnchanged(run_dir, *before, result.out_dir));
  DGRR_RETURN_IF_ERROR(CollectResults(world_size, result));
  return result;
}

std::string MismatchText(const ControlMismatch& m) {
  // As compare names a record: its examples and its index in the recorded trace.
  const std::string examples =
      m.example_count == 0 ? "" : ", examples " + std::to_string(m.first_example) + "+" + std::to_string(m.example_count);
  return "step " + std::to_string(m.step) + ", rank " + std::to_string(m.rank) + ", boundary " + m.boundary +
         examples + " (record #" + std::to_string(m.recorded_index) + " of the recorded trace)" +
         ": recorded xor64 " + Hex64(m.recorded_xor64) + " xxh3 " + Hex64(m.recorded_xxh3) +
         ", replayed xor64 " + Hex64(m.replayed_xor64) + " xxh3 " + Hex64(m.replayed_xxh3);
}

}  // namespace dgrr::replay
