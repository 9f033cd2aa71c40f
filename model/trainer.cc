#include "model/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <mutex>
#include <new>
#include <random>
#include <span>
#include <system_error>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "base/coding.h"
#include "base/file.h"
#include "base/kill_point.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/session_store.h"
#include "model/adamw.h"
#include "model/audit.h"
#include "model/batch.h"
#include "model/data_order.h"
#include "model/fault_injector.h"
#include "model/fault_reducers.h"
#include "model/faulting_observer.h"
#include "model/gpt.h"
#include "model/neighbour_audit.h"
#include "model/run_config.h"
#include "model/numerics.h"
#include "model/philox_masks.h"
#include "model/schedule.h"
#include "model/step_recorder.h"
#include "model/train_state.h"
#include "model/train_launch.h"
#include "model/training_program.h"
#include "replay/rollback.h"
#include "trace_format/reader.h"
#include "runtime/canonical_reduce.h"
#include "runtime/tree_reduce.h"
#include "rng/distributions.h"
#include "rng/rng_streams.h"
#include "runtime/json_input.h"
#include "runtime/metrics_log.h"
#include "runtime/session.h"
#include "runtime/session_seams.h"
#include "runtime/inprocess_communicator.h"

namespace dgrr::model {
namespace {

using Clock = std::chrono::steady_clock;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// One line naming the ranks whose value differs from rank 0's ("" when all agree).
template <typename T>
std::string RanksDiffering(const std::vector<T>& values) {
  std::string ranks;
  for (size_t r = 1; r < values.size(); ++r) {
    if (values[r] == values[0]) continue;
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  return ranks;
}

// One boundary of an example, as the model reports it.
struct ExampleBoundary {
  std::string name;
  uint64_t elements = 0;
  model::Phase phase = model::Phase::kForward;
  Operator op = Operator::kOther;
};

// Collects one example's boundaries, in order.
class NameCollector final : public BoundaryObserver {
 public:
  void OnBoundary(std::string_view name, model::Phase phase, Operator op, bool, const float*,
                  std::span<const int64_t> dims, uint64_t, uint32_t) override {
    uint64_t elements = 1;
    for (int64_t d : dims) elements *= static_cast<uint64_t>(d);
    boundaries.push_back({std::string(name), elements, phase, op});
  }
  std::vector<ExampleBoundary> boundaries;
};

// The `shared-rng` fault: one generator for all workers, drawn in whatever
// order they happen to ask (DETrain's motivating bug).
class SharedGeneratorMasks final : public DropoutMaskSource {
 public:
  SharedGeneratorMasks(const rng::RngStreams& rng, uint64_t step)
      : stream_(rng.Stream(rng::Purpose::kDropout, {step, ~0ull})) {}
  void FillKeepMask(uint64_t, int, DropoutSite, float p, uint8_t* keep, size_t n) const override {
    std::lock_guard<std::mutex> lock(mu_);
    rng::FillBernoulliMask(stream_, keep, n, rng::BernoulliThresholdUnchecked(1.0 - p));
  }

 private:
  mutable std::mutex mu_;
  mutable rng::PhiloxStream stream_;
};

}  // namespace

namespace {

// The per-example boundaries of `config` in order.
StatusOr<std::vector<ExampleBoundary>> PerExampleBoundaries(const GptConfig& config) {
  DGRR_RETURN_IF_ERROR(config.Validate());
  DGRR_ASSIGN_OR_RETURN(Gpt gpt, Gpt::Create(config));
  gpt.Initialize(SplitMixNormalFill(0));
  std::vector<uint8_t> tokens(static_cast<size_t>(config.seq_len) + 1, 'a');
  SplitMixDropoutMasks masks(0);
  NameCollector names;
  ExampleHooks hooks;
  hooks.observer = &names;
  hooks.masks = &masks;
  ExampleEngine<float> engine(config);
  std::vector<float> grad(gpt.num_parameters());
  engine.Forward(gpt.parameters(), tokens.data(), 0, hooks);
  engine.Backward(gpt.parameters(), tokens.data(), 0, grad.data(), hooks);
  return std::move(names.boundaries);
}

}  // namespace

StatusOr<std::vector<std::string>> PerExampleBoundaryNames(const GptConfig& config) {
  DGRR_ASSIGN_OR_RETURN(const auto boundaries, PerExampleBoundaries(config));
  std::vector<std::string> names;
  for (const auto& b : boundaries) names.push_back(b.name);
  return names;
}

// ---------------------------------------------------------------------------
// Shared state of one run, and each rank's own.
// ---------------------------------------------------------------------------
struct Trainer::Impl {
  struct Rank;
  explicit Impl(Trainer& t);
  Status RunRank(Rank& rank);
  Status RunRankBody(Rank& rank);
  Status RunSession(Rank& rank);
  Status AgreeOnRun(Rank& rank);
  Status AllReduceGradients(Rank& rank, int64_t step);
  Status Step(Rank& rank, int64_t step, bool* stop);
  Status Checkpoint(Rank& rank, int64_t step);
  Status OpenMetricsLog(int64_t first_step);
  const FaultSpec* FaultAt(FaultKind kind, int64_t step, int rank = -1) const;

  Trainer& t;
  GptConfig model;
  ParameterLayout layout;
  rng::RngStreams rng;
  LrSchedule schedule;
  RunId run_id = NewRunId();  // rank 0's is broadcast: the others' are unused
  size_t num_params;
  int shard;  // examples per rank
  std::vector<std::unique_ptr<Rank>> ranks;  // the ranks of this process (threads)
  Clock::time_point start;
  Clock::time_point step_start;  // rank 0: when the current step began
  std::function<void(const TrainProgress&)> progress_;
  std::unique_ptr<MetricsLog> metrics;     // rank 0 appends; null: not written
};

struct Trainer::Impl::Rank {
  Rank(Impl& impl, Communicator& comm)
      : impl(impl),
        comm(comm),
        r(comm.rank()),
        batch(impl.model, impl.t.options_.threads, static_cast<size_t>(impl.shard), impl.t.device_,
              impl.t.gemm_),
        params(impl.num_params),
        grad(impl.num_params),
        adamw(impl.layout, AdamWOptions{0.9f, 0.95f, 1e-8f, impl.t.preset_.train.weight_decay}),
        tokens(static_cast<size_t>(impl.shard) * impl.t.data_->window()),
        recorder(comm.rank(), static_cast<size_t>(impl.shard), impl.t.per_example_names_) {
    if (impl.t.device_ != Device::kCpu) {
      // Clipping and AdamW as device kernels too (the launcher was shown
      // to be available in Validate).
      auto launcher = MakeLauncher(impl.t.device_);
      if (launcher.ok()) optimizer_launcher = std::move(*launcher);
      adamw.set_launcher(optimizer_launcher.get());
    }
  }

  Impl& impl;
  // The only way to the other ranks: they may be threads of this process or
  // other processes, and this rank cannot tell.
  Communicator& comm;
  const int r;
  std::unique_ptr<Session> session;
  BatchGradients batch;
  std::vector<float> params, grad;
  // Before adamw, which keeps device buffers of this launcher's (destroyed
  // after it).
  std::unique_ptr<Launcher> optimizer_launcher;  // --device cuda-sim / cuda
  AdamW adamw;
  std::vector<uint8_t> tokens;
  StepRecorder recorder;  // the step's boundaries into the session
  uint64_t shard_first = 0;                       // global example index of the shard's first
  TensorFaultInjector fault;                       // the tensor fault due this step, if any
  uint64_t adamw_t = 0;   // AdamW's step count, as state
  uint64_t cursor = 0;    // global index of the next example, as state (fast-forwarded)
  std::unique_ptr<DataOrder> data_order;
  float loss = 0;
  RunId run_id{};  // rank 0's
  // Set when a stop request ended the run after step `stopped_after`
  // (rank 0 samples the request and broadcasts it: every rank stops there).
  int64_t stopped_after = -1;
  bool checkpoint_at_stop = false;
  int64_t end_step = 0;  // one past the last step this rank finished
  std::unique_ptr<NeighbourAudit> audit;  // --audit-every: made at the first audited step
};

Trainer::Impl::Impl(Trainer& t)
    : t(t),
      model(t.preset_.model),
      layout(t.preset_.model),
      rng(t.options_.seed),
      num_params(layout.total_size()),
      shard(t.batch_ / t.options_.ranks) {
  schedule.max_lr = t.lr_;
  schedule.min_lr = t.lr_ * 0.1f;
  schedule.warmup_steps = std::min<int64_t>(t.preset_.train.warmup_steps, t.options_.steps);
  schedule.total_steps = std::max<int64_t>(t.options_.steps, schedule.warmup_steps + 1);
}

const FaultSpec* Trainer::Impl::FaultAt(FaultKind kind, int64_t step, int rank) const {
  for (const auto& f : t.options_.faults) {
    if (f.kind == kind && f.step == static_cast<uint64_t>(step) && (rank < 0 || f.rank == rank)) {
      return &f;
    }
  }
  return nullptr;
}

// Whatever makes a rank fail, the others must not wait for it at a barrier.
Status Trainer::Impl::RunRank(Rank& rank) {
  const int r = rank.r;
  Status s;
  // Exceptions end here, on the rank's own thread, where an escaping one
  // would terminate the process: running out of memory for a large model or
  // batch is an error like any other.
  try {
    s = RunRankBody(rank);
  } catch (const std::bad_alloc&) {
    s = Status::IOError("rank " + std::to_string(r) + ": out of memory");
  } catch (const std::system_error& e) {
    s = Status::IOError("rank " + std::to_string(r) + ": " + e.what());
  } catch (const std::exception& e) {
    s = Status::Internal("rank " + std::to_string(r) + ": unexpected error: " + e.what());
  }
  if (!s.ok()) rank.comm.Abort(s);
  return s;
}

// Before anything is written: every rank runs the same configuration (one
// started with other flags or another data file is refused on every rank,
// naming it), and the ranks take rank 0's run id.
Status Trainer::Impl::AgreeOnRun(Rank& rank) {
  const std::string config = t.config_.dump();
  const uint64_t mine = Xxh3(config.data(), config.size());
  std::vector<uint64_t> digests(static_cast<size_t>(rank.comm.size()));
  DGRR_RETURN_IF_ERROR(rank.comm.AllGather(&mine, sizeof(mine), digests.data()));
  const std::string differing = RanksDiffering(digests);
  if (!differing.empty()) {
    return Status::FailedPrecondition("rank(s) " + differing + " of " + std::to_string(digests.size()) +
                                      " run a different configuration than rank 0 (every rank must be "
                                      "started with the same options)");
  }
  rank.run_id = run_id;
  return rank.comm.Broadcast(rank.run_id.data(), rank.run_id.size(), 0);
}

Status Trainer::Impl::RunRankBody(Rank& rank) {
  const int r = rank.r;
  DGRR_RETURN_IF_ERROR(AgreeOnRun(rank));
  SessionOptions o;
  o.run_dir = t.options_.out_dir;
  SessionSeams seams;
  seams.directory = t.directory_.get();  // locked by rank 0's process (null elsewhere)
  o.rank = r;
  o.world_size = t.options_.ranks;
  o.seed = t.options_.seed;
  o.threads = t.options_.threads;
  o.mode = t.options_.mode;
  // A fresh run's directory was checked and cleared up front; a resume with
  // checkpoints to resume from is the sessions' to decide (Session::Resume:
  // the resume point every rank's trace reaches, the cuts, the restore).
  o.open_mode = t.continue_run_ ? OpenMode::kContinue : OpenMode::kOverwrite;
  o.resume_fallback = t.options_.fallback;
  o.run_id = rank.run_id;
  o.config_json = t.config_.dump();
  // Checkpoints restore across recording modes and thread counts (bisect
  // re-executes an `sdc` run in `full`).
  o.state_config_json = t.StateConfigJson();
  o.communicator = &rank.comm;
  // Like any program: launch.json says how to start the run again, and a
  // control file (dgrr replay, rollback, bisect) is obeyed by the session.
  o.reexecutable = t.launch_.has_value();
  o.launch = t.launch_;
  // Checkpoints go through the session like any program's (Checkpoint, on
  // ShouldCheckpoint): the run's own schedule, a control file's steps, a stop.
  o.checkpoints = t.store_.get();
  o.checkpoint_every = static_cast<uint64_t>(t.options_.ckpt_every);
  o.plan_json = t.plan_json_;
  DGRR_ASSIGN_OR_RETURN(rank.session, Session::Open(o, seams));
  Session& s = *rank.session;
  Status status = RunSession(rank);
  // A failure the session did not see itself (this rank's SDC check, a peer
  // that failed) is the session's outcome too, for a control file's result.
  if (!status.ok()) s.DeferError(status);
  Status closed = s.Close();
  DGRR_RETURN_IF_ERROR(status.ok() ? closed : status);
  // Every trace closed before any rank reports.
  return rank.comm.Barrier();
}

Status Trainer::Impl::RunSession(Rank& rank) {
  const int r = rank.r;
  Session& s = *rank.session;
  if (t.control_) DGRR_RETURN_IF_ERROR(t.ValidateControlDumps());

  // Initialisation: every rank draws the same parameters from (init, tensor).
  DGRR_ASSIGN_OR_RETURN(Gpt gpt, Gpt::Create(model));
  gpt.Initialize([&](std::string_view, size_t tensor, float* out, size_t n) {
    rng::PhiloxStream st = rng.Stream(rng::Purpose::kInit, {static_cast<uint64_t>(tensor)});
    rng::FillNormalFloat(st, out, n);
  });
  std::memcpy(rank.params.data(), gpt.parameters(), num_params * sizeof(float));

  // The training state, each entry restored as the fast-forward plan says.
  DGRR_RETURN_IF_ERROR(RegisterTrainState(
      layout, {rank.params.data(), rank.adamw.m().data(), rank.adamw.v().data(), &rank.adamw_t, &rank.cursor},
      *t.plan_, s.state()));

  // Like any program: the session restores the state from the checkpoint
  // it resumes from (a control file's, or for --resume the newest one every
  // rank's trace reaches, the traces cut back to it and RESUMED recorded),
  // or returns 0 for a fresh start.
  DGRR_ASSIGN_OR_RETURN(const uint64_t start, s.Resume());
  const int64_t first_step = static_cast<int64_t>(start);
  if (first_step > 0) {
    if (!t.control_) {
      // The store's restorer left out the skip-restore faults' entries.
      for (const auto& name : t.restore_skip_) {
        DGRR_RETURN_IF_ERROR(s.RecordEvent(trace::EventKind::kFaultInjected, "skip-restore:" + name));
      }
    }
    rank.adamw.set_step(static_cast<int64_t>(rank.adamw_t));
    // Fast-forward (the plan's `cursor`): the data order is a pure function of
    // the step, so the cursor is computed, not replayed step by step.
    rank.cursor = static_cast<uint64_t>(first_step) * static_cast<uint64_t>(t.batch_);
  }
  if (&rank == ranks[0].get()) t.first_step_ = first_step;
  if (r == 0 && !t.control_) {
    // A resume whose traces reach no checkpoint started over: the
    // checkpoints it could not use go, as when there were none
    // (Trainer::PrepareResume).
    if (first_step == 0 && t.continue_run_) DGRR_RETURN_IF_ERROR(t.RemoveCheckpoints());
    // Rank 0's metrics log, cut back to the checkpoint resumed from (or
    // started afresh); a re-execution under a control file keeps none.
    DGRR_RETURN_IF_ERROR(OpenMetricsLog(first_step));
  }

  // Declare every per-example boundary before workers start reporting them.
  DGRR_RETURN_IF_ERROR(rank.recorder.Open(s, t.per_example_ops_, layout));

  rank.end_step = first_step;
  for (int64_t step = first_step; step < t.options_.steps; ++step) {
    bool stop = false;
    DGRR_RETURN_IF_ERROR(Step(rank, step, &stop));
    rank.end_step = step + 1;
    // A control file's last step (every rank reads the same file).
    if (stop || s.ShouldStop(static_cast<uint64_t>(step))) break;
  }
  return Status::OK();
}

Status Trainer::Impl::Step(Rank& rank, int64_t step, bool* stop) {
  Session& s = *rank.session;
  DGRR_RETURN_IF_ERROR(s.BeginStep(static_cast<uint64_t>(step)));
  const uint64_t B = static_cast<uint64_t>(t.batch_);
  const uint64_t batch_first = static_cast<uint64_t>(step) * B;
  rank.shard_first = batch_first + static_cast<uint64_t>(rank.r) * shard;

  // Data: the examples of the epoch's Philox permutation (model/data_order.h).
  const size_t window = t.data_->window();
  if (!rank.data_order) rank.data_order = std::make_unique<DataOrder>(rng, t.data_->num_examples());
  for (int i = 0; i < shard; ++i) {
    DGRR_ASSIGN_OR_RETURN(uint64_t index, rank.data_order->IndexOf(rank.shard_first + i));
    std::memcpy(rank.tokens.data() + i * window, t.data_->Example(index), window);
  }
  rank.recorder.BeginStep(step, rank.shard_first);

  // Faults active on this rank at this step (the tokens are in place). A
  // tensor fault's recording goes through a decorator around the recorder,
  // installed only at a step where one fires.
  rank.fault.Arm(TensorFaultAt(t.options_.faults, static_cast<uint64_t>(step), rank.r), *t.fault_targets_,
                 t.options_.seed, rank.shard_first, rank.tokens);
  std::optional<FaultingObserver> faulting;
  if (rank.fault.armed()) {
    const RankTensors tensors{rank.grad.data(), rank.params.data(), rank.adamw.m().data(), rank.adamw.v().data()};
    faulting.emplace(rank.recorder, rank.fault, layout, tensors);
  }
  BoundaryObserver* const recording =
      faulting ? static_cast<BoundaryObserver*>(&*faulting) : static_cast<BoundaryObserver*>(&rank.recorder);
  PhiloxDropoutMasks masks(rng, static_cast<uint64_t>(step));
  SharedGeneratorMasks shared(rng, static_cast<uint64_t>(step));
  const FaultSpec* shared_rng = FaultAt(FaultKind::kSharedRng, step, rank.r);
  ExampleHooks hooks;
  // The observer also reports a bitflip's EVENT, so it runs when one is due.
  const bool example_flip = rank.fault.FiresAt(FlipSite::kExample);
  hooks.observer = t.options_.mode == RecordMode::kFull ||
                           t.options_.mode == RecordMode::kTrusted || example_flip
                       ? recording
                       : nullptr;
  hooks.mutator = example_flip ? &rank.fault : nullptr;
  hooks.masks = shared_rng ? static_cast<const DropoutMaskSource*>(&shared) : &masks;
  // An audited step also fingerprints every per-example value this rank
  // computes, whatever the mode records, passing each on unchanged.
  const bool audit = NeighbourAudit::Due(t.options_.audit_every, step);
  if (audit) {
    if (!rank.audit) {
      rank.audit = std::make_unique<NeighbourAudit>(model, layout, t.per_example_names_, t.options_.threads,
                                                    static_cast<size_t>(shard), static_cast<uint64_t>(t.batch_),
                                                    rng, *t.data_);
    }
    AuditTap& tap = rank.audit->BeginStep(rank.shard_first, hooks.observer, hooks.mutator);
    hooks.observer = &tap;
    hooks.mutator = &tap;
  }
  // The batch may sum the canonical tree's first level as it goes (pairs of
  // examples, model/batch.h) unless something reads every example's own
  // gradient this step: the audit, and the data-parallel faults' reductions.
  std::optional<uint64_t> pairs_at;
  if (!audit && FaultAt(FaultKind::kRace, step) == nullptr &&
      FaultAt(FaultKind::kReduceOrder, step) == nullptr) {
    pairs_at = rank.shard_first - static_cast<uint64_t>(step) * static_cast<uint64_t>(t.batch_);
  }
  DGRR_RETURN_IF_ERROR(rank.batch.ComputeExamples(rank.params.data(), rank.tokens.data(),
                                                  static_cast<size_t>(shard), rank.shard_first,
                                                  hooks, pairs_at));
  if (shared_rng) {
    DGRR_RETURN_IF_ERROR(s.RecordEvent(trace::EventKind::kFaultInjected, shared_rng->text));
  }
  DGRR_RETURN_IF_ERROR(rank.recorder.RecordExamples(rank.tokens.data(), window));
  // Before the all-reduce: a rank named here has not yet spread its
  // gradient into anybody's parameters.
  if (audit) {
    DGRR_RETURN_IF_ERROR(rank.audit->Run(step, rank.comm, rank.params.data(), rank.tokens.data(),
                                         rank.batch.gradients(), s));
  }

  // All-reduce: the canonical tree over all B examples, whatever R; every
  // example's loss in example order, summed in the tree as well.
  DGRR_RETURN_IF_ERROR(AllReduceGradients(rank, step));
  const float fb = static_cast<float>(B);
  for (size_t k = 0; k < num_params; ++k) rank.grad[k] /= fb;
  std::vector<float> losses(B);
  DGRR_RETURN_IF_ERROR(rank.comm.AllGather(rank.batch.losses().data(), static_cast<size_t>(shard) * sizeof(float),
                                           losses.data()));
  rank.loss = TreeSum(std::span<const float>(losses)) / fb;
  if (rank.r == 0) {
    for (auto kind : {FaultKind::kRace, FaultKind::kReduceOrder}) {
      if (const FaultSpec* f = FaultAt(kind, step)) {
        DGRR_RETURN_IF_ERROR(s.RecordEvent(trace::EventKind::kFaultInjected, f->text));
      }
    }
  }
  const uint32_t batch_count = static_cast<uint32_t>(t.batch_);
  DGRR_RETURN_IF_ERROR(faulting ? faulting->RecordCollective(rank.grad.data(), batch_first, batch_count)
                                : rank.recorder.RecordCollective(rank.grad.data(), batch_first, batch_count));

  const float grad_norm = rank.adamw.ClipGradients(rank.grad.data(), t.preset_.train.grad_clip);
  const float lr = schedule.At(step);
  BoundaryObserver* opt_observer =
      t.options_.mode == RecordMode::kFull || t.options_.mode == RecordMode::kTrusted ||
              rank.fault.FiresInOptimizer()
          ? recording
          : nullptr;
  rank.adamw.Step(rank.params.data(), rank.grad.data(), lr, opt_observer,
                  batch_first, static_cast<uint32_t>(B));
  DGRR_RETURN_IF_ERROR(s.deferred_error());
  DGRR_RETURN_IF_ERROR(s.EndStep(static_cast<uint64_t>(step), rank.loss));
  KillPoint("step", step, rank.r);
  const auto now = Clock::now();
  // The line goes before the step's checkpoint, which syncs it: a checkpoint
  // of step S always has its metrics line on disk.
  if (rank.r == 0 && metrics) {
    MetricsRow row;
    row.step = step;
    row.loss = rank.loss;
    row.lr = lr;
    row.grad_norm = grad_norm;
    const double step_seconds = std::chrono::duration<double>(now - step_start).count();
    row.tokens_per_second = step_seconds > 0 ? static_cast<double>(B) * model.seq_len / step_seconds : 0;
    row.wall_seconds = std::chrono::duration<double>(now - start).count();
    DGRR_RETURN_IF_ERROR(metrics->Append(row));
  }
  if (rank.r == 0) step_start = now;
  // The run's schedule (which a control file keeps only when it says so),
  // and the steps a control file asks for (Session::ShouldCheckpoint).
  const bool checkpointed = s.ShouldCheckpoint(static_cast<uint64_t>(step));
  if (checkpointed) DGRR_RETURN_IF_ERROR(Checkpoint(rank, step));
  if (rank.r == 0 && progress_) {
    TrainProgress p;
    p.step = step;
    p.steps = t.options_.steps;
    p.loss = rank.loss;
    p.lr = lr;
    p.grad_norm = grad_norm;
    p.elapsed_seconds = std::chrono::duration<double>(now - start).count();
    const double done = static_cast<double>(step + 1 - t.first_step_);
    p.tokens_per_second = p.elapsed_seconds > 0 ? done * B * model.seq_len / p.elapsed_seconds : 0;
    p.eta_seconds = p.elapsed_seconds / done * static_cast<double>(t.options_.steps - step - 1);
    progress_(p);
  }
  if (t.options_.stop != nullptr) {
    // Rank 0 reads the request (also one raised from its progress callback)
    // and the barrier hands it to all ranks, which then stop after this
    // same step. Rank 0 writes it again only past the next step's barriers.
    uint8_t stop_sampled = rank.r == 0 && t.options_.stop->load() != 0 ? 1 : 0;
    DGRR_RETURN_IF_ERROR(rank.comm.Broadcast(&stop_sampled, 1, 0));
    *stop = stop_sampled != 0 && step + 1 < t.options_.steps;
    if (!*stop) return Status::OK();
    // The checkpoint a resume continues from, when the run keeps checkpoints
    // (the session's schedule asks for one at a stop).
    s.RequestStop();
    const bool at_stop = !checkpointed && s.ShouldCheckpoint(static_cast<uint64_t>(step));
    if (at_stop) DGRR_RETURN_IF_ERROR(Checkpoint(rank, step));
    rank.stopped_after = step;
    rank.checkpoint_at_stop = checkpointed || at_stop;
  }
  return Status::OK();
}

// The checkpoint of `step`, through the session (Session::Checkpoint: every
// rank's EVENT and durable trace, the replicated state checked across ranks,
// each rank's shard, rank 0's commit once every shard is durable;
// docs/checkpoint-format.md). The metrics line of the step is made durable
// first: a checkpoint of step S always has its line on disk.
Status Trainer::Impl::Checkpoint(Rank& rank, int64_t step) {
  rank.adamw_t = static_cast<uint64_t>(rank.adamw.step());
  rank.cursor = static_cast<uint64_t>(step + 1) * static_cast<uint64_t>(t.batch_);
  if (rank.r == 0 && metrics) DGRR_RETURN_IF_ERROR(metrics->Sync());
  return rank.session->Checkpoint(static_cast<uint64_t>(step));
}

// Rank 0's metrics log for a run starting at `first_step`: cut to the steps
// before it when resumed, else new.
Status Trainer::Impl::OpenMetricsLog(int64_t first_step) {
  const std::string path = MetricsPathFor(t.options_.out_dir);
  if (first_step > 0) DGRR_RETURN_IF_ERROR(CutMetricsLog(path, first_step - 1));
  DGRR_ASSIGN_OR_RETURN(metrics, MetricsLog::Open(path, /*fresh=*/first_step == 0));
  return Status::OK();
}

// rank.grad = the sum of the batch's B per-example gradients, in the
// canonical tree over all B examples (so independent of R), on every rank.
// The data-parallel faults replace it, at the step they fire, by sums in
// orders of their own.
Status Trainer::Impl::AllReduceGradients(Rank& rank, int64_t step) {
  const uint64_t B = static_cast<uint64_t>(t.batch_);
  const FaultSpec* race = FaultAt(FaultKind::kRace, step);
  const NamedTensor* racy = race ? t.fault_targets_->ReducedParameter(race->at) : nullptr;
  const bool reorder = FaultAt(FaultKind::kReduceOrder, step) != nullptr;
  const uint64_t first = rank.shard_first - static_cast<uint64_t>(step) * B;
  const int threads = t.options_.threads;
  float* out = rank.grad.data();
  if (!reorder && racy == nullptr) {
    // The canonical reduction; each of this rank's nodes is summed where the
    // batch ran (BatchGradients::ReduceNode: on a device only the node sums
    // come back to the host).
    return CanonicalAllReduce(rank.comm, rank.batch.gradient_buffers(), first, B, num_params, out, threads,
                              rank.batch.node_reducer());
  }
  // The faults sum in orders of their own (model/fault_reducers.h), over
  // every example's own gradient on the host: the race's range first, since
  // the canonical reduction sums the buffers in place.
  const std::span<float* const> mine = rank.batch.gradients();
  std::vector<float> raced;
  if (racy != nullptr) {
    DGRR_RETURN_IF_ERROR(RacyReduceRange(rank.comm, mine, racy->offset, racy->size, B, threads, &raced));
  }
  if (reorder) {
    DGRR_RETURN_IF_ERROR(ReduceInExampleOrder(rank.comm, mine, num_params, B, out));
  } else {
    DGRR_RETURN_IF_ERROR(CanonicalAllReduce(rank.comm, mine, first, B, num_params, out, threads));
  }
  if (racy != nullptr) std::memcpy(out + racy->offset, raced.data(), racy->size * sizeof(float));
  return Status::OK();
}

// ---------------------------------------------------------------------------
Trainer::~Trainer() = default;

size_t Trainer::num_parameters() const { return ParameterLayout(preset_.model).total_size(); }

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->options_ = options;
  // This run's checkpoints of either layout, per tensor or flat
  // (model/train_state.h), for --resume and for the sessions (which write
  // them, and restore and dump under a control file).
  Trainer* self = t.get();
  t->store_ = std::make_unique<checkpoint::Hdf5CheckpointStore>(
      [self](const checkpoint::Checkpoint& ckpt, int rank, StateRegistry& into) {
        return RestoreTrainState(ckpt, rank, ParameterLayout(self->preset_.model), into, self->restore_skip_);
      });
  // Re-executable only when this process knows how to start dgrr again: then
  // launch.json records `dgrr train --out RUN --resume` (model/launch.h), and
  // a control file, if any, is obeyed.
  const bool reexecutable = !DgrrExecutable().empty();
  if (reexecutable) {
    DGRR_ASSIGN_OR_RETURN(t->control_, ReadActiveControl());
  }
  if (options.resume && !t->control_ && !PathExists(ConfigPathFor(options.out_dir))) {
    // Nothing to continue (no run yet, or one killed before its config was
    // written): the same command line starts it.
    t->options_.resume = false;
    t->options_.fallback = false;
    t->options_.resumed_fresh = true;
  }
  // Under a control file too, --resume takes the settings from the recorded
  // run's config.json.
  if (t->options_.resume) DGRR_RETURN_IF_ERROR(t->LoadConfigForResume());
  if (t->control_) t->ApplyControl();
  DGRR_RETURN_IF_ERROR(t->Validate());
  if (reexecutable) {
    DGRR_ASSIGN_OR_RETURN(t->launch_, TrainLaunch(options.out_dir));
  }
  return t;
}

// Started by dgrr replay, rollback or bisect (DGRR_CONTROL): the run is
// re-executed into the control's directory, in the control's mode, from its
// checkpoint (Session::Resume); the recorded run named by --out is only read.
void Trainer::ApplyControl() {
  options_.out_dir = control_->run_dir;
  if (control_->mode) options_.mode = *control_->mode;
  options_.resume = options_.fallback = options_.force = options_.resumed_fresh = false;
}

Status Trainer::Validate() {
  const TrainOptions& o = options_;
  if (o.out_dir.empty()) return Status::InvalidArgument("--out RUN_DIR is required");
  auto out_of_range = [](const char* flag, auto value, auto min, auto max) {
    return Status::InvalidArgument(std::string(flag) + " must be in [" + std::to_string(min) + ", " +
                                   std::to_string(max) + "], got " + std::to_string(value));
  };
  if (o.steps < 1 || o.steps > kMaxSteps) return out_of_range("--steps", o.steps, 1, kMaxSteps);
  if (o.ranks < 1 || o.ranks > kMaxRanks) return out_of_range("--ranks", o.ranks, 1, kMaxRanks);
  if (o.threads < 1 || o.threads > kMaxThreads) return out_of_range("--threads", o.threads, 1, kMaxThreads);
  if (o.ckpt_every < 0 || o.ckpt_every > kMaxSteps) {
    return out_of_range("--ckpt-every", o.ckpt_every, 0, kMaxSteps);
  }
  if (o.audit_every < 0 || o.audit_every > kMaxSteps) {
    return out_of_range("--audit-every", o.audit_every, 0, kMaxSteps);
  }
  if (auto device = ParseDevice(o.device); device.ok()) {
    device_ = *device;
  } else {
    return Status::InvalidArgument("--device: " + std::string(device.status().message()));
  }
  if (o.gemm != "exact" && o.gemm != "cublas") {
    return Status::InvalidArgument("--gemm: unknown kernel '" + o.gemm + "' (exact, cublas)");
  }
  if (o.gemm == "cublas" && device_ != Device::kCuda) {
    return Status::InvalidArgument("--gemm cublas runs on --device cuda only (this run: --device " +
                                   o.device + ")");
  }
  gemm_ = o.gemm == "cublas" ? GemmBackend::kCublas : GemmBackend::kExact;
  if (gemm_ == GemmBackend::kCublas && o.audit_every > 0) {
    // The audit recomputes a neighbour's examples with the exact products:
    // against cuBLAS's it could only disagree.
    return Status::InvalidArgument(
        "--audit-every recomputes examples with the exact products and cannot check a --gemm "
        "cublas run: use --gemm exact, or leave --audit-every out");
  }
  if (device_ != Device::kCpu) {
    // Before anything is written: a run that cannot start (no device, or a
    // DGRR_KERNEL_TIMES folder that cannot be made) says so at once.
    DGRR_RETURN_IF_ERROR(MakeLauncher(device_, gemm_).status());
  }
  DGRR_ASSIGN_OR_RETURN(preset_, PresetByName(o.preset));
  if (o.layers) preset_.model.num_layers = *o.layers;
  if (o.dim) preset_.model.channels = *o.dim;
  if (o.heads) preset_.model.num_heads = *o.heads;
  if (o.seq) preset_.model.seq_len = *o.seq;
  DGRR_RETURN_IF_ERROR(preset_.model.Validate());
  batch_ = o.batch.value_or(preset_.train.batch_size);
  if (batch_ < 1 || batch_ > kMaxBatch) return out_of_range("--batch", batch_, 1, kMaxBatch);
  if (batch_ % o.ranks != 0) {
    return Status::InvalidArgument("--batch " + std::to_string(batch_) +
                                   " is not divisible by --ranks " + std::to_string(o.ranks));
  }
  lr_ = o.lr.value_or(preset_.train.learning_rate);
  // Written to config.json, where a NaN or infinity would become null and
  // leave a run that can never be resumed or replayed.
  if (!(std::isfinite(lr_) && lr_ > 0 && lr_ <= kMaxLearningRate)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", static_cast<double>(lr_));
    return Status::InvalidArgument("--lr must be a finite number in (0, " +
                                   std::to_string(static_cast<int>(kMaxLearningRate)) + "], got " + got);
  }

  std::string data_source = "embedded";
  if (o.data_file.empty()) {
    DGRR_ASSIGN_OR_RETURN(Dataset d, Dataset::Arithmetic(o.seed, preset_.model.seq_len));
    data_ = std::make_unique<Dataset>(std::move(d));
  } else {
    auto d = Dataset::FromFile(o.data_file, preset_.model.seq_len);
    if (!d.ok() && !o.config_path.empty()) {
      // Named by the run's config.json, not by a flag: a file that is no
      // corpus is the run file's error (exit 3); one that cannot be read, I/O.
      const Status& e = d.status();
      const std::string where = o.config_path + ": key 'data.path'";
      return e.IsInvalidArgument() ? Status::Corruption(where + ": " + e.message()) : e.WithPrefix(where);
    }
    if (!d.ok()) return d.status().WithPrefix("--data");
    data_ = std::make_unique<Dataset>(std::move(d).value());
    data_source = "file";
  }
  if (data_->num_examples() >= (1ull << 32)) {
    return Status::InvalidArgument("--data: more than 2^32 examples are not supported");
  }

  DGRR_ASSIGN_OR_RETURN(const auto per_example, PerExampleBoundaries(preset_.model));
  per_example_names_.clear();
  per_example_ops_.clear();
  std::vector<std::pair<std::string, uint64_t>> sizes;
  for (const auto& b : per_example) {
    per_example_names_.push_back(b.name);
    per_example_ops_.emplace_back(b.phase, b.op);
    sizes.emplace_back(b.name, b.elements);
  }
  fault_targets_ = std::make_shared<const FaultTargets>(StepRecorder::kTokensBoundary, data_->window(), sizes,
                                                        ParameterLayout(preset_.model));
  const FaultRun run{o.ranks, o.steps, batch_, o.resume};
  std::set<std::pair<uint64_t, int>> flips;  // (step, rank) of each tensor fault
  for (size_t i = 0; i < o.faults.size(); ++i) {
    const FaultSpec& f = o.faults[i];
    if (Status s = CheckFault(f, *fault_targets_, run); !s.ok()) {
      // A fault the run's own config.json names is the file's error (exit 3).
      if (i < o.faults_from_config) {
        return Status::Corruption(o.config_path + ": key 'inject[" + std::to_string(i) + "]': " + s.message());
      }
      return s;
    }
    if (CorruptsTensor(f.kind) && !flips.emplace(f.step, f.rank).second) {
      return Status::InvalidArgument("inject " + f.text + ": a second tensor fault at step " +
                                     std::to_string(f.step) + " on rank " + std::to_string(f.rank) +
                                     " (one bitflip, multibit, stuck-byte, random, nan or inf per step and rank)");
    }
  }
  DGRR_ASSIGN_OR_RETURN(auto plan, TrainingPlan());
  plan_ = std::make_unique<checkpoint::FastForwardPlan>(plan);
  plan_json_ = checkpoint::PlansToJson({plan});
  for (const auto& f : o.faults) {
    if (f.kind == FaultKind::kSkipRestore &&
        (plan.Find(f.at) == nullptr || plan.Find(f.at)->action != checkpoint::VarAction::kSaved)) {
      std::string saved;
      for (const auto& v : plan.saved) saved += (saved.empty() ? "" : ", ") + v;
      return Status::InvalidArgument("inject " + f.text + ": '" + f.at +
                                     "' is not restored from checkpoints (restored: " + saved + ")");
    }
  }

  const std::string& text = data_->text();
  RunConfig& c = run_config_;
  c = RunConfig();
  c.seed = o.seed;
  c.steps = o.steps;
  c.model = {preset_.name,
             preset_.model.num_layers,
             preset_.model.channels,
             preset_.model.num_heads,
             preset_.model.seq_len,
             preset_.model.attn_dropout,
             preset_.model.resid_dropout};
  c.data.source = data_source;
  c.data.path = o.data_file;
  c.data.bytes = text.size();
  c.data.xxh3 = Hex64(Xxh3(text.data(), text.size()));
  c.optimizer = {lr_, lr_ * 0.1f, preset_.train.warmup_steps, preset_.train.weight_decay,
                 preset_.train.grad_clip};
  c.batch = batch_;
  c.ranks = o.ranks;
  c.threads = o.threads;
  c.mode = o.mode;
  c.ckpt_every = o.ckpt_every;
  c.audit_every = o.audit_every;
  c.device = o.device;
  c.gemm = o.gemm;
  // skip-restore is a property of one resume, not of the run.
  for (const auto& f : o.faults) {
    if (f.kind != FaultKind::kSkipRestore) c.inject.push_back(f);
  }
  config_ = c.ToJson();
  return Status::OK();
}

// A control file's dumps, checked against what this run records: a name the
// model does not have (with similar ones), a step the re-execution does not
// run, a rank the run does not have. InvalidArgument, which the session
// reports and dgrr replay turns into a usage error.
Status Trainer::ValidateControlDumps() const {
  const std::vector<std::string> names = fault_targets_->Names();
  const int64_t last = control_->stop_after_step ? static_cast<int64_t>(*control_->stop_after_step) : options_.steps - 1;
  for (const ControlDump& d : control_->dumps) {
    std::string what = "dump " + d.boundary + "@" + std::to_string(d.step);
    if (d.rank) what += std::string(1, ':') + std::to_string(*d.rank);
    if (std::find(names.begin(), names.end(), d.boundary) == names.end()) {
      return Status::InvalidArgument(what + ": the model has no boundary '" + d.boundary +
                                     "'; similar names: " + ClosestNames(d.boundary, names));
    }
    if (static_cast<int64_t>(d.step) > last || static_cast<int64_t>(d.step) >= options_.steps) {
      return Status::InvalidArgument(what + ": step " + std::to_string(d.step) + " is not run (steps 0.." +
                                     std::to_string(last) + ")");
    }
    if (d.rank && *d.rank >= options_.ranks) {
      return Status::InvalidArgument(what + ": rank " + std::to_string(*d.rank) +
                                     " does not exist (ranks: " + std::to_string(options_.ranks) + ")");
    }
  }
  return Status::OK();
}

TrainOptions TrainOptionsFromConfig(const RunConfig& c, const std::string& run_dir) {
  TrainOptions o;
  o.out_dir = run_dir;
  o.steps = c.steps;
  o.seed = c.seed;
  o.preset = c.model.preset;
  o.layers = c.model.layers;
  o.dim = c.model.dim;
  o.heads = c.model.heads;
  o.seq = c.model.seq;
  if (c.data.source == "file") o.data_file = c.data.path;
  o.ranks = c.ranks;
  o.threads = c.threads;
  o.batch = c.batch;
  o.lr = c.optimizer.lr;
  o.mode = c.mode;
  o.ckpt_every = c.ckpt_every;
  o.audit_every = c.audit_every;
  o.device = c.device;
  o.gemm = c.gemm;
  o.faults = c.inject;
  o.config_path = ConfigPathFor(run_dir);
  o.faults_from_config = o.faults.size();
  return o;
}

StatusOr<TrainOptions> TrainOptionsFromRun(const std::string& run_dir) {
  DGRR_ASSIGN_OR_RETURN(const RunConfig config, ReadRunConfig(run_dir));
  return TrainOptionsFromConfig(config, run_dir);
}

// --resume: the run's own config decides everything but the resume-time
// faults, so the resumed run is the same computation as the original.
Status Trainer::LoadConfigForResume() {
  DGRR_ASSIGN_OR_RETURN(const RunConfig recorded, ReadRunConfig(options_.out_dir));
  TrainOptions o = TrainOptionsFromConfig(recorded, options_.out_dir);
  o.resume = true;
  o.fallback = options_.fallback;
  o.stop = options_.stop;  // a front end's stop request holds for the resumed run too
  if (options_.device_given) {  // the device never changes results: a resume may cross
    o.device = options_.device;
    o.device_given = true;
  }
  for (const auto& f : options_.faults) {
    if (f.kind != FaultKind::kSkipRestore) {
      return Status::InvalidArgument("--resume takes only skip-restore faults; '" + f.text +
                                     "' would change the run");
    }
    o.faults.push_back(f);
  }
  DGRR_RETURN_IF_ERROR(recorded.data.xxh3.status());
  options_ = o;
  DGRR_RETURN_IF_ERROR(Validate());
  if (*run_config_.data.xxh3 != *recorded.data.xxh3) {
    return Status::FailedPrecondition("--resume: the data (" + o.data_file +
                                      ") changed since the run started");
  }
  return Status::OK();
}

// The run's config without the settings that only say how the run is
// recorded or scheduled (mode, threads, checkpoint interval): the state after
// a step does not depend on them, so a checkpoint of an `sdc` run with 4
// threads restores into a `full` replay with 1 (bisect does exactly that).
std::string Trainer::StateConfigJson() const {
  nlohmann::json state_config = config_;
  for (const char* key : RunConfig::kScheduleOnlyKeys) state_config.erase(key);
  return state_config.dump();
}

namespace {

// model::Rollback (model/rollback.h) of the run `run` resumes, whose config
// the trainer has read and checked already and whose directory it holds
// locked: the same refusal of a run recorded in mode off, then the
// re-execution from the run's launch record.
StatusOr<replay::RollbackResult> FinishRollback(const TrainOptions& run, const replay::RollbackOptions& finish) {
  if (run.mode == RecordMode::kOff) {
    return Status::FailedPrecondition(finish.run_dir +
                                      " was recorded in mode off: its traces hold no step ends to cut at");
  }
  replay::ReexecuteOptions reexecute;
  DGRR_ASSIGN_OR_RETURN(reexecute.launch, LaunchOfTrainRun(finish.run_dir));
  return replay::RollbackLaunchedRun(finish, reexecute);
}

}  // namespace

// Finishes an interrupted rollback; then a run with checkpoints is continued
// by its sessions (Session::Resume with OpenMode::kContinue: the ranks agree
// on the newest checkpoint every rank's trace reaches, restore it, cut their
// traces back to it), and one killed before its first checkpoint starts over.
Status Trainer::PrepareResume() {
  DGRR_ASSIGN_OR_RETURN(std::optional<int64_t> pending, replay::PendingRollback(options_.out_dir));
  if (pending) {
    // The rollback's stages are re-runnable and this process holds the lock.
    replay::RollbackOptions finish;
    finish.run_dir = options_.out_dir;
    finish.step = *pending;
    finish.fallback = options_.fallback;
    finish.run_dir_locked = true;
    auto finished = FinishRollback(options_, finish);
    if (!finished.ok()) {
      return finished.status().WithPrefix(
          "finishing the interrupted rollback to step " + std::to_string(*pending) +
          " (run 'dgrr rollback " + options_.out_dir + " --step " + std::to_string(*pending) +
          "' to see it through)");
    }
  }
  DGRR_ASSIGN_OR_RETURN(const std::vector<uint64_t> steps, checkpoint::ListCheckpointSteps(options_.out_dir));
  if (steps.empty()) {
    // Killed before the first checkpoint: start over in the same directory.
    options_.force = true;
    return PrepareRunDirectory();
  }
  continue_run_ = true;
  return Status::OK();
}

Status Trainer::LockRunDirectory() {
  // Under a control file the session locks the control's directory.
  if (control_) return Status::OK();
  if (!directory_) directory_ = std::make_unique<RunDirectory>(options_.out_dir);
  if (directory_->locked()) return Status::OK();
  DGRR_RETURN_IF_ERROR(directory_->Lock());
  // A directory Run would refuse is refused here, before a front end prints.
  if (!options_.resume) DGRR_RETURN_IF_ERROR(CheckRunDirectoryFree());
  return Status::OK();
}

namespace {

bool IsRunFileName(const std::string& name) {
  return name == "config.json" || name == kPendingRollbackFile || name == kMetricsFileName ||
         (name.rfind("rank", 0) == 0 && (EndsWith(name, ".trace") || EndsWith(name, ".env.json")));
}

// What dgrr leaves in a run directory that is no run: the temporary files
// of writers killed before their rename (the writer lock is on the directory
// itself and leaves no file).
bool IsLeftoverName(const std::string& name) { return IsTemporaryName(name); }

}  // namespace

Status Trainer::CheckRunDirectoryFree() const {
  const std::string& dir = options_.out_dir;
  if (!IsDirectory(dir)) return Status::OK();
  DGRR_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListDirectory(dir));
  // --resume without a config.json may replace what a killed run left.
  const bool replace = options_.force || options_.resumed_fresh;
  for (const std::string& name : names) {
    if (IsLeftoverName(name)) continue;
    if (replace && (IsRunFileName(name) || name == "ckpt")) continue;
    if (options_.resumed_fresh) {
      return Status::FailedPrecondition(dir + " has no config.json, so nothing to resume, and holds '" +
                                        name + "', which dgrr did not write: refusing to start a run there");
    }
    if (options_.force) return Status::OK();  // --force keeps the user's other files
    return Status::FailedPrecondition(dir + " is not empty: pass --force to replace its run" +
                                      " (or --resume to continue it)");
  }
  return Status::OK();
}

Status Trainer::PrepareRunDirectory() const {
  const std::string& dir = options_.out_dir;
  if (PathExists(dir) && !IsDirectory(dir)) return Status::InvalidArgument(dir + " exists and is not a directory");
  DGRR_RETURN_IF_ERROR(CheckRunDirectoryFree());
  DGRR_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListDirectory(dir));
  // Remove only what a run writes, never anything else the user keeps
  // there; a leftover (a stale ckpt/ that --resume would take) is an error.
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    if (name == "ckpt") {
      DGRR_RETURN_IF_ERROR(RemoveCheckpoints());
    } else if (IsRunFileName(name) || IsTemporaryName(name)) {
      DGRR_RETURN_IF_ERROR(RemoveFile(path));
    }
  }
  return SyncDirectory(dir);
}

// The run directory's checkpoints (ckpt/ and everything in it).
Status Trainer::RemoveCheckpoints() const {
  const std::string path = options_.out_dir + "/ckpt";
  if (!IsDirectory(path)) return Status::OK();
  DGRR_ASSIGN_OR_RETURN(const std::vector<std::string> files, ListDirectory(path));
  for (const std::string& file : files) DGRR_RETURN_IF_ERROR(RemoveFile(path + "/" + file));
  std::error_code ec;
  std::filesystem::remove(path, ec);  // now empty
  if (ec) return Status::IOError(path + ": remove directory: " + ec.message());
  return Status::OK();
}

// The run directory made ready for the run's ranks: locked, and cleared for
// a fresh run (a resume finishes an interrupted rollback first).
Status Trainer::PrepareRun() {
  if (control_) return Status::OK();  // the re-executor made the directory; the sessions restore
  DGRR_RETURN_IF_ERROR(LockRunDirectory());
  return options_.resume ? PrepareResume() : PrepareRunDirectory();
}

Status Trainer::Run(const std::function<void(const TrainProgress&)>& progress, TrainResult* result) {
  // The lock goes when Run returns, whatever it returns.
  struct Release {
    std::unique_ptr<RunDirectory>& directory;
    ~Release() {
      if (directory) directory->Unlock();
    }
  } release{directory_};
  DGRR_RETURN_IF_ERROR(PrepareRun());
  InProcessGroup group(options_.ranks);
  std::vector<Communicator*> comms;
  for (const auto& comm : group.ranks) comms.push_back(comm.get());
  return RunRanks(comms, progress, result);
}

namespace {

// Rank 0's outcome of preparing the run directory, as the other ranks learn it.
struct Prepared {
  uint8_t code = 0;               // StatusCode
  uint8_t continue_run = 0;       // the sessions resume from a checkpoint (Trainer::PrepareResume)
  char message[1024] = {};
};

// `message` with the code rank 0 reported.
Status StatusWithCode(uint8_t code, const std::string& message) {
  switch (static_cast<StatusCode>(code)) {
    case StatusCode::kOk: return Status::OK();
    case StatusCode::kInvalidArgument: return Status::InvalidArgument(message);
    case StatusCode::kNotFound: return Status::NotFound(message);
    case StatusCode::kIOError: return Status::IOError(message);
    case StatusCode::kCorruption: return Status::Corruption(message);
    case StatusCode::kDivergence: return Status::Divergence(message);
    case StatusCode::kIntegrityFailure: return Status::IntegrityFailure(message);
    case StatusCode::kFailedPrecondition: return Status::FailedPrecondition(message);
    case StatusCode::kInternal: return Status::Internal(message);
  }
  return Status::Internal(message);
}

}  // namespace

Status Trainer::RunAsRank(Communicator& comm, const std::function<void(const TrainProgress&)>& progress,
                          TrainResult* result) {
  if (comm.size() != options_.ranks) {
    return Status::InvalidArgument("--ranks " + std::to_string(options_.ranks) + " differs from the " +
                                   std::string(comm.name()) + " world size " + std::to_string(comm.size()));
  }
  struct Release {
    std::unique_ptr<RunDirectory>& directory;
    ~Release() {
      if (directory) directory->Unlock();
    }
  } release{directory_};
  // The configurations agree before rank 0 touches the directory.
  const std::string config = config_.dump();
  const uint64_t mine = Xxh3(config.data(), config.size());
  std::vector<uint64_t> digests(static_cast<size_t>(comm.size()));
  DGRR_RETURN_IF_ERROR(comm.AllGather(&mine, sizeof(mine), digests.data()));
  const std::string differing = RanksDiffering(digests);
  if (!differing.empty()) {
    return Status::FailedPrecondition("rank(s) " + differing + " of " + std::to_string(comm.size()) +
                                      " run a different configuration than rank 0 (every rank must be "
                                      "started with the same options)");
  }
  // Rank 0 alone locks and prepares the directory, then tells the others.
  Prepared prepared;
  if (comm.rank() == 0) {
    const Status s = PrepareRun();
    prepared.code = static_cast<uint8_t>(s.code());
    prepared.continue_run = continue_run_ ? 1 : 0;
    std::snprintf(prepared.message, sizeof(prepared.message), "%s", s.message().c_str());
  }
  DGRR_RETURN_IF_ERROR(comm.Broadcast(&prepared, sizeof(prepared), 0));
  if (prepared.code != 0) {
    if (comm.rank() == 0) return StatusWithCode(prepared.code, prepared.message);
    return StatusWithCode(prepared.code, std::string("rank 0: ") + prepared.message);
  }
  continue_run_ = prepared.continue_run != 0;
  Communicator* const mine_only[] = {&comm};
  return RunRanks(mine_only, progress, result);
}

Status Trainer::RunRanks(std::span<Communicator* const> comms,
                         const std::function<void(const TrainProgress&)>& progress, TrainResult* result) {
  if (continue_run_) {
    for (const auto& f : options_.faults) {
      if (f.kind == FaultKind::kSkipRestore) restore_skip_.insert(f.at);
    }
  }
  impl_ = std::make_unique<Impl>(*this);
  Impl& impl = *impl_;
  impl.progress_ = progress;
  for (Communicator* comm : comms) impl.ranks.push_back(std::make_unique<Impl::Rank>(impl, *comm));
  impl.start = impl.step_start = Clock::now();
  std::vector<Status> statuses(impl.ranks.size());
  std::vector<std::thread> threads;
  Status spawn;
  if (impl.ranks.size() == 1) {
    statuses[0] = impl.RunRank(*impl.ranks[0]);
  } else {
    threads.reserve(impl.ranks.size());
    for (size_t i = 0; i < impl.ranks.size(); ++i) {
      try {
        threads.emplace_back([&, i] { statuses[i] = impl.RunRank(*impl.ranks[i]); });
      } catch (const std::system_error& e) {
        // The ranks already started would wait for this one in a collective.
        spawn = Status::IOError("cannot start the thread of rank " + std::to_string(impl.ranks[i]->r) +
                                " of " + std::to_string(options_.ranks) + ": " + e.what());
        impl.ranks[i]->comm.Abort(spawn);
        break;
      }
    }
  }
  for (auto& th : threads) th.join();
  DGRR_RETURN_IF_ERROR(spawn);
  // A failing rank aborts the others with its own status, so any is the cause.
  for (const Status& s : statuses) DGRR_RETURN_IF_ERROR(s);
  if (impl.metrics) DGRR_RETURN_IF_ERROR(impl.metrics->Close());

  if (result != nullptr) {
    const Impl::Rank& rank = *impl.ranks[0];
    // A stop request, or a control file's last step, ends the run early.
    const int64_t end = rank.end_step;
    result->stopped = rank.stopped_after >= 0;
    result->checkpoint_at_stop = rank.checkpoint_at_stop;
    result->first_step = first_step_;
    result->steps = end;
    result->final_loss = rank.loss;
    result->seconds = std::chrono::duration<double>(Clock::now() - impl.start).count();
    result->tokens_per_second = static_cast<double>(end - first_step_) * batch_ *
                                preset_.model.seq_len / std::max(result->seconds, 1e-9);
    result->params = FingerprintBytes(rank.params.data(), impl.num_params * sizeof(float));
    // Every rank closed its trace before the last collective.
    result->trace_bytes.clear();
    for (int r = 0; r < options_.ranks; ++r) {
      auto size = FileSize(TracePathFor(options_.out_dir, r));
      result->trace_bytes.push_back(size.ok() ? *size : 0);
    }
  }
  return Status::OK();
}

}  // namespace dgrr::model
