// The fixed cost of a small dgrr command: spawns `dgrr --version`,
// `dgrr verify tiny.trace` and `dgrr compare tiny.trace tiny.trace` N times
// each, interleaved with /bin/true (the cost of any process start on this
// machine, measured in the same run), and prints the median wall time and
// the median CPU time (user + system, from wait4) of each, and each median
// less /bin/true's. On a loaded machine CPU time is the steadier figure.
//
//   startup_bench [--runs N] [--dgrr PATH]   (default: the dgrr built beside it)
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "trace_format/writer.h"

extern char** environ;

namespace {

struct Sample {
  double wall_ms;
  double cpu_ms;
};

// Runs argv once with stdout and stderr sent to /dev/null.
Sample Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) {
    std::fprintf(stderr, "startup_bench: cannot run %s\n", argv[0]);
    std::exit(2);
  }
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  const auto end = std::chrono::steady_clock::now();
  posix_spawn_file_actions_destroy(&actions);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "startup_bench: %s failed (status %d)\n", argv[0], status);
    std::exit(2);
  }
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return {std::chrono::duration<double, std::milli>(end - start).count(),
          ms(usage.ru_utime) + ms(usage.ru_stime)};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void WriteTinyTrace(const std::string& path) {
  dgrr::trace::TraceHeader header;
  header.seed = 1;
  auto writer = dgrr::trace::TraceWriter::Create(path, header, {.overwrite = true});
  if (!writer.ok()) std::exit(2);
  auto id = (*writer)->InternName("block0.mlp.fc");
  if (!id.ok()) std::exit(2);
  dgrr::trace::BoundaryRecord r;
  r.name_id = *id;
  r.ndim = 2;
  r.dims[0] = 8;
  r.dims[1] = 16;
  r.example_count = 8;
  for (uint64_t i = 0; i < 64; ++i) {
    r.step = i / 8;
    r.seq = i;
    r.xor64 = i * 0x9e3779b97f4a7c15ULL;
    if (!(*writer)->AppendBoundary(r).ok()) std::exit(2);
  }
  if (!(*writer)->Close().ok()) std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 21;
  std::string dgrr = DGRR_STARTUP_BENCH_DGRR;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
    if (flag == "--dgrr") dgrr = argv[i + 1];
  }
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("dgrr-startup-bench-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string tiny = dir + "/tiny.trace";
  WriteTinyTrace(tiny);

  struct Case {
    std::string label;
    std::vector<std::string> argv;
    std::vector<double> wall, cpu;
  };
  std::vector<Case> cases = {
      {"/bin/true", {"/bin/true"}, {}, {}},
      {"dgrr --version", {dgrr, "--version"}, {}, {}},
      {"dgrr verify tiny.trace", {dgrr, "verify", tiny}, {}, {}},
      {"dgrr compare tiny tiny", {dgrr, "compare", tiny, tiny}, {}, {}},
  };
  for (Case& c : cases) Spawn(c.argv);  // warm the page cache
  for (int r = 0; r < runs; ++r) {
    for (Case& c : cases) {  // interleaved: load drifts hit every case alike
      const Sample s = Spawn(c.argv);
      c.wall.push_back(s.wall_ms);
      c.cpu.push_back(s.cpu_ms);
    }
  }
  std::filesystem::remove_all(dir);

  const double base_wall = Median(cases[0].wall), base_cpu = Median(cases[0].cpu);
  std::printf("%d runs each, interleaved; medians in ms (less /bin/true in brackets)\n", runs);
  std::printf("%-26s %10s %10s %12s %12s\n", "command", "wall", "cpu", "wall-true", "cpu-true");
  for (const Case& c : cases) {
    const double wall = Median(c.wall), cpu = Median(c.cpu);
    std::printf("%-26s %10.2f %10.2f %12.2f %12.2f\n", c.label.c_str(), wall, cpu, wall - base_wall,
                cpu - base_cpu);
  }
  return 0;
}
