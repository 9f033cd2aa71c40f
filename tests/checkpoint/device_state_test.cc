// Registered state on a device (StateEntry::where): the STEP record's
// parameter fingerprint and the per-step SDC check are computed on the device,
// checkpoints are written from a host copy and restored through one, and
// dumps of device boundaries are copied to the host. A training-like program
// runs with its state and tensors on the host and on a fake device
// (tests/support/fake_device.h: memory the host cannot touch), two ranks as
// threads, the real HDF5 checkpoint store: the two runs must record the same
// bits, reach the same SDC verdicts, write the same checkpoints and dumps.
// The CUDA device behind the same interface is checked in
// tests/fingerprint/fingerprint_cuda_test.cc (on a machine with a GPU).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <optional>
#include <thread>
#include <variant>

#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/session_store.h"
#include "checkpoint/tensor_file.h"
#include "runtime/control_file.h"
#include "runtime/control_file_json.h"
#include "runtime/inprocess_communicator.h"
#include "runtime/session.h"
#include "runtime/session_seams.h"
#include "tests/support/fake_device.h"
#include "tests/support/temp_dir_test.h"
#include "tests/support/timeless_records.h"

namespace dgrr {
namespace {

using test_support::FakeDevice;
using trace::Direction;
using trace::Phase;

constexpr uint64_t kSteps = 6;

// Parameter entries of awkward lengths: XXH3 block boundaries fall inside
// entries and entry boundaries inside blocks; one entry is a single float.
const std::vector<std::pair<std::string, size_t>> kParameters = {
    {"emb", 257}, {"w", 300}, {"b", 1}, {"head", 700}};

// One buffer of the program's state or activations: host memory, or device
// memory the program reaches only through its device (its "kernels" are host
// arithmetic between a download and an upload).
class Buffer {
 public:
  Buffer(std::vector<float> init, FakeDevice* device) : host_(std::move(init)), device_(device) {
    if (device_ != nullptr) {
      device_data_ = device_->Allocate(bytes());
      device_->Upload(device_data_, host_.data(), bytes());
    }
  }
  std::vector<float> Load() {
    if (device_ != nullptr) device_->Download(device_data_, host_.data(), bytes());
    return host_;
  }
  void Store(const std::vector<float>& values) {
    host_ = values;
    if (device_ != nullptr) device_->Upload(device_data_, host_.data(), bytes());
  }
  void FlipBit(size_t byte, int bit) {
    uint8_t* p = device_ != nullptr ? device_->Bytes(device_data_, bytes()) : reinterpret_cast<uint8_t*>(host_.data());
    p[byte] ^= static_cast<uint8_t>(1u << bit);
  }
  void* data() { return device_ != nullptr ? device_data_ : host_.data(); }
  uint64_t bytes() const { return host_.size() * sizeof(float); }
  Placement where() const { return device_ != nullptr ? device_->where() : Placement::Host(); }
  TensorRef Tensor() {
    auto t = MakeTensorRef(data(), DType::kF32, {static_cast<int64_t>(host_.size())});
    EXPECT_TRUE(t.ok());
    t->where = where();
    return *t;
  }

 private:
  std::vector<float> host_;
  FakeDevice* device_;
  void* device_data_ = nullptr;
};

struct ProgramRun {
  std::string dir;
  bool device = false;
  int world = 2;
  std::optional<uint64_t> flip_after;  // rank 1's "w" gets a bit flipped after this step's update
  std::optional<uint64_t> stop_after;  // the run ends there, as if killed (no checkpoint)
  bool under_control = false;          // started by dgrr with a control file (set DGRR_CONTROL)
  bool fallback = false;               // resume past a damaged newest checkpoint
  // A replicated host table of 5 MiB besides ("a.table", first by name; role
  // other, since the parameters live in one place):
  // the replicated state is then spread over both shards (format v3: the
  // table in rank 0's, every later entry in rank 1's).
  bool big = false;
};

struct RankOutcome {
  Status status;  // the first error (EndStep's Divergence for a flip)
  uint64_t start = 0;
  std::vector<SdcMismatch> sdc;
  std::vector<std::vector<float>> final_parameters;
  int segment_fingerprints = 0, copies_to_device = 0;
  int waits_outside_checkpoints = 0;  // the host waited for the device while training
};

std::vector<float> Ramp(size_t n, float first, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + step * static_cast<float>(i % 97);
  return v;
}

// The program: parameters, an optimizer moment per parameter, a per-rank
// generator state (not replicated), a host step counter; per step a forward
// output and a gradient recorded, a momentum update, a checkpoint every 3
// steps.
Status RunRank(const ProgramRun& run, int rank, Communicator* comm, RankOutcome* out) {
  auto device = run.device ? std::make_shared<FakeDevice>() : nullptr;
  SessionOptions o;
  o.run_dir = run.dir;
  o.rank = rank;
  o.world_size = run.world;
  o.seed = 11;
  o.gpu = false;
  o.communicator = comm;
  o.open_mode = OpenMode::kContinue;
  o.checkpoints = checkpoint::DefaultCheckpointStore();
  o.checkpoint_every = 3;
  o.total_steps = kSteps;
  o.reexecutable = run.under_control;
  o.resume_fallback = run.fallback;
  o.config_json = R"({"lr": 0.01})";
  SessionSeams seams;
  seams.device_fingerprinter = device;
  DGRR_ASSIGN_OR_RETURN(std::unique_ptr<Session> opened, Session::Open(o, seams));
  Session& s = *opened;

  std::vector<Buffer> params, moments;
  for (size_t k = 0; k < kParameters.size(); ++k) {
    params.emplace_back(Ramp(kParameters[k].second, 0.5f + static_cast<float>(k), 0.03125f), device.get());
    moments.emplace_back(std::vector<float>(kParameters[k].second, 0.0f), device.get());
  }
  Buffer generator(Ramp(5, static_cast<float>(rank), 1.0f), device.get());
  uint64_t counter = 0;
  for (size_t k = 0; k < kParameters.size(); ++k) {
    const auto& [name, n] = kParameters[k];
    const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
    DGRR_RETURN_IF_ERROR(s.state().Register({name, params[k].data(), params[k].bytes(), DType::kF32, shape,
                                             StateRole::kParameter, RestorePolicy::kCheckpoint, true,
                                             params[k].where()}));
    DGRR_RETURN_IF_ERROR(s.state().Register({"adam.m." + name, moments[k].data(), moments[k].bytes(), DType::kF32,
                                             shape, StateRole::kOptimizer, RestorePolicy::kCheckpoint, true,
                                             moments[k].where()}));
  }
  DGRR_RETURN_IF_ERROR(s.state().Register({"generator", generator.data(), generator.bytes(), DType::kF32, {5},
                                           StateRole::kRng, RestorePolicy::kCheckpoint, false, generator.where()}));
  DGRR_RETURN_IF_ERROR(s.state().Register(
      {"step", &counter, sizeof counter, DType::kU64, {1}, StateRole::kCounter, RestorePolicy::kCheckpoint, true}));
  std::vector<float> table = run.big ? Ramp(5 << 18, 2.0f, 0.25f) : std::vector<float>();
  if (run.big) {
    DGRR_RETURN_IF_ERROR(s.state().Register({"a.table", table.data(), table.size() * sizeof(float), DType::kF32,
                                             {static_cast<int64_t>(table.size())}, StateRole::kOther,
                                             RestorePolicy::kCheckpoint, true}));
  }
  DGRR_ASSIGN_OR_RETURN(BoundaryHandle forward,
                        s.DeclareBoundary("fc.out", Phase::kForward, Direction::kOutput, OpKind::kMatmul));
  DGRR_ASSIGN_OR_RETURN(BoundaryHandle gradient,
                        s.DeclareBoundary("fc.dw", Phase::kBackward, Direction::kOutput, OpKind::kMatmul));

  DGRR_ASSIGN_OR_RETURN(out->start, s.Resume());
  int checkpoint_waits = 0;
  for (uint64_t step = out->start; step < kSteps; ++step) {
    DGRR_RETURN_IF_ERROR(s.BeginStep(step));
    std::vector<float> w = params[1].Load();
    std::vector<float> gen = generator.Load();
    std::vector<float> y(w.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = w[i] * static_cast<float>(step + 1) + gen[i % gen.size()];
    Buffer activation(y, device.get());
    DGRR_RETURN_IF_ERROR(s.Record(forward, activation.Tensor(), {static_cast<uint64_t>(rank), 1}));
    for (float& g : gen) g += 1.0f;
    generator.Store(gen);
    // The gradient is the same on every rank, as after an all-reduce.
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<float> p = params[k].Load(), m = moments[k].Load();
      std::vector<float> g(p.size());
      for (size_t i = 0; i < p.size(); ++i) {
        g[i] = p[i] * 0.5f - 0.25f * static_cast<float>(step);
        m[i] = 0.9f * m[i] + g[i];
        p[i] -= 0.01f * m[i];
      }
      if (k == 1) {
        Buffer grad(g, device.get());
        DGRR_RETURN_IF_ERROR(s.Record(gradient, grad.Tensor(), {0, static_cast<uint32_t>(run.world)}));
      }
      params[k].Store(p);
      moments[k].Store(m);
    }
    if (run.flip_after == step && rank == 1) params[1].FlipBit(13, 5);
    if (run.big) table[step * 4099 % table.size()] += 1.0f;
    counter = step + 1;
    // Odd steps: everything in flight so far has completed on the device.
    if (device && step % 2 == 1) device->CompleteAll();
    Status ended = s.EndStep(step, y[0]);
    if (!ended.ok()) {
      out->status = ended;
      break;
    }
    if (run.stop_after == step) break;
    if (s.ShouldCheckpoint(step)) {
      const int before = device ? device->waits : 0;
      DGRR_RETURN_IF_ERROR(s.Checkpoint(step));
      checkpoint_waits += device ? device->waits - before : 0;
    }
  }
  out->sdc = s.sdc_mismatches();
  for (Buffer& p : params) out->final_parameters.push_back(p.Load());
  if (run.big) out->final_parameters.push_back(table);
  if (device) {
    out->segment_fingerprints = device->segment_fingerprints;
    out->waits_outside_checkpoints = device->waits - checkpoint_waits;
    out->copies_to_device = device->copies_to_device;
  }
  return s.Close();
}

std::vector<RankOutcome> RunAllRanks(const ProgramRun& run) {
  std::vector<RankOutcome> outcomes(run.world);
  InProcessGroup comms(run.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < run.world; ++r) {
    threads.emplace_back([&, r] {
      Status s = RunRank(run, r, run.world > 1 ? comms.ranks[static_cast<size_t>(r)].get() : nullptr, &outcomes[r]);
      if (!s.ok()) {
        outcomes[r].status = s;
        comms.world->Abort(s);
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

class DeviceStateTest : public test_support::TempDirTest {
 protected:
  static std::vector<trace::Record> Records(const ProgramRun& run, int rank) {
    return test_support::TimelessRecords(TracePathFor(run.dir, rank));
  }
  static void ExpectSameRecords(const ProgramRun& a, const ProgramRun& b) {
    for (int r = 0; r < a.world; ++r) {
      const std::vector<trace::Record> ra = Records(a, r), rb = Records(b, r);
      ASSERT_EQ(ra.size(), rb.size()) << "rank " << r;
      for (size_t i = 0; i < ra.size(); ++i) {
        EXPECT_TRUE(ra[i].index == rb[i].index && ra[i].body == rb[i].body) << "rank " << r << " record " << i;
      }
    }
  }
  // What a run computed: BOUNDARY and STEP records (a resumed run's EVENT
  // records differ from an uninterrupted one's by design).
  static std::vector<trace::RecordBody> Computation(const ProgramRun& run, int rank) {
    std::vector<trace::RecordBody> out;
    for (const trace::Record& r : Records(run, rank)) {
      if (!std::holds_alternative<trace::EventRecord>(r.body) && !std::holds_alternative<trace::NameChunk>(r.body)) {
        out.push_back(r.body);
      }
    }
    return out;
  }
  // A shard damaged in place (its payload hash no longer matches).
  static void FlipAByteNearTheEnd(const std::string& path) {
    auto bytes = ReadFileToString(path);
    ASSERT_TRUE(bytes.ok());
    std::string damaged = *bytes;
    damaged[damaged.size() - 10] ^= 0x10;
    ASSERT_TRUE(WriteFileAtomically(path, damaged).ok());
  }
  ProgramRun Make(const std::string& name, bool device) {
    ProgramRun run;
    run.dir = Path(name);
    run.device = device;
    return run;
  }
};

TEST_F(DeviceStateTest, ADeviceRunRecordsChecksAndCheckpointsWhatAHostRunDoes) {
  const ProgramRun host = Make("host", false), device = Make("device", true);
  const std::vector<RankOutcome> h = RunAllRanks(host), d = RunAllRanks(device);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(h[r].status.ok()) << h[r].status.ToString();
    ASSERT_TRUE(d[r].status.ok()) << d[r].status.ToString();
    EXPECT_TRUE(d[r].sdc.empty() && h[r].sdc.empty());
    EXPECT_EQ(d[r].segment_fingerprints, static_cast<int>(kSteps)) << "one device fingerprint of the parameters a step";
    EXPECT_EQ(d[r].waits_outside_checkpoints, static_cast<int>(kSteps))
        << "the SDC check waits for its own fingerprint at each step end, and nothing else waits";
    EXPECT_EQ(d[r].final_parameters, h[r].final_parameters);
  }
  ExpectSameRecords(host, device);
  // The STEP records carry the fingerprint of the parameters' concatenation.
  int steps = 0;
  for (const trace::Record& r : Records(device, 0)) {
    if (const auto* st = std::get_if<trace::StepRecord>(&r.body); st && st->kind == trace::StepKind::kEnd) {
      ++steps;
      EXPECT_NE(st->params_xxh3, FingerprintBytes(nullptr, 0).xxh3);
    }
  }
  EXPECT_EQ(steps, static_cast<int>(kSteps));
  // The checkpoints (steps 2 and 5) hold the same state, entry for entry.
  for (uint64_t step : {2, 5}) {
    auto a = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(host.dir, step));
    auto b = checkpoint::ReadCheckpoint(checkpoint::CheckpointPath(device.dir, step));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
    EXPECT_EQ(a->state_digest, b->state_digest) << step;
    ASSERT_EQ(a->replicated.size(), b->replicated.size());
    for (size_t i = 0; i < a->replicated.size(); ++i) {
      EXPECT_EQ(a->replicated[i].name, b->replicated[i].name);
      EXPECT_EQ(a->replicated[i].data, b->replicated[i].data) << a->replicated[i].name;
    }
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(b->ranks[r].entries.size(), 1u);
      EXPECT_EQ(a->ranks[r].entries[0].data, b->ranks[r].entries[0].data) << "rank " << r << "'s generator";
    }
  }
}

TEST_F(DeviceStateTest, AFlippedBitInOneRanksDeviceParameterIsNamedAsOnTheHost) {
  ProgramRun host = Make("host", false), device = Make("device", true);
  host.flip_after = device.flip_after = 3;
  const std::vector<RankOutcome> h = RunAllRanks(host), d = RunAllRanks(device);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(h[r].status.code(), StatusCode::kDivergence) << h[r].status.ToString();
    EXPECT_EQ(d[r].status.ToString(), h[r].status.ToString());
    ASSERT_EQ(d[r].sdc.size(), 1u);
    ASSERT_EQ(h[r].sdc.size(), 1u);
    EXPECT_EQ(d[r].sdc[0].step, 3u);
    EXPECT_EQ(d[r].sdc[0].rank, 1) << "the flipped rank is named";
    EXPECT_EQ(d[r].sdc[0].rank_fingerprint, h[r].sdc[0].rank_fingerprint);
    EXPECT_EQ(d[r].sdc[0].reference, h[r].sdc[0].reference);
  }
  EXPECT_NE(h[0].status.ToString().find("rank 1"), std::string::npos) << h[0].status.ToString();
  ExpectSameRecords(host, device);  // the SDC EVENT records included
}

TEST_F(DeviceStateTest, OneRankWithoutAnSdcCheckNeverWaitsForTheDeviceBeforeClose) {
  ProgramRun host = Make("host", false), device = Make("device", true);
  host.world = device.world = 1;
  const std::vector<RankOutcome> h = RunAllRanks(host), d = RunAllRanks(device);
  ASSERT_TRUE(h[0].status.ok() && d[0].status.ok()) << h[0].status.ToString() << d[0].status.ToString();
  // Only the checkpoints (after steps 2 and 5) wait: they need the trace whole.
  EXPECT_EQ(d[0].waits_outside_checkpoints, 0);
  EXPECT_EQ(d[0].segment_fingerprints, static_cast<int>(kSteps));
  ExpectSameRecords(host, device);
}

TEST_F(DeviceStateTest, ADeviceRunStoppedAfterACheckpointResumesBitwise) {
  const ProgramRun whole = Make("whole", true);
  ProgramRun cut = Make("cut", true);
  cut.stop_after = 3;  // the checkpoint of step 2 is the newest
  const std::vector<RankOutcome> w = RunAllRanks(whole), first = RunAllRanks(cut);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(w[r].status.ok() && first[r].status.ok());
  cut.stop_after.reset();
  const std::vector<RankOutcome> resumed = RunAllRanks(cut);  // fresh devices, as a new process has
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(resumed[r].status.ok()) << resumed[r].status.ToString();
    EXPECT_EQ(resumed[r].start, 3u);
    EXPECT_GT(resumed[r].copies_to_device, 0) << "the state went back to the device";
    EXPECT_EQ(resumed[r].final_parameters, w[r].final_parameters);
    EXPECT_EQ(Computation(cut, r), Computation(whole, r)) << "rank " << r;
  }
}

// Each resuming rank reads only its own shard (and rank 0's, for the
// replicated state); the ranks agree on every checkpoint tried, so a shard
// only rank 1 reads stops both ranks' resume, rank 0 naming rank 1, and with
// fallback both resume from the same older checkpoint.
TEST_F(DeviceStateTest, ADamagedShardOfOneRankStopsOrMovesEveryRanksResume) {
  const ProgramRun whole = Make("whole", false);
  ProgramRun run = Make("run", false);
  const std::vector<RankOutcome> w = RunAllRanks(whole), first = RunAllRanks(run);  // checkpoints of 2 and 5
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(w[r].status.ok() && first[r].status.ok());
  const std::string shard = checkpoint::ShardPath(checkpoint::CheckpointPath(run.dir, 5), 1);
  ASSERT_NO_FATAL_FAILURE(FlipAByteNearTheEnd(shard));
  const std::vector<RankOutcome> refused = RunAllRanks(run);
  ASSERT_FALSE(refused[1].status.ok());
  EXPECT_TRUE(refused[1].status.IsCorruption()) << refused[1].status.ToString();
  EXPECT_NE(refused[1].status.message().find(shard), std::string::npos) << refused[1].status.ToString();
  ASSERT_FALSE(refused[0].status.ok()) << "rank 0's own shard is whole, but rank 1 cannot resume";
  EXPECT_TRUE(refused[0].status.IsCorruption()) << refused[0].status.ToString();
  EXPECT_NE(refused[0].status.message().find("rank 1 could not read its part"), std::string::npos)
      << refused[0].status.ToString();
  EXPECT_NE(refused[0].status.message().find("pass --fallback"), std::string::npos) << refused[0].status.ToString();
  run.fallback = true;
  const std::vector<RankOutcome> resumed = RunAllRanks(run);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(resumed[r].status.ok()) << resumed[r].status.ToString();
    EXPECT_EQ(resumed[r].start, 3u) << "rank " << r << " fell back to the checkpoint of step 2";
    EXPECT_EQ(resumed[r].final_parameters, w[r].final_parameters);
  }
}

// Format v3: with 5 MiB of replicated state, rank 0's shard holds the table
// and rank 1's every later replicated entry; each resuming rank reads both
// (the device's state restored through a host copy), bitwise, and a damaged
// shard 0 stops rank 1's resume too, naming it.
TEST_F(DeviceStateTest, ReplicatedStateSpreadOverBothShardsResumesBitwise) {
  ProgramRun whole = Make("whole", true), cut = Make("cut", true);
  whole.big = cut.big = true;
  cut.stop_after = 3;
  const std::vector<RankOutcome> w = RunAllRanks(whole), first = RunAllRanks(cut);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(w[r].status.ok()) << w[r].status.ToString();
    ASSERT_TRUE(first[r].status.ok()) << first[r].status.ToString();
  }
  const std::string manifest = checkpoint::CheckpointPath(cut.dir, 2);
  for (int r = 0; r < 2; ++r) {
    auto shard = checkpoint::ReadCheckpointShard(checkpoint::ShardPath(manifest, r));
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    ASSERT_FALSE(shard->replicated.empty()) << "rank " << r << "'s shard holds part of the replicated state";
    EXPECT_EQ(shard->replicated.front().name == "a.table", r == 0);
  }
  cut.stop_after.reset();
  const std::vector<RankOutcome> resumed = RunAllRanks(cut);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(resumed[r].status.ok()) << resumed[r].status.ToString();
    EXPECT_EQ(resumed[r].start, 3u);
    EXPECT_EQ(resumed[r].final_parameters, w[r].final_parameters) << "rank " << r;
    EXPECT_EQ(Computation(cut, r), Computation(whole, r)) << "rank " << r;
  }
  // Shard 0 of the newest checkpoint (step 5) damaged: rank 1 needs it for the table.
  const std::string shard0 = checkpoint::ShardPath(checkpoint::CheckpointPath(cut.dir, 5), 0);
  ASSERT_NO_FATAL_FAILURE(FlipAByteNearTheEnd(shard0));
  const std::vector<RankOutcome> refused = RunAllRanks(cut);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(refused[r].status.ok()) << "rank " << r;
    EXPECT_TRUE(refused[r].status.IsCorruption()) << refused[r].status.ToString();
    EXPECT_NE(refused[r].status.message().find(shard0), std::string::npos) << refused[r].status.ToString();
  }
}

// Placement is not part of a checkpoint: a run that went as far as its
// checkpoint of step 2 on the host continues on the device, bitwise.
TEST_F(DeviceStateTest, AHostRunsCheckpointContinuesOnTheDevice) {
  const ProgramRun whole = Make("whole", true);
  ProgramRun cut = Make("cut", false);
  cut.stop_after = 3;
  const std::vector<RankOutcome> w = RunAllRanks(whole), first = RunAllRanks(cut);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(w[r].status.ok() && first[r].status.ok());
  cut.stop_after.reset();
  cut.device = true;
  const std::vector<RankOutcome> resumed = RunAllRanks(cut);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(resumed[r].status.ok()) << resumed[r].status.ToString();
    EXPECT_EQ(resumed[r].start, 3u);
    EXPECT_EQ(resumed[r].final_parameters, w[r].final_parameters);
    EXPECT_EQ(Computation(cut, r), Computation(whole, r)) << "rank " << r;
  }
}

// Sets DGRR_CONTROL for one scope.
class ControlEnv {
 public:
  explicit ControlEnv(const std::string& path) { ::setenv(kControlEnvVar, path.c_str(), 1); }
  ~ControlEnv() { ::unsetenv(kControlEnvVar); }
};

TEST_F(DeviceStateTest, DumpsOfDeviceBoundariesHoldWhatTheHostRunDumps) {
  std::vector<checkpoint::TensorDump> dumps[2];
  for (const bool on_device : {false, true}) {
    const std::string name = on_device ? "device" : "host";
    ControlFile c;
    c.run_dir = Path(name);
    c.dumps.push_back({"fc.out", 1, 0, Path(name + "-fc.out-{rank}.h5")});
    c.dumps.push_back({"fc.dw", 4, std::nullopt, Path(name + "-fc.dw-{rank}.h5")});
    const std::string control = Path(name + "-control.json");
    ASSERT_TRUE(WriteFileAtomically(control, ControlFileJson(c).dump()).ok());
    ControlEnv env(control);
    ProgramRun run = Make(name, on_device);
    run.under_control = true;
    const std::vector<RankOutcome> outcomes = RunAllRanks(run);
    for (const RankOutcome& o : outcomes) ASSERT_TRUE(o.status.ok()) << o.status.ToString();
    for (const std::string& file : {name + "-fc.out-0.h5", name + "-fc.dw-0.h5", name + "-fc.dw-1.h5"}) {
      auto dump = checkpoint::ReadTensorDump(Path(file));
      ASSERT_TRUE(dump.ok()) << dump.status().ToString();
      dumps[on_device].push_back(std::move(dump).value());
    }
  }
  for (size_t i = 0; i < dumps[0].size(); ++i) {
    const checkpoint::TensorDump &h = dumps[0][i], &d = dumps[1][i];
    EXPECT_EQ(d.boundary, h.boundary);
    EXPECT_EQ(d.step, h.step);
    EXPECT_EQ(d.rank, h.rank);
    ASSERT_EQ(d.tensors.size(), 1u);
    ASSERT_EQ(h.tensors.size(), 1u);
    EXPECT_EQ(d.tensors[0].name, h.tensors[0].name);
    EXPECT_EQ(d.tensors[0].shape, h.tensors[0].shape);
    EXPECT_EQ(d.tensors[0].recorded, h.tensors[0].recorded);
    EXPECT_EQ(d.tensors[0].data, h.tensors[0].data) << h.boundary;
    EXPECT_EQ(FingerprintBytes(d.tensors[0].data.data(), d.tensors[0].data.size()), d.tensors[0].recorded);
  }
}

}  // namespace
}  // namespace dgrr
