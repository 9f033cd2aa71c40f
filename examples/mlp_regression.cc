// A user's own training program on dgrr's public API: a two-layer MLP
// regression on generated data, with dropout and data-parallel worker threads.
// It is not the reference model; it shows what any training loop needs to do
// to be reproducible and recorded:
//
//   1. open a Session for the rank (controls, environment, trace);
//   2. draw every random number from a stream keyed by what it is for
//      (the example's data by example index, its dropout mask by step and
//      example), never from a shared generator;
//   3. compute per-example gradients in parallel, then reduce them in one
//      fixed tree, so the result does not depend on the thread count;
//   4. record boundaries from the rank's thread in program order;
//   5. register the parameters and end each step with the loss.
//
// usage: mlp_regression --out DIR [--steps N] [--threads T] [--seed S]
//                       [--batch B] [--mode full|trusted|sdc|off] [--overwrite]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dgrr/dgrr.h>

namespace {

constexpr int kIn = 8;       // input features
constexpr int kHidden = 16;  // hidden units
constexpr float kDropout = 0.1f;
constexpr float kLearningRate = 0.05f;
// Parameter layout in one contiguous buffer: W1[H][D], b1[H], W2[H], b2.
constexpr int kW1 = 0, kB1 = kW1 + kHidden * kIn, kW2 = kB1 + kHidden, kB2 = kW2 + kHidden;
constexpr int kParams = kB2 + 1;
constexpr auto kDataPurpose = dgrr::rng::UserPurpose(1);

struct Config {
  std::string out;
  int steps = 20, threads = 1, batch = 32;
  uint64_t seed = 1;
  dgrr::RecordMode mode = dgrr::RecordMode::kFull;
  bool overwrite = false;
};

// Everything one example produces: activations to record and its gradient.
struct ExampleResult {
  float hidden[kHidden];  // after ReLU and dropout
  float output = 0, loss = 0;
  std::vector<float> grad = std::vector<float>(kParams);
};

// Example e's input and target are a pure function of (seed, e).
void MakeExample(const dgrr::rng::RngStreams& rng, uint64_t e, float* x, float* y) {
  dgrr::rng::PhiloxStream s = rng.Stream(kDataPurpose, {e});
  dgrr::rng::FillNormalFloat(s, x, kIn);
  float z = 0;
  for (int j = 0; j < kIn; ++j) z += x[j] * static_cast<float>(j + 1) / kIn;
  *y = std::tanh(z);
}

void ForwardBackward(const dgrr::rng::RngStreams& rng, const std::vector<float>& p,
                     uint64_t step, uint64_t e, uint64_t keep_threshold, ExampleResult* r) {
  float x[kIn], y;
  MakeExample(rng, e, x, &y);
  uint8_t keep[kHidden];
  dgrr::rng::PhiloxStream ds = rng.Stream(dgrr::rng::Purpose::kDropout, {step, e});
  dgrr::rng::FillBernoulliMask(ds, keep, kHidden, keep_threshold);
  const float scale = 1.0f / (1.0f - kDropout);
  float pre[kHidden];
  r->output = p[kB2];
  for (int h = 0; h < kHidden; ++h) {
    float a = p[kB1 + h];
    for (int j = 0; j < kIn; ++j) a += p[kW1 + h * kIn + j] * x[j];
    pre[h] = a;
    r->hidden[h] = (a > 0 ? a : 0) * (keep[h] ? scale : 0.0f);
    r->output += p[kW2 + h] * r->hidden[h];
  }
  const float dout = r->output - y;
  r->loss = 0.5f * dout * dout;
  std::fill(r->grad.begin(), r->grad.end(), 0.0f);
  r->grad[kB2] = dout;
  for (int h = 0; h < kHidden; ++h) {
    r->grad[kW2 + h] = dout * r->hidden[h];
    const float dpre = pre[h] > 0 && keep[h] ? dout * p[kW2 + h] * scale : 0.0f;
    r->grad[kB1 + h] = dpre;
    for (int j = 0; j < kIn; ++j) r->grad[kW1 + h * kIn + j] = dpre * x[j];
  }
}

// Sum of v[lo, hi) in the canonical tree: split at the largest power of two
// below the length. The same tree for any thread count, so the same bits.
std::vector<float> TreeSum(const std::vector<ExampleResult>& v, size_t lo, size_t hi) {
  if (hi - lo == 1) return v[lo].grad;
  size_t half = 1;
  while (half * 2 < hi - lo) half *= 2;
  std::vector<float> a = TreeSum(v, lo, lo + half), b = TreeSum(v, lo + half, hi);
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}
float TreeSumLoss(const std::vector<ExampleResult>& v, size_t lo, size_t hi) {
  if (hi - lo == 1) return v[lo].loss;
  size_t half = 1;
  while (half * 2 < hi - lo) half *= 2;
  return TreeSumLoss(v, lo, lo + half) + TreeSumLoss(v, lo + half, hi);
}

dgrr::Status Train(const Config& cfg) {
  dgrr::SessionOptions o;
  o.run_dir = cfg.out;
  o.seed = cfg.seed;
  o.threads = cfg.threads;
  o.mode = cfg.mode;
  o.open_mode = cfg.overwrite ? dgrr::OpenMode::kOverwrite : dgrr::OpenMode::kCreate;
  o.config_json = "{\"program\":\"mlp_regression\",\"steps\":" + std::to_string(cfg.steps) +
                  ",\"batch\":" + std::to_string(cfg.batch) + "}";
  DGRR_ASSIGN_OR_RETURN(auto session, dgrr::Session::Open(o));
  dgrr::Session& s = *session;
  using dgrr::trace::Direction;
  using dgrr::trace::Phase;

  // Initialisation from the (init) stream: independent of everything else.
  std::vector<float> params(kParams);
  dgrr::rng::PhiloxStream init = s.rng().Stream(dgrr::rng::Purpose::kInit, {0});
  dgrr::rng::FillNormalFloat(init, params.data(), kParams, 0.0, 0.3);
  DGRR_RETURN_IF_ERROR(s.state().Register({"params", params.data(), params.size() * sizeof(float),
                                           dgrr::DType::kF32, {kParams},
                                           dgrr::StateRole::kParameter}));
  DGRR_ASSIGN_OR_RETURN(auto hidden_out, s.DeclareBoundary("mlp.hidden.out", Phase::kForward,
                                                           Direction::kOutput,
                                                           dgrr::OpKind::kElementwise));
  DGRR_ASSIGN_OR_RETURN(auto pred_out, s.DeclareBoundary("mlp.pred.out", Phase::kForward,
                                                         Direction::kOutput, dgrr::OpKind::kMatmul));
  DGRR_ASSIGN_OR_RETURN(auto grad_out, s.DeclareBoundary("grads.reduced", Phase::kCollective,
                                                         Direction::kOutput,
                                                         dgrr::OpKind::kCollective));
  DGRR_ASSIGN_OR_RETURN(auto params_out, s.DeclareBoundary("sgd.params", Phase::kOptimizer,
                                                           Direction::kOutput,
                                                           dgrr::OpKind::kOptimizer));
  DGRR_ASSIGN_OR_RETURN(uint64_t keep, dgrr::rng::BernoulliThreshold(1.0 - kDropout));

  std::vector<ExampleResult> results(static_cast<size_t>(cfg.batch));
  for (int step = 0; step < cfg.steps; ++step) {
    DGRR_RETURN_IF_ERROR(s.BeginStep(step));
    const uint64_t first = static_cast<uint64_t>(step) * cfg.batch;
    // Workers take examples round-robin; which worker ran which example
    // cannot matter, because each example has its own streams and buffer.
    std::vector<std::thread> workers;
    for (int t = 0; t < cfg.threads; ++t) {
      workers.emplace_back([&, t] {
        for (int i = t; i < cfg.batch; i += cfg.threads) {
          ForwardBackward(s.rng(), params, step, first + i, keep, &results[i]);
        }
      });
    }
    for (auto& w : workers) w.join();

    // Record in program order from the rank's thread.
    for (int i = 0; i < cfg.batch; ++i) {
      const dgrr::ExampleRange one{first + i, 1};
      DGRR_ASSIGN_OR_RETURN(auto h, dgrr::MakeTensorRef(results[i].hidden, dgrr::DType::kF32, {kHidden}));
      DGRR_RETURN_IF_ERROR(s.Record(hidden_out, h, one));
      DGRR_ASSIGN_OR_RETURN(auto y, dgrr::MakeTensorRef(&results[i].output, dgrr::DType::kF32, {1}));
      DGRR_RETURN_IF_ERROR(s.Record(pred_out, y, one));
    }
    std::vector<float> grad = TreeSum(results, 0, results.size());
    const float inv_batch = 1.0f / static_cast<float>(cfg.batch);
    for (float& g : grad) g *= inv_batch;
    const dgrr::ExampleRange batch{first, static_cast<uint32_t>(cfg.batch)};
    DGRR_ASSIGN_OR_RETURN(auto gt, dgrr::MakeTensorRef(grad.data(), dgrr::DType::kF32, {kParams}));
    DGRR_RETURN_IF_ERROR(s.Record(grad_out, gt, batch));
    for (int k = 0; k < kParams; ++k) params[k] -= kLearningRate * grad[k];
    DGRR_ASSIGN_OR_RETURN(auto pt, dgrr::MakeTensorRef(params.data(), dgrr::DType::kF32, {kParams}));
    DGRR_RETURN_IF_ERROR(s.Record(params_out, pt, batch));
    const float loss = TreeSumLoss(results, 0, results.size()) * inv_batch;
    DGRR_RETURN_IF_ERROR(s.EndStep(step, loss));
    if (step % 10 == 0 || step + 1 == cfg.steps) std::printf("step %d loss %.6f\n", step, loss);
  }
  return s.Close();
}

bool ParseArgs(int argc, char** argv, Config* cfg) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--overwrite") {
      cfg->overwrite = true;
      continue;
    }
    if (a != "--out" && a != "--steps" && a != "--threads" && a != "--seed" && a != "--batch" &&
        a != "--mode") {
      std::fprintf(stderr, "mlp_regression: unknown option %s\n", a.c_str());
      return false;
    }
    if ((v = next()) == nullptr) {
      std::fprintf(stderr, "mlp_regression: %s needs a value\n", a.c_str());
      return false;
    }
    if (a == "--out") cfg->out = v;
    if (a == "--steps") cfg->steps = std::atoi(v);
    if (a == "--threads") cfg->threads = std::atoi(v);
    if (a == "--batch") cfg->batch = std::atoi(v);
    if (a == "--seed") cfg->seed = std::strtoull(v, nullptr, 10);
    if (a == "--mode") {
      auto m = dgrr::ParseRecordMode(v);
      if (!m) {
        std::fprintf(stderr, "mlp_regression: unknown mode %s\n", v);
        return false;
      }
      cfg->mode = *m;
    }
  }
  if (cfg->out.empty() || cfg->steps < 1 || cfg->threads < 1 || cfg->batch < 1) {
    std::fprintf(stderr,
                 "usage: mlp_regression --out DIR [--steps N>0] [--threads T>0] [--seed S] "
                 "[--batch B>0] [--mode full|trusted|sdc|off] [--overwrite]\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  if (!ParseArgs(argc, argv, &cfg)) return dgrr::kExitUsage;
  dgrr::Status s = Train(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "mlp_regression: %s\n", s.message().c_str());
    return dgrr::ExitCodeFor(s);
  }
  return 0;
}
