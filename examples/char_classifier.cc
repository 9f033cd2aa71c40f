// A user's own training program that checkpoints, resumes and can be re-run
// by `dgrr replay|rollback|bisect` (examples/README.md). It classifies short
// strings by which marker character dominates them: an embedding with mean
// pooling, a ReLU layer, dropout, a linear layer and softmax cross-entropy,
// trained with Adam on generated data that is reshuffled every epoch.
//
// What makes it resumable bitwise is that everything the next step reads is
// registered state: the parameters, Adam's moments and step count, and the
// data cursor (epoch, position). Everything random is a pure function of the
// seed and what it is for (an example's text, an epoch's order, one
// example's dropout mask at one step), so nothing else needs saving.
//
// usage: char_classifier --out DIR [--steps N] [--threads T] [--seed S]
//          [--lr X] [--ckpt-every N] [--mode full|trusted|sdc|off]
//          [--flip-bit STEP:BOUNDARY] [--reverse-reduction-from STEP]
//          [--forget-restore NAME]
// Running the same command again continues the run from its newest
// checkpoint (or does nothing more when it has finished).
//
// Under `mpirun -np R char_classifier ...` (when built in the dgrr tree with
// dgrr::mpi) each process is one rank: it computes its contiguous shard of
// every batch, the gradients meet in dgrr's canonical reduction over the
// communicator, and the run has the bits of the one-process run.
// Exit codes: 0 ok, 1 usage, 2 any error the session returns (one line),
// 128+signal after a SIGINT/SIGTERM stop (the checkpoint is written first).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <dgrr/dgrr.h>
#include "base/kill_point.h"  // test hook, inert unless DGRR_TEST_KILL_AT is set
#if defined(DGRR_HAVE_MPI)
#include "runtime/mpi_communicator.h"
#endif

namespace {

constexpr int kVocab = 12, kLen = 10, kClasses = 4, kEmbed = 8, kHidden = 16;
constexpr int kBatch = 16, kDataset = 128;  // the dataset is a whole number of batches
constexpr double kDropout = 0.1;
constexpr float kMarkerRate = 0.35f;
constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
// One contiguous parameter buffer: Emb[V][E], W1[H][E], b1[H], W2[C][H], b2[C].
constexpr int kEmb = 0, kW1 = kEmb + kVocab * kEmbed, kB1 = kW1 + kHidden * kEmbed;
constexpr int kW2 = kB1 + kHidden, kB2 = kW2 + kClasses * kHidden, kParams = kB2 + kClasses;
constexpr auto kDataPurpose = dgrr::rng::UserPurpose(7);

// Boundaries in the order one step records them. The per-example ones come
// first (in example order), then the batch's.
enum Site { kPool, kFc1, kDrop, kLogits, kGrads, kAdamM, kAdamV, kAdamParams, kSites };
constexpr const char* kSiteNames[kSites] = {"embed.pool.out", "fc1.out", "dropout.out", "fc2.logits",
                                            "grads.reduced", "adam.m", "adam.v", "adam.params"};

struct Config {
  std::string out;
  uint64_t steps = 24, seed = 1, ckpt_every = 0;
  int threads = 1;
  double lr = 0.03;  // as given; the update uses it as a float
  dgrr::RecordMode mode = dgrr::RecordMode::kFull;
  // Fault plants, so the tests can show dgrr naming each one.
  int64_t flip_step = -1;
  int flip_site = -1;
  int64_t reverse_from = -1;
  std::string forget;
};

struct ExampleResult {
  float pool[kEmbed], fc1[kHidden], drop[kHidden], logits[kClasses];
  float loss = 0;
  std::vector<float> grad = std::vector<float>(kParams);
};

// One bit of a tensor, for --flip-bit: the lowest exponent bit of its first
// non-zero element, so the value doubles or halves rather than vanishing.
void FlipOneBit(float* v, int n) {
  int i = 0;
  while (i + 1 < n && v[i] == 0.0f) ++i;
  uint32_t bits;
  std::memcpy(&bits, &v[i], 4);
  bits ^= 1u << 23;
  std::memcpy(&v[i], &bits, 4);
}

// Dataset item k is a pure function of (seed, k): a label, and a string in
// which the label's marker character is over-represented.
int MakeExample(const dgrr::rng::RngStreams& rng, uint64_t k, int* text) {
  dgrr::rng::PhiloxStream s = rng.Stream(kDataPurpose, {k});
  const int label = static_cast<int>(dgrr::rng::UniformBelow(s, kClasses));
  for (int t = 0; t < kLen; ++t) {
    const bool marker = dgrr::rng::UniformFloat(s) < kMarkerRate;
    text[t] = marker ? label : static_cast<int>(dgrr::rng::UniformBelow(s, kVocab));
  }
  return label;
}

// Forward and backward of one example into its own buffer. `flip` is the
// site to corrupt in this example (kSites: none).
void ForwardBackward(const dgrr::rng::RngStreams& rng, const std::vector<float>& p, uint64_t step,
                     uint64_t ordinal, uint64_t item, uint64_t keep_threshold, int flip,
                     ExampleResult* r) {
  int text[kLen];
  const int label = MakeExample(rng, item, text);
  for (int e = 0; e < kEmbed; ++e) {
    float a = 0;
    for (int t = 0; t < kLen; ++t) a += p[kEmb + text[t] * kEmbed + e];
    r->pool[e] = a / kLen;
  }
  if (flip == kPool) FlipOneBit(r->pool, kEmbed);
  for (int h = 0; h < kHidden; ++h) {
    float a = p[kB1 + h];
    for (int e = 0; e < kEmbed; ++e) a += p[kW1 + h * kEmbed + e] * r->pool[e];
    r->fc1[h] = a > 0 ? a : 0;
  }
  if (flip == kFc1) FlipOneBit(r->fc1, kHidden);
  // The mask is keyed by (step, example), so it is the same whichever
  // thread draws it and however the batch is split.
  uint8_t keep[kHidden];
  dgrr::rng::PhiloxStream ds = rng.Stream(dgrr::rng::Purpose::kDropout, {step, ordinal});
  dgrr::rng::FillBernoulliMask(ds, keep, kHidden, keep_threshold);
  const float scale = static_cast<float>(1.0 / (1.0 - kDropout));
  for (int h = 0; h < kHidden; ++h) r->drop[h] = keep[h] ? r->fc1[h] * scale : 0.0f;
  if (flip == kDrop) FlipOneBit(r->drop, kHidden);
  float top = -INFINITY;
  for (int c = 0; c < kClasses; ++c) {
    float a = p[kB2 + c];
    for (int h = 0; h < kHidden; ++h) a += p[kW2 + c * kHidden + h] * r->drop[h];
    r->logits[c] = a;
    top = std::max(top, a);
  }
  if (flip == kLogits) FlipOneBit(r->logits, kClasses);
  float prob[kClasses], total = 0;
  for (int c = 0; c < kClasses; ++c) total += prob[c] = std::exp(r->logits[c] - top);
  for (float& q : prob) q /= total;
  r->loss = -std::log(prob[label]);

  std::vector<float>& g = r->grad;
  std::fill(g.begin(), g.end(), 0.0f);
  float dpre[kHidden] = {};
  for (int c = 0; c < kClasses; ++c) {
    const float dl = prob[c] - (c == label ? 1.0f : 0.0f);
    g[kB2 + c] = dl;
    for (int h = 0; h < kHidden; ++h) {
      g[kW2 + c * kHidden + h] = dl * r->drop[h];
      dpre[h] += dl * p[kW2 + c * kHidden + h];
    }
  }
  float dpool[kEmbed] = {};
  for (int h = 0; h < kHidden; ++h) {
    dpre[h] = keep[h] && r->fc1[h] > 0 ? dpre[h] * scale : 0.0f;
    g[kB1 + h] = dpre[h];
    for (int e = 0; e < kEmbed; ++e) {
      g[kW1 + h * kEmbed + e] = dpre[h] * r->pool[e];
      dpool[e] += dpre[h] * p[kW1 + h * kEmbed + e];
    }
  }
  for (int t = 0; t < kLen; ++t) {
    for (int e = 0; e < kEmbed; ++e) g[kEmb + text[t] * kEmbed + e] += dpool[e] / kLen;
  }
}

// The planted reduction-order change: a sequential sum from the last example.
std::vector<float> ReversedSum(const std::vector<ExampleResult>& v) {
  std::vector<float> a = v.back().grad;
  for (size_t k = v.size() - 1; k-- > 0;) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += v[k].grad[i];
  }
  return a;
}

// Every example's gradient into `results`, from the ranks that computed them
// (ranks hold contiguous shards in rank order).
dgrr::Status GatherGradients(dgrr::Communicator& comm, int lo, int hi, std::vector<ExampleResult>* results) {
  std::vector<size_t> counts(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    const int rlo = kBatch * r / comm.size(), rhi = kBatch * (r + 1) / comm.size();
    counts[static_cast<size_t>(r)] = static_cast<size_t>(rhi - rlo) * kParams * sizeof(float);
  }
  std::vector<float> mine, all(static_cast<size_t>(kBatch) * kParams);
  for (int i = lo; i < hi; ++i) mine.insert(mine.end(), (*results)[i].grad.begin(), (*results)[i].grad.end());
  DGRR_RETURN_IF_ERROR(comm.AllGatherV(mine.data(), counts, all.data()));
  for (int i = 0; i < kBatch; ++i) {
    (*results)[i].grad.assign(all.begin() + static_cast<ptrdiff_t>(i) * kParams,
                              all.begin() + static_cast<ptrdiff_t>(i + 1) * kParams);
  }
  return dgrr::Status::OK();
}

// The signal handler's only way in: RequestStop is async-signal-safe.
std::atomic<dgrr::Session*> g_session{nullptr};
volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) {
  g_signal = sig;
  if (dgrr::Session* s = g_session.load()) s->RequestStop();
}

// Everything that decides the run's numbers, and nothing that does not
// (threads, the recording mode, the checkpoint schedule): a re-run with
// other settings here is a different run and is refused on resume.
std::string ConfigJson(const Config& cfg) {
  nlohmann::ordered_json j;
  j["program"] = "char_classifier";
  j["steps"] = cfg.steps;
  j["seed"] = cfg.seed;
  j["lr"] = cfg.lr;
  j["batch"] = kBatch;
  j["dataset"] = kDataset;
  j["dropout"] = kDropout;
  if (cfg.flip_step >= 0) j["flip_bit"] = std::to_string(cfg.flip_step) + ":" + kSiteNames[cfg.flip_site];
  if (cfg.reverse_from >= 0) j["reverse_reduction_from"] = cfg.reverse_from;
  if (!cfg.forget.empty()) j["forget_restore"] = cfg.forget;
  return j.dump();
}

// This process's communicator: MPI's when an MPI launcher started it (and
// this build has dgrr::mpi), otherwise a world of one.
struct Ranks {
  dgrr::InProcessGroup alone{1};
  std::unique_ptr<dgrr::Communicator> mpi;
  dgrr::Communicator& comm() { return mpi ? *mpi : *alone.ranks[0]; }
};

dgrr::Status OpenRanks(Ranks* ranks) {
#if defined(DGRR_HAVE_MPI)
  for (const char* launcher_variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(launcher_variable) == nullptr) continue;
    DGRR_ASSIGN_OR_RETURN(ranks->mpi, dgrr::OpenMpiCommunicator());
    break;
  }
#else
  (void)ranks;
#endif
  return dgrr::Status::OK();
}

dgrr::Status Train(const Config& cfg) {
  Ranks ranks;
  DGRR_RETURN_IF_ERROR(OpenRanks(&ranks));
  dgrr::Communicator& comm = ranks.comm();
  // This rank's examples of every batch: [lo, hi).
  const int lo = kBatch * comm.rank() / comm.size(), hi = kBatch * (comm.rank() + 1) / comm.size();
  dgrr::SessionOptions o;
  o.rank = comm.rank();
  o.world_size = comm.size();
  o.communicator = &comm;
  o.run_dir = cfg.out;
  o.seed = cfg.seed;
  o.threads = cfg.threads;
  o.mode = cfg.mode;
  o.open_mode = dgrr::OpenMode::kContinue;  // the same command resumes
  o.checkpoint_every = cfg.ckpt_every;
  o.total_steps = cfg.steps;
  o.config_json = ConfigJson(cfg);
  nlohmann::ordered_json build;
  build["name"] = "char_classifier";
  build["compiler"] = __VERSION__;
#ifdef CHAR_CLASSIFIER_CXX_FLAGS
  build["cxx_flags"] = CHAR_CLASSIFIER_CXX_FLAGS;
#endif
  o.program_info_json = build.dump();
  DGRR_ASSIGN_OR_RETURN(auto session, dgrr::Open(o));
  dgrr::Session& s = *session;
  g_session.store(&s);
  if (g_signal != 0) s.RequestStop();  // a signal that came before the session did

  std::vector<float> params(kParams), m(kParams, 0.0f), v(kParams, 0.0f);
  uint64_t adam_t = 0;
  uint64_t cursor[2] = {0, 0};  // epoch, position in the epoch's order
  dgrr::rng::PhiloxStream init = s.rng().Stream(dgrr::rng::Purpose::kInit, {0});
  dgrr::rng::FillNormalFloat(init, params.data(), kParams, 0.0, 0.3);
  const std::vector<dgrr::StateEntry> state = {
      {"params", params.data(), kParams * 4, dgrr::DType::kF32, {kParams}, dgrr::StateRole::kParameter},
      {"adam.m", m.data(), kParams * 4, dgrr::DType::kF32, {kParams}, dgrr::StateRole::kOptimizer},
      {"adam.v", v.data(), kParams * 4, dgrr::DType::kF32, {kParams}, dgrr::StateRole::kOptimizer},
      {"adam.t", &adam_t, 8, dgrr::DType::kU64, {1}, dgrr::StateRole::kCounter},
      {"data.cursor", cursor, 16, dgrr::DType::kU64, {2}, dgrr::StateRole::kCursor}};
  for (const dgrr::StateEntry& entry : state) {
    if (entry.name != cfg.forget) DGRR_RETURN_IF_ERROR(s.state().Register(entry));
  }
  using dgrr::OpKind;
  using dgrr::trace::Direction;
  using dgrr::trace::Phase;
  // Trusted mode skips kMatmul and kElementwise outputs; pooling and dropout
  // are neither (a reduction, a random mask), so it keeps them.
  const Phase phases[kSites] = {Phase::kForward, Phase::kForward, Phase::kForward, Phase::kForward,
                                Phase::kCollective, Phase::kOptimizer, Phase::kOptimizer, Phase::kOptimizer};
  const OpKind kinds[kSites] = {OpKind::kOther, OpKind::kMatmul, OpKind::kOther, OpKind::kMatmul,
                                OpKind::kCollective, OpKind::kOptimizer, OpKind::kOptimizer, OpKind::kOptimizer};
  dgrr::BoundaryHandle at[kSites];
  for (int k = 0; k < kSites; ++k) {
    DGRR_ASSIGN_OR_RETURN(at[k], s.DeclareBoundary(kSiteNames[k], phases[k], Direction::kOutput, kinds[k]));
  }
  DGRR_ASSIGN_OR_RETURN(uint64_t keep, dgrr::rng::BernoulliThreshold(1.0 - kDropout));

  // Fresh run: 0. Otherwise the state above has just been overwritten from
  // the newest checkpoint and the trace cut back to it.
  DGRR_ASSIGN_OR_RETURN(const uint64_t start, s.Resume());
  std::vector<ExampleResult> results(kBatch);
  const float lr = static_cast<float>(cfg.lr);
  std::vector<uint32_t> order;
  uint64_t order_epoch = UINT64_MAX;
  // The loop's errors, the program's own included (a communicator's, say),
  // go to the session before it closes: under dgrr replay, rollback or bisect
  // its result file then says why the re-execution stopped (docs/api.md).
  auto loop = [&]() -> dgrr::Status {
    for (uint64_t step = start; step < cfg.steps; ++step) {
      DGRR_RETURN_IF_ERROR(s.BeginStep(step));
      if (order_epoch != cursor[0]) {
        DGRR_ASSIGN_OR_RETURN(order, s.rng().EpochPermutation(cursor[0], kDataset));
        order_epoch = cursor[0];
      }
      const uint64_t first = cursor[0] * kDataset + cursor[1];  // examples seen before this batch
      const bool flip_now = static_cast<int64_t>(step) == cfg.flip_step;
      std::vector<std::thread> workers;
      for (int w = 0; w < cfg.threads; ++w) {
        workers.emplace_back([&, w] {
          for (int i = lo + w; i < hi; i += cfg.threads) {
            const int flip = flip_now && i == 0 ? cfg.flip_site : kSites;
            ForwardBackward(s.rng(), params, step, first + i, order[cursor[1] + i], keep, flip, &results[i]);
          }
        });
      }
      for (auto& w : workers) w.join();

      // Recorded from this thread in program order, whatever the threads did.
      for (int i = lo; i < hi; ++i) {
        const dgrr::ExampleRange one{first + i, 1};
        ExampleResult& r = results[i];
        const std::pair<float*, int64_t> tensors[] = {{r.pool, kEmbed}, {r.fc1, kHidden}, {r.drop, kHidden},
                                                      {r.logits, kClasses}};
        for (int k = kPool; k <= kLogits; ++k) {
          DGRR_ASSIGN_OR_RETURN(auto t, dgrr::MakeTensorRef(tensors[k].first, dgrr::DType::kF32, {tensors[k].second}));
          DGRR_RETURN_IF_ERROR(s.Record(at[k], t, one));
        }
      }
      const bool reversed = cfg.reverse_from >= 0 && step >= static_cast<uint64_t>(cfg.reverse_from);
      // dgrr's canonical tree over the whole batch, whatever the number of
      // ranks and threads; the planted reversal needs every example's gradient.
      std::vector<float> grad(kParams);
      if (reversed) {
        DGRR_RETURN_IF_ERROR(GatherGradients(comm, lo, hi, &results));
        grad = ReversedSum(results);
      } else {
        std::vector<float*> shard;
        for (int i = lo; i < hi; ++i) shard.push_back(results[i].grad.data());
        DGRR_RETURN_IF_ERROR(dgrr::CanonicalAllReduce(comm, shard, lo, kBatch, kParams, grad.data(), 1));
      }
      for (float& g : grad) g *= 1.0f / kBatch;
      // A planted flip corrupts a tensor before anything reads it.
      auto plant = [&](int site, std::vector<float>& t) {
        if (flip_now && cfg.flip_site == site) FlipOneBit(t.data(), kParams);
      };
      plant(kGrads, grad);
      ++adam_t;
      const float c1 = 1.0f - std::pow(kBeta1, static_cast<float>(adam_t));
      const float c2 = 1.0f - std::pow(kBeta2, static_cast<float>(adam_t));
      for (int k = 0; k < kParams; ++k) {
        m[k] = kBeta1 * m[k] + (1 - kBeta1) * grad[k];
        v[k] = kBeta2 * v[k] + (1 - kBeta2) * grad[k] * grad[k];
      }
      plant(kAdamM, m);
      plant(kAdamV, v);
      for (int k = 0; k < kParams; ++k) params[k] -= lr * (m[k] / c1) / (std::sqrt(v[k] / c2) + kEps);
      plant(kAdamParams, params);
      const dgrr::ExampleRange batch{first, kBatch};
      const float* const after[] = {grad.data(), m.data(), v.data(), params.data()};
      for (int k = kGrads; k <= kAdamParams; ++k) {
        DGRR_ASSIGN_OR_RETURN(auto t, dgrr::MakeTensorRef(after[k - kGrads], dgrr::DType::kF32, {kParams}));
        DGRR_RETURN_IF_ERROR(s.Record(at[k], t, batch));
      }
      std::vector<float> mine, losses;
      for (int i = lo; i < hi; ++i) mine.push_back(results[i].loss);
      DGRR_RETURN_IF_ERROR(dgrr::GatherExampleScalars(comm, mine, lo, kBatch, &losses));
      float loss = 0;
      for (float l : losses) loss += l;  // in example order
      cursor[1] += kBatch;
      if (cursor[1] == kDataset) cursor[0] += 1, cursor[1] = 0;
      DGRR_RETURN_IF_ERROR(s.EndStep(step, loss / kBatch));
      // Tests stop the program here (SIGKILL, or SIGTERM to exercise the
      // handler) on progress rather than on the clock.
      dgrr::KillPoint("step", static_cast<int64_t>(step), comm.rank());
      if (comm.rank() == 0 && (step % 8 == 0 || step + 1 == cfg.steps)) std::printf("step %llu loss %.6f\n", (unsigned long long)step, loss / kBatch);
      if (s.ShouldCheckpoint(step)) DGRR_RETURN_IF_ERROR(s.Checkpoint(step));
      if (s.ShouldStop(step)) break;
    }
    return dgrr::Status::OK();
  };
  s.DeferError(loop());
  g_session.store(nullptr);
  return s.Close();
}

bool ParseUint(const char* text, uint64_t* out) {
  char* end = nullptr;
  if (text == nullptr || *text < '0' || *text > '9') return false;
  *out = std::strtoull(text, &end, 10);
  return *end == '\0';
}

bool ParseArgs(int argc, char** argv, Config* cfg) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[++i] : nullptr;
    uint64_t n = 0;
    bool ok = v != nullptr;
    if (ok && a == "--out") {
      cfg->out = v;
    } else if (a == "--steps" || a == "--threads" || a == "--seed" || a == "--ckpt-every" ||
               a == "--reverse-reduction-from") {
      ok = ok && ParseUint(v, &n);
      if (a == "--steps") cfg->steps = n;
      if (a == "--threads") cfg->threads = static_cast<int>(std::min<uint64_t>(n, 256));
      if (a == "--seed") cfg->seed = n;
      if (a == "--ckpt-every") cfg->ckpt_every = n;
      if (a == "--reverse-reduction-from") cfg->reverse_from = static_cast<int64_t>(n);
    } else if (ok && a == "--lr") {
      char* end = nullptr;
      cfg->lr = std::strtod(v, &end);
      ok = *end == '\0' && cfg->lr > 0 && std::isfinite(cfg->lr);
    } else if (ok && a == "--mode") {
      auto mode = dgrr::ParseRecordMode(v);
      ok = mode.has_value();
      if (ok) cfg->mode = *mode;
    } else if (ok && a == "--flip-bit") {
      const char* colon = std::strchr(v, ':');
      ok = colon != nullptr && ParseUint(std::string(v, colon).c_str(), &n);
      cfg->flip_step = static_cast<int64_t>(n);
      for (int k = 0; ok && k < kSites; ++k) {
        if (std::strcmp(colon + 1, kSiteNames[k]) == 0) cfg->flip_site = k;
      }
      ok = ok && cfg->flip_site >= 0;
    } else if (ok && a == "--forget-restore") {
      cfg->forget = v;
      ok = cfg->forget == "params" || cfg->forget == "adam.m" || cfg->forget == "adam.v" ||
           cfg->forget == "adam.t" || cfg->forget == "data.cursor";
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "char_classifier: bad option %s%s%s\n", a.c_str(), v ? " " : "", v ? v : "");
      return false;
    }
  }
  if (cfg->out.empty() || cfg->steps < 1 || cfg->threads < 1) {
    std::fprintf(stderr,
                 "usage: char_classifier --out DIR [--steps N>0] [--threads T>0] [--seed S] [--lr X] "
                 "[--ckpt-every N] [--mode full|trusted|sdc|off] [--flip-bit STEP:BOUNDARY] "
                 "[--reverse-reduction-from STEP] [--forget-restore NAME]\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  if (!ParseArgs(argc, argv, &cfg)) return 1;
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const dgrr::Status s = Train(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "char_classifier: %s\n", s.ToString().c_str());
    return 2;
  }
  return g_signal != 0 ? 128 + g_signal : 0;
}
