// A small user training program on <dgrr/dgrr.h>, for the re-execution
// tests: a linear layer y = W x on generated data, SGD with momentum,
// checkpoints every 2 steps, and flags that plant the faults the commands
// must find.
//
// usage: dgrr_toy_program --out DIR [--steps N] [--flip STEP] [--forget-restore]
//   --flip STEP        flips one bit of the layer's output at STEP (the
//                      recorded boundary "fc.out", and everything after it)
//   --forget-restore   does not register the momentum buffer as state, so a
//                      resumed run starts that step with zero momentum
// Environment (not recorded in launch.json, so only a test's replay sees it):
//   TOY_PAUSE_AT_STEP=N, TOY_PAUSE_MARKER=PATH: after step N, create PATH and
//   wait (at most a minute) until a SIGINT/SIGTERM asks the session to stop.
//   TOY_SKIP_RESUME=1: never call Session::Resume() (a program's bug).
#include <signal.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <dgrr/dgrr.h>

namespace {

constexpr int kIn = 8, kOut = 4, kBatch = 4;
constexpr float kLearningRate = 0.1f, kMomentum = 0.9f;
constexpr auto kDataPurpose = dgrr::rng::UserPurpose(7);

struct Config {
  std::string out;
  uint64_t steps = 6;
  int64_t flip_step = -1;
  bool forget_restore = false;
};

dgrr::Session* g_session = nullptr;
void OnSignal(int) {
  if (g_session != nullptr) g_session->RequestStop();
}

// The test hook: tells the test where the loop is, then waits for its signal.
void PauseIfAsked(const dgrr::Session& s, uint64_t step) {
  const char* at = std::getenv("TOY_PAUSE_AT_STEP");
  const char* marker = std::getenv("TOY_PAUSE_MARKER");
  if (at == nullptr || marker == nullptr || std::strtoull(at, nullptr, 10) != step) return;
  if (std::FILE* f = std::fopen(marker, "w")) std::fclose(f);
  const struct timespec tick = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 6000 && !s.ShouldStop(step); ++i) nanosleep(&tick, nullptr);
}

dgrr::Status Train(const Config& cfg) {
  dgrr::SessionOptions o;
  o.run_dir = cfg.out;
  o.seed = 1;
  o.open_mode = dgrr::OpenMode::kContinue;
  o.checkpoint_every = 2;
  o.total_steps = cfg.steps;
  o.config_json = R"({"program":"toy","lr":0.1})";
  DGRR_ASSIGN_OR_RETURN(auto session, dgrr::Open(o));
  dgrr::Session& s = *session;
  g_session = &s;
  using dgrr::trace::Direction;
  using dgrr::trace::Phase;

  std::vector<float> w(kOut * kIn), momentum(kOut * kIn, 0.0f);
  dgrr::rng::PhiloxStream init = s.rng().Stream(dgrr::rng::Purpose::kInit, {0});
  dgrr::rng::FillNormalFloat(init, w.data(), w.size(), 0.0, 0.5);
  DGRR_RETURN_IF_ERROR(s.state().Register({"fc.weight", w.data(), w.size() * sizeof(float), dgrr::DType::kF32,
                                           {kOut, kIn}, dgrr::StateRole::kParameter}));
  if (!cfg.forget_restore) {
    DGRR_RETURN_IF_ERROR(s.state().Register({"sgd.momentum", momentum.data(), momentum.size() * sizeof(float),
                                             dgrr::DType::kF32, {kOut, kIn}, dgrr::StateRole::kOptimizer}));
  }
  DGRR_ASSIGN_OR_RETURN(auto fc_out, s.DeclareBoundary("fc.out", Phase::kForward, Direction::kOutput,
                                                       dgrr::OpKind::kMatmul));
  DGRR_ASSIGN_OR_RETURN(auto fc_grad, s.DeclareBoundary("fc.weight.grad", Phase::kBackward, Direction::kOutput,
                                                        dgrr::OpKind::kMatmul));
  DGRR_ASSIGN_OR_RETURN(auto sgd_out, s.DeclareBoundary("sgd.params", Phase::kOptimizer, Direction::kOutput,
                                                        dgrr::OpKind::kOptimizer));
  // TOY_SKIP_RESUME: a program that forgets Resume() (its replay must say so).
  uint64_t start = 0;
  if (std::getenv("TOY_SKIP_RESUME") == nullptr) {
    DGRR_ASSIGN_OR_RETURN(start, s.Resume());
  }

  for (uint64_t step = start; step < cfg.steps; ++step) {
    DGRR_RETURN_IF_ERROR(s.BeginStep(step));
    const uint64_t first = step * kBatch;
    float x[kBatch][kIn], target[kBatch][kOut], y[kBatch][kOut];
    for (int e = 0; e < kBatch; ++e) {
      dgrr::rng::PhiloxStream data = s.rng().Stream(kDataPurpose, {first + e});
      dgrr::rng::FillNormalFloat(data, x[e], kIn);
      dgrr::rng::FillNormalFloat(data, target[e], kOut);
      for (int o2 = 0; o2 < kOut; ++o2) {
        float a = 0;
        for (int i = 0; i < kIn; ++i) a += w[o2 * kIn + i] * x[e][i];
        y[e][o2] = a;
      }
    }
    if (static_cast<int64_t>(step) == cfg.flip_step) {
      uint32_t bits;
      std::memcpy(&bits, &y[1][2], sizeof bits);
      bits ^= 1u << 20;
      std::memcpy(&y[1][2], &bits, sizeof bits);
    }
    const dgrr::ExampleRange batch{first, kBatch};
    DGRR_ASSIGN_OR_RETURN(auto yt, dgrr::MakeTensorRef(y, dgrr::DType::kF32, {kBatch, kOut}));
    DGRR_RETURN_IF_ERROR(s.Record(fc_out, yt, batch));

    // Loss 0.5 * mean ||y - t||^2; dW = mean (y - t) x^T, examples in order.
    std::vector<float> grad(w.size(), 0.0f);
    float loss = 0;
    for (int e = 0; e < kBatch; ++e) {
      for (int o2 = 0; o2 < kOut; ++o2) {
        const float d = y[e][o2] - target[e][o2];
        loss += 0.5f * d * d;
        for (int i = 0; i < kIn; ++i) grad[o2 * kIn + i] += d * x[e][i] / kBatch;
      }
    }
    loss /= kBatch;
    DGRR_ASSIGN_OR_RETURN(auto gt, dgrr::MakeTensorRef(grad.data(), dgrr::DType::kF32, {kOut, kIn}));
    DGRR_RETURN_IF_ERROR(s.Record(fc_grad, gt, batch));
    for (size_t k = 0; k < w.size(); ++k) {
      momentum[k] = kMomentum * momentum[k] + grad[k];
      w[k] -= kLearningRate * momentum[k];
    }
    DGRR_ASSIGN_OR_RETURN(auto wt, dgrr::MakeTensorRef(w.data(), dgrr::DType::kF32, {kOut, kIn}));
    DGRR_RETURN_IF_ERROR(s.Record(sgd_out, wt, batch));
    DGRR_RETURN_IF_ERROR(s.EndStep(step, loss));
    std::printf("step %llu loss %.6f\n", static_cast<unsigned long long>(step), loss);
    std::fflush(stdout);
    PauseIfAsked(s, step);
    if (s.ShouldCheckpoint(step)) DGRR_RETURN_IF_ERROR(s.Checkpoint(step));
    if (s.ShouldStop(step)) break;
  }
  dgrr::Status closed = s.Close();
  g_session = nullptr;
  return closed;
}

bool ParseArgs(int argc, char** argv, Config* cfg) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--forget-restore") {
      cfg->forget_restore = true;
      continue;
    }
    if ((a != "--out" && a != "--steps" && a != "--flip") || i + 1 >= argc) {
      std::fprintf(stderr, "toy_program: bad argument %s\n", a.c_str());
      return false;
    }
    const char* v = argv[++i];
    if (a == "--out") cfg->out = v;
    if (a == "--steps") cfg->steps = std::strtoull(v, nullptr, 10);
    if (a == "--flip") cfg->flip_step = std::strtoll(v, nullptr, 10);
  }
  return !cfg->out.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  if (!ParseArgs(argc, argv, &cfg)) {
    std::fprintf(stderr, "usage: toy_program --out DIR [--steps N] [--flip STEP] [--forget-restore]\n");
    return 1;
  }
  ::signal(SIGINT, OnSignal);
  ::signal(SIGTERM, OnSignal);
  dgrr::Status s = Train(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "toy_program: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
