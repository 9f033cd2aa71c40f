// dgrr train: the reference GPT trained data-parallel, bitwise reproducibly,
// every model-level boundary recorded.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "base/coding.h"
#include "cli/command.h"
#include "model/trainer.h"

namespace dgrr::cli {
namespace {

using model::TrainOptions;
using model::TrainProgress;

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
    char line[256];
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  %.0f tok/s  elapsed %s  eta %s",
                  static_cast<long long>(p.step + 1), static_cast<long long>(p.steps), p.loss,
                  p.tokens_per_second, Duration(p.elapsed_seconds).c_str(),
                  Duration(p.eta_seconds).c_str());
    if (tty_) {
      const int width = 24;
      const int filled = static_cast<int>(width * (p.step + 1) / std::max<int64_t>(p.steps, 1));
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(width, '.');
      std::fprintf(stderr, "\r[%s] %s\033[K%s", bar.c_str(), line, last ? "\n" : "");
      std::fflush(stderr);
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (p.step == 0 || last || now - last_print_ >= std::chrono::seconds(3)) {
      std::fprintf(stderr, "%s\n", line);
      last_print_ = now;
    }
  }

 private:
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point last_print_{};
};

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
      ("ranks", po::value(&o.ranks)->default_value(1), "data-parallel ranks (threads of this process, one trace each)")
      ("threads", po::value(&o.threads)->default_value(1), "worker threads per rank (never changes results)")
      ("batch", po::value(&batch), "global batch size in examples (default: the preset's; divisible by --ranks)")
      ("lr", po::value(&lr), "peak learning rate (default: the preset's)")
      ("mode", po::value(&mode)->default_value("full"), "recording mode: full, trusted, sdc or off")
      ("ckpt-every", po::value(&o.ckpt_every)->default_value(0), "write a checkpoint every K steps (0: none)")
      ("inject", po::value(&injects)->composing(),
       "inject a fault (repeatable): bitflip:step=S,rank=R,at=NAME[,example=E,index=I,bit=B] | "
       "race:step=S,at=PARAM | shared-rng:step=S[,rank=R] | reduce-order:step=S | skip-restore:NAME. "
       "bitflip flips bit B (default 20 of a float, 0 of a token byte) of element I (default 0) of "
       "boundary NAME on rank R (default 0), before it is recorded and read on: NAME is any name "
       "'dgrr inspect' lists, in any phase (data.tokens; a forward output such as "
       "block0.mlp.fc.out or loss, of example E, default the rank's first; an activation gradient "
       "such as block0.mlp.fc.dinp; allreduce.<grad>, e.g. allreduce.block1.mlp.fc.dw; the "
       "gradient AdamW reads, <param>.grad; the updated <param>; adamw.m.<param>, "
       "adamw.v.<param>). A flip in one rank's copy of the gradients, parameters or moments "
       "stops the run at the SDC check (exit 4). race takes PARAM, its gradient or its "
       "allreduce name (docs/model.md)")
      ("force", "replace the run already in --out (only dgrr's own files are removed)")
      ("resume", "continue the run in --out from its newest checkpoint; its settings come from its config.json")
      ("fallback", "with --resume: skip a corrupt newest checkpoint for the newest good one")
      ("quiet,q", "no progress output");
  po::positional_options_description positional;
  po::variables_map vm;
  int rc = ParseCommandLine(
      "train",
      "dgrr train --out RUN_DIR [--steps N] [--seed S] [--model tiny|small] [--data FILE]\n"
      "                  [--ranks R] [--threads T] [--batch B] [--lr LR] [--mode full|trusted|sdc|off]\n"
      "                  [--ckpt-every K] [--inject SPEC]... [--force] [--quiet]\n"
      "       dgrr train --out RUN_DIR --resume [--fallback] [--inject skip-restore:NAME]",
      "Trains the reference GPT (a byte-level decoder-only transformer) data-parallel over R ranks\n"
      "and T threads per rank, bitwise reproducibly: the parameters after every step are identical\n"
      "for any R and T. Every model-level boundary is fingerprinted into RUN_DIR/rank<R>.trace;\n"
      "RUN_DIR/config.json holds everything needed to run it again, rank<R>.env.json the\n"
      "environment. Progress goes to stderr; the last line summarises the run.",
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
  if (o.fallback && !o.resume) {
    return ReportError("train", Status::InvalidArgument("--fallback goes with --resume"));
  }
  if (o.resume) {
    for (const char* flag : {"steps", "seed", "layers", "dim", "heads", "seq", "data", "ranks",
                             "threads", "batch", "lr", "ckpt-every", "force"}) {
      if (!vm[flag].defaulted() && vm.count(flag)) {
        return ReportError("train", Status::InvalidArgument(
                                        std::string("--resume takes the run's settings from its "
                                                    "config.json; drop --") + flag));
      }
    }
    if (!vm["model"].defaulted() || !vm["mode"].defaulted()) {
      return ReportError("train", Status::InvalidArgument(
                                      "--resume takes the run's settings from its config.json; "
                                      "drop --model/--mode"));
    }
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

  auto trainer = model::Trainer::Create(o);
  if (!trainer.ok()) return ReportError("train", trainer.status());
  // Before the first byte of output: a second writer is refused having written nothing.
  if (Status locked = (*trainer)->LockRunDirectory(); !locked.ok()) return ReportError("train", locked);
  const bool quiet = vm.count("quiet") > 0;
  if (!quiet && o.resume) {
    std::fprintf(stderr, "dgrr train: resuming %s\n", o.out_dir.c_str());
  }
  if (!quiet) {
    std::fprintf(stderr, "dgrr train: %s model, %zu parameters, batch %d over %d rank(s) x %d thread(s), mode %s\n",
                 (*trainer)->preset().name.c_str(), (*trainer)->num_parameters(),
                 (*trainer)->batch_size(), (*trainer)->options().ranks,
                 (*trainer)->options().threads,
                 std::string(RecordModeName((*trainer)->options().mode)).c_str());
  }
  ProgressPrinter progress(quiet);
  model::TrainResult result;
  Status s = (*trainer)->Run([&](const TrainProgress& p) { progress(p); }, &result);
  if (!s.ok()) return ReportError("train", s);
  uint64_t total_trace = 0;
  for (uint64_t b : result.trace_bytes) total_trace += b;
  std::printf("trained %lld steps: final loss %.4f, %.0f tokens/s, %.1fs, params xxh3 %s, traces %s (%zu rank%s) in %s\n",
              static_cast<long long>(result.steps), result.final_loss, result.tokens_per_second,
              result.seconds, Hex64(result.params.xxh3).c_str(), HumanBytes(total_trace).c_str(),
              result.trace_bytes.size(), result.trace_bytes.size() == 1 ? "" : "s",
              o.out_dir.c_str());
  if (!quiet && (*trainer)->options().ckpt_every > 0) {
    std::fprintf(stderr, "dgrr train: checkpoints every %lld steps in %s/ckpt\n",
                 static_cast<long long>((*trainer)->options().ckpt_every), o.out_dir.c_str());
  }
  return kExitOk;
}

}  // namespace

DGRR_COMMAND(train, "train the reference GPT, bitwise reproducibly, recording every boundary", RunTrain);

}  // namespace dgrr::cli
