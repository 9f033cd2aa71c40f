// The cost of recording, measured on the reference workload: step time of
// `dgrr train` in each recording mode against --mode off, in the same run.
//
// Modes are interleaved in rounds (off, full, trusted, sdc; the order rotated
// by one each round) so a load change on a shared machine hits all of them
// alike; each mode's figure is the median over rounds of its median step time
// (the first steps of a run, which pay for start-up, are skipped), and the
// ratios to --mode off are also given round by round (median, min, max). Both
// wall time and the process's CPU time (all threads) are reported: on a shared
// machine CPU time is the steadier of the two, while wall time is what a user
// waits for.
//
// With --audit K1,K2,... it measures the cross-rank audit instead: mode full
// without the audit against --audit-every K1, K2, ... (interleaved the same
// way), each against the unaudited run.
//
// usage: recording_overhead [--model tiny|small] [--steps N] [--rounds K]
//                           [--threads T] [--ranks R] [--out DIR] [--audit K1,K2]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/trainer.h"

namespace {

using dgrr::RecordMode;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct StepTimes {
  double wall = 0;  // median seconds per step
  double cpu = 0;   // median CPU seconds per step, all threads of the process
  // Means: an audit every K > 1 steps is in none of the median steps.
  double mean_wall = 0, mean_cpu = 0;
};

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// Median seconds per step of one run, skipping the first `warmup` steps.
StepTimes MedianStepSeconds(dgrr::model::TrainOptions o, int warmup) {
  auto trainer = dgrr::model::Trainer::Create(o);
  if (!trainer.ok()) {
    std::fprintf(stderr, "recording_overhead: %s\n", trainer.status().ToString().c_str());
    std::exit(1);
  }
  std::vector<double> steps, cpu_steps;
  auto last = Clock::now();
  double last_cpu = ProcessCpuSeconds();
  dgrr::Status s = (*trainer)->Run(
      [&](const dgrr::model::TrainProgress& p) {
        const auto now = Clock::now();
        const double cpu = ProcessCpuSeconds();
        if (p.step >= warmup) {
          steps.push_back(std::chrono::duration<double>(now - last).count());
          cpu_steps.push_back(cpu - last_cpu);
        }
        last = now;
        last_cpu = cpu;
      },
      nullptr);
  if (!s.ok()) {
    std::fprintf(stderr, "recording_overhead: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  return {Median(steps), Median(cpu_steps), Mean(steps), Mean(cpu_steps)};
}

struct RoundRatios {
  double median = 0, min = 0, max = 0;
};

// Ratios candidate[i] / baseline[i], one per round.
RoundRatios PairedRatios(const std::vector<double>& candidate, const std::vector<double>& baseline) {
  std::vector<double> r;
  for (size_t i = 0; i < candidate.size() && i < baseline.size(); ++i) {
    if (baseline[i] > 0) r.push_back(candidate[i] / baseline[i]);
  }
  if (r.empty()) return {};
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  return {Median(r), *lo, *hi};
}

constexpr char kUsage[] =
    "usage: recording_overhead [--model tiny|small] [--steps N] [--rounds K]\n"
    "                          [--threads T] [--ranks R] [--out DIR] [--audit K1,K2,...]\n"
    "\n"
    "Trains in each recording mode (off, full, trusted, sdc), interleaved in K rounds,\n"
    "and prints each mode's median step time, wall and CPU, against --mode off.\n"
    "With --audit, compares mode full without the cross-rank audit against\n"
    "--audit-every K1, K2, ... instead.\n"
    "\n"
    "  --model    preset to train (default tiny)\n"
    "  --steps    steps per run, the first quarter (at most 5) skipped (default 40)\n"
    "  --rounds   rounds of all modes (default 5)\n"
    "  --threads  worker threads per rank (default 1)\n"
    "  --ranks    ranks, as threads of this process (default 1)\n"
    "  --out      scratch directory, removed at the end (default /tmp/dgrr_recording_overhead)\n"
    "  --help     this text\n";

// One usage error: a line on stderr, exit status 1.
int UsageError(const std::string& what) {
  std::fprintf(stderr, "recording_overhead: %s (see --help)\n", what.c_str());
  return 1;
}

// A positive integer option value; false when `text` is not one.
bool ParsePositive(const char* text, int* value) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != 0 || v < 1 || v > 1000000) return false;
  *value = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "tiny", out = "/tmp/dgrr_recording_overhead";
  int steps = 40, rounds = 5, threads = 1, ranks = 1;
  std::vector<int64_t> audits;
  const std::map<std::string, int*> counts = {
      {"--steps", &steps}, {"--rounds", &rounds}, {"--threads", &threads}, {"--ranks", &ranks}};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag != "--model" && flag != "--out" && flag != "--audit" && counts.count(flag) == 0) {
      return UsageError("unknown option " + flag);
    }
    if (i + 1 >= argc) return UsageError(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--model") model = value;
    else if (flag == "--out") out = value;
    else if (flag == "--audit") {
      for (const char* p = value; *p != 0;) {
        char* end = nullptr;
        audits.push_back(std::strtoll(p, &end, 10));
        if (end == p || audits.back() < 1) return UsageError("--audit takes intervals >= 1, e.g. 1,10");
        p = *end == ',' ? end + 1 : end;
      }
    } else if (!ParsePositive(value, counts.at(flag))) {
      return UsageError(flag + " takes a positive integer, not '" + value + "'");
    }
  }
  // (mode, audit interval) per configuration; the first is the baseline.
  std::vector<std::pair<RecordMode, int64_t>> modes;
  if (audits.empty()) {
    for (RecordMode m : {RecordMode::kOff, RecordMode::kFull, RecordMode::kTrusted, RecordMode::kSdc}) {
      modes.emplace_back(m, 0);
    }
  } else {
    modes.emplace_back(RecordMode::kFull, 0);
    for (int64_t k : audits) modes.emplace_back(RecordMode::kFull, k);
  }
  auto label = [](const std::pair<RecordMode, int64_t>& m) {
    std::string l(dgrr::RecordModeName(m.first));
    return m.second > 0 ? l + "+audit" + std::to_string(m.second) : l;
  };
  std::map<std::pair<RecordMode, int64_t>, std::vector<double>> wall_per_mode, cpu_per_mode;
  int tokens_per_step = 0;
  for (int round = 0; round < rounds; ++round) {
    // The order rotates by one each round, so no configuration always runs
    // right after start-up or right after the same neighbour.
    for (size_t k = 0; k < modes.size(); ++k) {
      const auto& config = modes[(k + static_cast<size_t>(round)) % modes.size()];
      const RecordMode mode = config.first;
      dgrr::model::TrainOptions o;
      o.out_dir = out + "/" + label(config);
      o.audit_every = config.second;
      o.preset = model;
      o.steps = steps;
      o.threads = threads;
      o.ranks = ranks;
      o.mode = mode;
      o.force = true;
      auto t = dgrr::model::Trainer::Create(o);
      if (t.ok()) tokens_per_step = (*t)->batch_size() * (*t)->preset().model.seq_len;
      const StepTimes times = MedianStepSeconds(o, std::min(5, steps / 4));
      wall_per_mode[config].push_back(audits.empty() ? times.wall : times.mean_wall);
      cpu_per_mode[config].push_back(audits.empty() ? times.cpu : times.mean_cpu);
    }
  }
  std::filesystem::remove_all(out);
  const double off = Median(wall_per_mode[modes[0]]);
  const double off_cpu = Median(cpu_per_mode[modes[0]]);
  std::printf("model=%s ranks=%d threads=%d steps=%d rounds=%d (%s step time)\n", model.c_str(), ranks,
              threads, steps, rounds, audits.empty() ? "median" : "mean");
  const std::string base = label(modes[0]);
  std::printf("%-12s %12s %12s %8s %14s %8s\n", "mode", "ms/step", "tokens/s", ("vs " + base).c_str(),
              "cpu ms/step", ("vs " + base).c_str());
  for (const auto& config : modes) {
    const double t = Median(wall_per_mode[config]);
    const double c = Median(cpu_per_mode[config]);
    std::printf("%-12s %12.3f %12.0f %8.4f %14.3f %8.4f\n", label(config).c_str(), t * 1e3,
                tokens_per_step / t, t / off, c * 1e3, c / off_cpu);
  }
  // The same comparison round by round: each configuration against the
  // baseline run of its own round, which saw the same load. The spread of
  // these ratios is the noise a single figure above hides.
  std::printf("\nper round, against %s of the same round: median [min, max]\n", base.c_str());
  std::printf("%-12s %26s %26s\n", "mode", "wall", "cpu");
  for (size_t m = 1; m < modes.size(); ++m) {
    const auto& config = modes[m];
    const RoundRatios wall = PairedRatios(wall_per_mode[config], wall_per_mode[modes[0]]);
    const RoundRatios cpu = PairedRatios(cpu_per_mode[config], cpu_per_mode[modes[0]]);
    std::printf("%-12s %8.4f [%.4f, %.4f] %8.4f [%.4f, %.4f]\n", label(config).c_str(), wall.median,
                wall.min, wall.max, cpu.median, cpu.min, cpu.max);
  }
  return 0;
}
