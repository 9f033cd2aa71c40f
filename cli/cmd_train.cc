// dgrr train: the reference GPT trained data-parallel, bitwise reproducibly,
// every model-level boundary recorded.
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "base/coding.h"
#include "base/environment.h"
#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "cli/command.h"
#include "model/trainer.h"
#include "runtime/launch_record.h"
#include "runtime/metrics_log.h"
#include "runtime/session.h"
#ifndef DGRR_HAVE_MPI
#define DGRR_HAVE_MPI 0
#endif
#if DGRR_HAVE_MPI
#include "runtime/mpi_communicator.h"
#endif

namespace dgrr::cli {
namespace {

using model::TrainOptions;
using model::TrainProgress;

// A run stopped on request at a step boundary exits kExitInterrupted or
// kExitTerminated (cli/command.h): the shell's 128 + signal number, so scripts
// and schedulers read them as usual.

// The signal that asked the run to stop (0: none). The first one sets it and
// the trainer stops after the step in flight; a second one ends the process
// at once.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void OnStopSignal(int sig) {
  if (g_stop_signal.load() != 0) {
    static const char msg[] = "\ndgrr train: second signal: exiting now, without a checkpoint\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + sig);
  }
  g_stop_signal.store(sig);
}

// SIGINT and SIGTERM handled while a run trains, the previous handlers back
// afterwards (tests run commands in-process).
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = OnStopSignal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// The width of the terminal on stderr, or 0 when unknown.
int TerminalColumns() {
  struct winsize ws {};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0) return 0;
  return ws.ws_col;
}

// The command line to type again, with --resume.
std::string ResumeCommand(const std::vector<std::string>& args) {
  std::string line = "dgrr train";
  bool has_resume = false;
  for (const std::string& a : args) {
    has_resume = has_resume || a == "--resume";
    const bool plain = a.find_first_of(" \t'\"$\\`") == std::string::npos && !a.empty();
    line += " " + (plain ? a : "'" + a + "'");
  }
  return has_resume ? line : line + " --resume";
}

std::string Duration(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  }
  return buf;
}

std::string HumanBytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / double(1ull << 30));
  } else if (b >= (1ull << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1ull << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  }
  return buf;
}

// Progress on stderr: a live bar on a terminal, a line every few seconds
// otherwise (logs stay readable), nothing with --quiet.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool quiet) : quiet_(quiet), tty_(::isatty(STDERR_FILENO) != 0) {}
  void operator()(const TrainProgress& p) {
    if (quiet_) return;
    const bool last = p.step + 1 == p.steps;
    // The step as records, options and file names number it: 0-based.
    char line[256];
    std::snprintf(line, sizeof line, "step %lld of %lld  loss %.4f  %.0f tok/s  elapsed %s  eta %s",
                  static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss,
                  p.tokens_per_second, Duration(p.elapsed_seconds).c_str(),
                  Duration(p.eta_seconds).c_str());
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K%s", FitLine(p, line, TerminalColumns()).c_str(), last ? "\n" : "");
      std::fflush(stderr);
      live_ = !last;
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (p.step == 0 || last || now - last_print_ >= std::chrono::seconds(3)) {
      std::fprintf(stderr, "%s\n", line);
      last_print_ = now;
    }
  }

  // Ends a live bar's line so that what follows starts on its own line.
  void Break() {
    if (live_) std::fputc('\n', stderr);
    live_ = false;
  }

  // The bar and the line, cut to the terminal's width less one column (a
  // full last column makes some terminals wrap): never wrapped, never scrolled.
  static std::string FitLine(const TrainProgress& p, const std::string& line, int columns) {
    const int width = 24;
    const int filled = static_cast<int>(width * (p.step + 1) / std::max<int64_t>(p.steps, 1));
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    std::string text = "[" + bar + "] " + line;
    if (columns <= 0) return text;
    // A narrow terminal loses the bar before the numbers.
    if (static_cast<int>(text.size()) >= columns) text = line;
    if (static_cast<int>(text.size()) >= columns) text.resize(static_cast<size_t>(std::max(columns - 1, 1)));
    return text;
  }

 private:
  bool quiet_, tty_;
  bool live_ = false;
  std::chrono::steady_clock::time_point last_print_{};
};

// Progress under a control file: "dgrr train: re-executed step S" at the
// first step, every few seconds and at the control's last step (dgrr
// rollback shows these as its own progress).
std::function<void(const TrainProgress&)> ReexecutionProgress(const ControlFile& control, bool quiet) {
  if (quiet) return nullptr;
  const std::string verified = control.verify_run_dir.empty() ? "" : ", verified against the traces";
  const std::optional<uint64_t> last = control.stop_after_step;
  auto last_print = std::make_shared<std::optional<std::chrono::steady_clock::time_point>>();
  return [verified, last, last_print](const TrainProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    const bool final = last && static_cast<uint64_t>(p.step) == *last;
    if (*last_print && !final && now - **last_print < std::chrono::seconds(3)) return;
    *last_print = now;
    std::fprintf(stderr, "dgrr train: re-executed step %lld%s\n", static_cast<long long>(p.step), verified.c_str());
  };
}

bool Given(const po::variables_map& vm, const char* flag) {
  return vm.count(flag) > 0 && !vm[flag].defaulted();
}

template <typename T>
std::string Text(const T& v) {
  std::ostringstream out;
  out.precision(9);  // every float distinct
  out << v;
  return out.str();
}

// --resume with options: each one given must say what the run's config.json
// says (the same command line as the recording does). Every disagreement is
// named in one line; options not given are taken from the run.
Status CheckResumeSettings(const po::variables_map& vm, const TrainOptions& given,
                           const TrainOptions& run) {
  std::vector<std::string> conflicts;
  auto check = [&](const char* flag, const std::string& typed, const std::string& recorded) {
    if (Given(vm, flag) && typed != recorded) {
      conflicts.push_back("--" + std::string(flag) + " " + typed + " (the run has " + recorded + ")");
    }
  };
  check("steps", Text(given.steps), Text(run.steps));
  check("seed", Text(given.seed), Text(run.seed));
  check("model", given.preset, run.preset);
  check("layers", Text(given.layers.value_or(0)), Text(run.layers.value_or(0)));
  check("dim", Text(given.dim.value_or(0)), Text(run.dim.value_or(0)));
  check("heads", Text(given.heads.value_or(0)), Text(run.heads.value_or(0)));
  check("seq", Text(given.seq.value_or(0)), Text(run.seq.value_or(0)));
  check("data", given.data_file, run.data_file.empty() ? "the embedded corpus" : run.data_file);
  check("ranks", Text(given.ranks), Text(run.ranks));
  check("threads", Text(given.threads), Text(run.threads));
  check("batch", Text(given.batch.value_or(0)), Text(run.batch.value_or(0)));
  check("lr", Text(given.lr.value_or(0)), Text(run.lr.value_or(0)));
  check("mode", std::string(RecordModeName(given.mode)), std::string(RecordModeName(run.mode)));
  check("ckpt-every", Text(given.ckpt_every), Text(run.ckpt_every));
  check("audit-every", Text(given.audit_every), Text(run.audit_every));
  check("gemm", given.gemm, run.gemm);  // --device may differ: it never changes results
  // The run's own faults may be repeated (the same command line), not changed.
  std::vector<std::string> typed, recorded;
  for (const auto& f : given.faults) {
    if (f.kind != model::FaultKind::kSkipRestore) typed.push_back(f.text);
  }
  for (const auto& f : run.faults) recorded.push_back(f.text);
  std::sort(typed.begin(), typed.end());
  std::sort(recorded.begin(), recorded.end());
  if (!typed.empty() && typed != recorded) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
      return s.empty() ? std::string("none") : s;
    };
    conflicts.push_back("--inject " + join(typed) + " (the run has " + join(recorded) + ")");
  }
  if (conflicts.empty()) return Status::OK();
  std::string message = "--resume: these options differ from " + ConfigPathFor(given.out_dir) + ": ";
  for (size_t i = 0; i < conflicts.size(); ++i) message += (i ? "; " : "") + conflicts[i];
  if (Given(vm, "steps") && given.steps != run.steps) {
    message += ". A run's length cannot change: its learning rate decays over all " + Text(run.steps) +
               " steps, so a longer or shorter run is a different run (start one in a new --out)";
  }
  return Status::InvalidArgument(message);
}

// Runs the trainer: its ranks as threads of this process, or, started by
// mpirun, this process's one rank over MPI.
Status RunTrainer(model::Trainer& trainer, bool as_mpi_rank,
                  const std::function<void(const TrainProgress&)>& progress, model::TrainResult* result) {
  if (!as_mpi_rank) return trainer.Run(progress, result);
#if DGRR_HAVE_MPI
  DGRR_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, OpenMpiCommunicator());
  return trainer.RunAsRank(*comm, progress, result);
#else
  return Status::Internal("MPI rank without MPI");
#endif
}

// Where an MPI launcher (mpirun, mpiexec) started this process: its rank and
// the job's size (size 0: not started by a launcher), from the launchers'
// variables (kMpiLaunchers, runtime/launch_record.h).
MpiLaunchPosition LaunchedByMpi() {
  return FindMpiLaunchPosition([](const char* name) {
    // The variable's string outlives the lock: setenv of others never frees it.
    auto lock = LockEnvironment();
    return static_cast<const char*>(std::getenv(name));
  });
}

int RunTrain(const std::vector<std::string>& args) {
  TrainOptions o;
  std::string mode = "full";
  std::vector<std::string> injects;
  int layers = 0, dim = 0, heads = 0, seq = 0, batch = 0;
  float lr = 0;
  po::options_description options("Options");
  options.add_options()
      ("out", po::value(&o.out_dir)->required(), "run directory to write (refused if not empty, unless --force)")
      ("steps", po::value(&o.steps)->default_value(200), "training steps")
      ("seed", po::value(&o.seed)->default_value(1), "the run's seed: data, init, dropout all derive from it")
      ("model", po::value(&o.preset)->default_value("tiny"), "preset: tiny (tests) or small (the demo)")
      ("layers", po::value(&layers), "override the preset's number of layers")
      ("dim", po::value(&dim), "override the preset's channels")
      ("heads", po::value(&heads), "override the preset's attention heads")
      ("seq", po::value(&seq), "override the preset's sequence length")
      ("data", po::value(&o.data_file), "train on this text file's bytes (default: an embedded arithmetic corpus)")
      ("ranks", po::value(&o.ranks)->default_value(1),
       "data-parallel ranks as threads of this process, one trace each (under mpirun: one rank per "
       "process, the size from mpirun -np)")
      ("threads", po::value(&o.threads)->default_value(1), "worker threads per rank (never changes results)")
      ("batch", po::value(&batch), "global batch size in examples (default: the preset's; divisible by --ranks)")
      ("lr", po::value(&lr), "peak learning rate (default: the preset's)")
      ("mode", po::value(&mode)->default_value("full"), "recording mode: full, trusted, sdc or off")
      ("ckpt-every", po::value(&o.ckpt_every)->default_value(0), "write a checkpoint every K steps (0: none)")
      ("audit-every", po::value(&o.audit_every)->default_value(0),
       "cross-rank audit at every step K divides (0: off): rank r recomputes rank (r+1) % R's examples "
       "and compares every per-example fingerprint, in any --mode; a difference names step, rank, "
       "example and boundary and stops the run (exit 4). Finds a rank whose forward or backward is "
       "wrong even when the all-reduce has spread its gradient to every rank, which the parameter "
       "check cannot see; costs up to one more forward/backward per audited step (docs/model.md)")
      ("inject", po::value(&injects)->composing(),
       "inject a fault (repeatable): bitflip:step=S,rank=R,at=NAME[,example=E,index=I,bit=B] | "
       "multibit:...[,bits=B1+B2|count=K][,elements=N] | stuck-byte:...[,byte=K][,value=V] | "
       "random:... | nan:... | inf:...[,sign=-] (... = step=S,rank=R,at=NAME[,example=E,index=I]) | "
       "race:step=S,at=PARAM | shared-rng:step=S[,rank=R] | reduce-order:step=S | skip-restore:NAME. "
       "bitflip flips bit B (default 20 of a float, 0 of a token byte) of element I (default 0) of "
       "boundary NAME on rank R (default 0), before it is recorded and read on: NAME is any name "
       "'dgrr inspect' lists, in any phase (data.tokens; a forward output such as "
       "block0.mlp.fc.out or loss, of example E, default the rank's first; an activation gradient "
       "such as block0.mlp.fc.dinp; allreduce.<grad>, e.g. allreduce.block1.mlp.fc.dw; the "
       "gradient AdamW reads, <param>.grad; the updated <param>; adamw.m.<param>, "
       "adamw.v.<param>). multibit flips the listed bits, or K drawn ones (default 2), in elements "
       "I..I+N-1; stuck-byte sets byte K (default the top) of element I to V (default 0xff); random, "
       "nan and inf replace element I (random draws come from the run's seed). "
       "A flip in one rank's copy of the gradients, parameters or moments "
       "stops the run at the SDC check (exit 4). race takes PARAM, its gradient or its "
       "allreduce name (docs/model.md)")
      ("device", po::value(&o.device)->default_value("cpu"),
       "where the steps run: cpu, cuda-sim (the model's device kernels on a CPU grid emulator) or "
       "cuda (the same kernels on a GPU). Never changes results: a cuda-sim or cuda run is bitwise "
       "the cpu run, and a --resume may continue on another device (docs/gpu.md)")
      ("gemm", po::value(&o.gemm)->default_value("exact"),
       "the matrix products: exact (the canonical fma chain, every device) or cublas (--device cuda "
       "only, cuBLAS on a pinned deterministic handle: the same bits run after run, not the cpu's; changes "
       "results, recorded in config.json; not with --audit-every)")
      ("force", "replace the run already in --out (only dgrr's own files are removed)")
      ("resume", "continue the run in --out from its newest checkpoint: options given must agree with its "
                 "config.json (the same command line does); with no config.json there yet, start it")
      ("fallback", "with --resume: skip a corrupt newest checkpoint for the newest good one")
      ("json", "print the summary as one JSON object on stdout (schema dgrr.train/1, docs/json/train.md)")
      ("quiet,q", "no progress output");
  po::positional_options_description positional;
  po::variables_map vm;
  int rc = ParseCommandLine(
      "train",
      "dgrr train --out RUN_DIR [--steps N] [--seed S] [--model tiny|small] [--data FILE]\n"
      "                  [--ranks R] [--threads T] [--batch B] [--lr LR] [--mode full|trusted|sdc|off]\n"
      "                  [--ckpt-every K] [--audit-every K] [--device cpu|cuda-sim|cuda] [--gemm exact|cublas]\n"
      "                  [--inject SPEC]... [--force] [--quiet]\n"
      "       dgrr train ... --resume [--fallback] [--inject skip-restore:NAME]",
      "Trains the reference GPT (a byte-level decoder-only transformer) data-parallel over R ranks\n"
      "and T threads per rank, bitwise reproducibly: the parameters after every step are identical\n"
      "for any R and T. Every model-level boundary is fingerprinted into RUN_DIR/rank<R>.trace;\n"
      "RUN_DIR/config.json holds everything needed to run it again, rank<R>.env.json the\n"
      "environment, RUN_DIR/metrics.jsonl one line per step (docs/json/metrics.md). Steps are\n"
      "numbered from 0 everywhere (progress 'step S of N' runs S = 0..N-1). Progress goes to\n"
      "stderr; the last line (or --json) summarises the run.\n"
      "Ctrl-C (SIGINT) or SIGTERM stops after the step in flight, writing a checkpoint of it\n"
      "when the run keeps checkpoints, prints how to resume and exits 130 (SIGINT) or 143\n"
      "(SIGTERM); a second Ctrl-C exits at once. Re-running the same command with --resume\n"
      "continues; a run cannot be extended (--steps sets the learning-rate schedule).",
      options, positional, args, vm);
  if (rc >= 0) return rc;
  if (vm.count("layers")) o.layers = layers;
  if (vm.count("dim")) o.dim = dim;
  if (vm.count("heads")) o.heads = heads;
  if (vm.count("seq")) o.seq = seq;
  if (vm.count("batch")) o.batch = batch;
  if (vm.count("lr")) o.lr = lr;
  o.force = vm.count("force") > 0;
  o.resume = vm.count("resume") > 0;
  o.fallback = vm.count("fallback") > 0;
  o.device_given = Given(vm, "device");
  // Under mpirun the job's size is the world size; --ranks may only repeat it.
  const MpiLaunchPosition launched = LaunchedByMpi();
  if (launched.size > 0) {
    if (vm.count("ranks") && !vm["ranks"].defaulted() && o.ranks != launched.size) {
      return ReportError("train", Status::InvalidArgument(
                                      "--ranks " + std::to_string(o.ranks) + " differs from the " +
                                      std::to_string(launched.size) + " processes mpirun started: " +
                                      "leave --ranks out (the world size comes from mpirun -np)"));
    }
    o.ranks = launched.size;
  }
#if !DGRR_HAVE_MPI
  if (launched.size > 1) {
    return ReportError("train", Status::FailedPrecondition(
                                    "started by an MPI launcher as rank " + std::to_string(launched.rank) +
                                    " of " + std::to_string(launched.size) +
                                    ", but this dgrr was built without MPI (install libopenmpi-dev and "
                                    "rebuild), or run 'dgrr train --ranks " + std::to_string(launched.size) +
                                    "' in one process"));
  }
#endif
  const bool as_mpi_rank = DGRR_HAVE_MPI && launched.size > 0;
  // Rank 0 speaks for the job; the others only report their errors.
  const bool quiet = vm.count("quiet") > 0 || launched.rank != 0;
  const bool json = vm.count("json") > 0;
  if (o.fallback && !o.resume) {
    return ReportError("train", Status::InvalidArgument("--fallback goes with --resume"));
  }
  if (o.resume && o.force) {
    return ReportError("train", Status::InvalidArgument(
                                    "--resume continues the run in --out and --force replaces it: pass one"));
  }
  auto parsed_mode = ParseRecordMode(mode);
  if (!parsed_mode) {
    return ReportError("train", Status::InvalidArgument("--mode: unknown mode '" + mode +
                                                        "' (full, trusted, sdc, off)"));
  }
  o.mode = *parsed_mode;
  for (const auto& spec : injects) {
    auto f = model::ParseFaultSpec(spec);
    if (!f.ok()) return ReportError("train", f.status());
    o.faults.push_back(*f);
  }
  if (o.resume && PathExists(ConfigPathFor(o.out_dir))) {
    // The same command line as the recording continues it: what the user
    // typed must agree with the run's config.json, and every disagreement
    // is named at once.
    auto recorded = model::TrainOptionsFromRun(o.out_dir);
    if (!recorded.ok()) return ReportError("train", recorded.status());
    if (Status agree = CheckResumeSettings(vm, o, *recorded); !agree.ok()) return ReportError("train", agree);
    // The recorded faults are the run's own: the trainer adds them back.
    std::erase_if(o.faults, [](const model::FaultSpec& f) { return f.kind != model::FaultKind::kSkipRestore; });
  }
  StopSignals signals;
  o.stop = &g_stop_signal;

  auto trainer = model::Trainer::Create(o);
  if (!trainer.ok()) return ReportError("train", trainer.status());
  // Before the first byte of output: a second writer, or a directory that
  // holds another run, is refused having written nothing.
  // Under mpirun rank 0 locks, once the ranks have agreed on the run.
  if (!as_mpi_rank) {
    if (Status locked = (*trainer)->LockRunDirectory(); !locked.ok()) return ReportError("train", locked);
  }
  const bool fresh_from_resume = (*trainer)->options().resumed_fresh;
  if (!quiet && (*trainer)->options().resume) {
    std::fprintf(stderr, "dgrr train: resuming %s\n", o.out_dir.c_str());
  }
  if (!quiet && fresh_from_resume) {
    std::fprintf(stderr, "dgrr train: %s holds no run to resume yet (no config.json): starting it\n",
                 o.out_dir.c_str());
  }
  if (!quiet) {
    const int64_t audit_every = (*trainer)->options().audit_every;
    std::fprintf(stderr, "dgrr train: %s model, %zu parameters, batch %d over %d rank(s) x %d thread(s), mode %s%s\n",
                 (*trainer)->preset().name.c_str(), (*trainer)->num_parameters(),
                 (*trainer)->batch_size(), (*trainer)->options().ranks,
                 (*trainer)->options().threads,
                 std::string(RecordModeName((*trainer)->options().mode)).c_str(),
                 audit_every > 0 ? (", audit every " + std::to_string(audit_every) + " step(s)").c_str() : "");
  }
  ProgressPrinter progress(quiet);
  std::function<void(const TrainProgress&)> report = [&](const TrainProgress& p) { progress(p); };
  if (const auto& control = (*trainer)->control()) {
    // Re-executed by dgrr replay, rollback or bisect: one line now and then
    // (the re-executor passes them on), the run's own summary stays in its log.
    report = ReexecutionProgress(*control, quiet);
  }
  model::TrainResult result;
  Status s = RunTrainer(**trainer, as_mpi_rank, report, &result);
  progress.Break();
  if (!s.ok()) return ReportError("train", s);
  if (launched.rank != 0) return kExitOk;  // rank 0 reports the run
  uint64_t total_trace = 0;
  for (uint64_t b : result.trace_bytes) total_trace += b;
  const int64_t ckpt_every = (*trainer)->options().ckpt_every;
  // --resume of a finished run: its newest checkpoint is its last step.
  const bool already_complete = !result.stopped && result.first_step >= result.steps;
  if (json) {
    nlohmann::ordered_json j;
    j["schema"] = "dgrr.train/1";
    j["run_dir"] = o.out_dir;
    j["status"] = result.stopped ? "stopped" : "complete";
    j["steps"] = (*trainer)->options().steps;
    j["first_step"] = result.first_step;
    j["last_step"] = result.steps - 1;
    j["final_loss"] = already_complete ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(result.final_loss);
    j["already_complete"] = already_complete;
    j["tokens_per_s"] = result.tokens_per_second;
    j["seconds"] = result.seconds;
    j["params_xxh3"] = Hex64(result.params.xxh3);
    j["trace_bytes"] = result.trace_bytes;
    j["metrics"] = MetricsPathFor(o.out_dir);
    j["checkpoint"] = result.stopped && result.checkpoint_at_stop
                          ? nlohmann::ordered_json(checkpoint::CheckpointPath(
                                o.out_dir, static_cast<uint64_t>(result.steps - 1)))
                          : nlohmann::ordered_json(nullptr);
    if (result.stopped) {
      j["signal"] = g_stop_signal.load() == SIGTERM ? "SIGTERM" : "SIGINT";
      j["resume_command"] = ResumeCommand(args);
    }
    std::cout << j.dump() << "\n";
    std::cout.flush();
  } else if (already_complete) {
    std::printf("run %s is already complete: steps 0..%lld, params xxh3 %s; nothing to do\n", o.out_dir.c_str(),
                static_cast<long long>(result.steps - 1), Hex64(result.params.xxh3).c_str());
  } else if (!result.stopped) {
    std::printf("trained steps 0..%lld: final loss %.4f, %.0f tokens/s, %.1fs, params xxh3 %s, traces %s (%zu rank%s) in %s\n",
                static_cast<long long>(result.steps - 1), result.final_loss, result.tokens_per_second,
                result.seconds, Hex64(result.params.xxh3).c_str(), HumanBytes(total_trace).c_str(),
                result.trace_bytes.size(), result.trace_bytes.size() == 1 ? "" : "s",
                o.out_dir.c_str());
  }
  if (result.stopped) {
    const int sig = g_stop_signal.load();
    // Said even with --quiet: the user must learn how to continue.
    std::fprintf(stderr, "dgrr train: %s: stopped after step %lld of %lld; %s\ndgrr train: resume with: %s\n",
                 sig == SIGTERM ? "SIGTERM" : "interrupted", static_cast<long long>(result.steps - 1),
                 static_cast<long long>((*trainer)->options().steps),
                 result.checkpoint_at_stop
                     ? ("checkpoint " + checkpoint::CheckpointPath(o.out_dir, static_cast<uint64_t>(result.steps - 1)) +
                        " written").c_str()
                     : "this run keeps no checkpoints (--ckpt-every 0), so a resume starts it over",
                 ResumeCommand(args).c_str());
    return sig == SIGTERM ? kExitTerminated : kExitInterrupted;
  }
  if (!quiet && ckpt_every > 0) {
    std::fprintf(stderr, "dgrr train: checkpoints every %lld steps in %s/ckpt\n",
                 static_cast<long long>(ckpt_every), o.out_dir.c_str());
  }
  return kExitOk;
}

}  // namespace

// 3: a corrupt checkpoint or config.json on --resume; 4: the per-step SDC
// check found the ranks' copies of the state differ.
DGRR_COMMAND(train, "train the reference GPT, bitwise reproducibly, recording every boundary", RunTrain,
             kExitOk, kExitUsage, kExitIO, kExitInvalidData, kExitDivergence, kExitInterrupted, kExitTerminated);

}  // namespace dgrr::cli
