// The reference training run behind `dgrr train`: the GPT of model/gpt.h
// trained data-parallel over R ranks (threads of this process, each with its
// own dgrr Session and trace) and T worker threads per rank, bitwise
// reproducibly and recorded through the runtime's public API only.
//
// One step, on every rank:
//   1. the rank's shard of the global batch (examples in the order of the
//      epoch's Philox permutation) runs forward/backward, one example per
//      worker at a time, each into its own gradient buffer; per-example
//      boundaries are fingerprinted on the workers;
//   2. the rank's thread records them in example order (data, forward,
//      backward), so the trace never depends on T;
//   3. all-reduce: the ranks reduce disjoint slices of the parameters over
//      all B examples in the canonical tree (a reduce-scatter), then each
//      copies the whole result (all-gather) and records it per tensor as a
//      collective boundary; the result does not depend on R;
//   4. clipping, AdamW (optimizer boundaries), the STEP record with the
//      parameter fingerprint, checked across ranks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "fingerprint/fingerprint.h"
#include "model/grid.h"
#include "model/config.h"
#include "model/corpus.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/fast_forward.h"
#include "model/faults.h"
#include "model/hooks.h"
#include "model/run_config.h"
#include "runtime/communicator.h"
#include "runtime/control_file.h"
#include "runtime/launch_record.h"
#include "runtime/recording_mode.h"
#include "runtime/run_directory.h"

namespace dgrr {
class LoadedCheckpoint;
namespace checkpoint {
class Hdf5CheckpointStore;
}
}  // namespace dgrr

namespace dgrr::model {

struct TrainOptions {
  std::string out_dir;
  int64_t steps = 200;
  uint64_t seed = 1;
  std::string preset = "tiny";
  std::optional<int> layers, dim, heads, seq;
  std::string data_file;        // empty: the embedded arithmetic corpus
  int ranks = 1;
  int threads = 1;
  std::optional<int> batch;     // default: the preset's
  std::optional<float> lr;      // default: the preset's
  RecordMode mode = RecordMode::kFull;
  int64_t ckpt_every = 0;       // 0: no checkpoints
  // The cross-rank audit (docs/model.md, "The audit"): at every step this
  // divides, rank r recomputes rank (r+1) % R's examples and compares their
  // per-example fingerprints; a difference is Divergence. 0: off. Never
  // changes a recorded value.
  int64_t audit_every = 0;
  // Where the steps run (docs/gpu.md): "cpu", "cuda-sim" or "cuda"; never
  // changes a result. On --resume the device given (device_given) replaces
  // the run's: a run may continue on another device.
  std::string device = "cpu";
  bool device_given = false;
  // The products' kernel: "exact" or "cublas" (--device cuda only; changes
  // results, so the run records it and a resume keeps it).
  std::string gemm = "exact";
  std::vector<FaultSpec> faults;
  // Set by TrainOptionsFromRun: the run's config.json, and how many of
  // `faults` (the first ones) it named, so that a value it holds which
  // validation refuses is reported as the file's error (exit 3), not a flag's.
  std::string config_path;
  size_t faults_from_config = 0;
  bool force = false;           // replace an existing run's files
  // Continue the run in out_dir from its newest checkpoint (everything else
  // comes from its config.json; only skip-restore faults may be added). With
  // `fallback`, a corrupt newest checkpoint is skipped for an older good one.
  bool resume = false;
  bool fallback = false;
  // Set by Create when `resume` found no config.json in out_dir (a run killed
  // before it was written, or none yet): the run starts fresh with these
  // options, replacing whatever dgrr files (traces, temporaries) are there.
  bool resumed_fresh = false;
  // Stop at the next step boundary once this is nonzero (a front end's signal
  // handler sets it). All ranks stop after the same step; with checkpoints on
  // (ckpt_every > 0) a checkpoint of that step is written first.
  const std::atomic<int>* stop = nullptr;

};

// The options of the run `config` describes, in `run_dir` (config_path and
// faults_from_config set, so that the trainer reports a value it refuses as
// the file's error).
TrainOptions TrainOptionsFromConfig(const RunConfig& config, const std::string& run_dir);

// The options of the run in `run_dir`, from its config.json (ReadRunConfig).
StatusOr<TrainOptions> TrainOptionsFromRun(const std::string& run_dir);

struct TrainProgress {
  int64_t step = 0;             // just finished (0-based: steps run 0..steps-1)
  int64_t steps = 0;            // how many the run has in all
  float loss = 0;
  float lr = 0;                 // the learning rate of this step's update
  float grad_norm = 0;          // the gradient's global L2 norm, before clipping
  double tokens_per_second = 0;
  double elapsed_seconds = 0;
  double eta_seconds = 0;
};

struct TrainResult {
  int64_t steps = 0;            // steps 0..steps-1 are done (also after a stop)
  int64_t first_step = 0;       // where this process started (after a resume: > 0)
  // A stop request (TrainOptions::stop) ended the run early, after step
  // steps-1; checkpoint_at_stop says whether a checkpoint of that step exists.
  bool stopped = false;
  bool checkpoint_at_stop = false;
  float final_loss = 0;
  double tokens_per_second = 0;
  double seconds = 0;
  Fingerprint params;           // rank 0's parameters after the last step
  std::vector<uint64_t> trace_bytes;  // per rank
};

class Trainer {
 public:
  // Validates everything (model, data, batch vs ranks, fault specs and the
  // names they refer to) and touches nothing on disk.
  static StatusOr<std::unique_ptr<Trainer>> Create(const TrainOptions& options);
  ~Trainer();

  // Takes the run directory's writer lock (base/run_lock.h), creating the
  // directory when it does not exist; Run takes it when this was not called.
  // A front end calls it before it prints anything, so that a second writer
  // is refused having written nothing. IOError when another writer holds it.
  Status LockRunDirectory();

  // Trains, writing the run directory: options.ranks ranks as threads of
  // this process, over an in-process communicator. `progress` is called from
  // rank 0's thread after every step.
  Status Run(const std::function<void(const TrainProgress&)>& progress, TrainResult* result);

  // Trains as rank comm.rank() of comm.size() (which must equal
  // options.ranks), the other ranks running the same command elsewhere (other
  // processes under mpirun): the configurations are compared first (a
  // mismatch: FailedPrecondition on every rank, naming the ranks); rank 0
  // locks and prepares the run directory and writes the shared files, each
  // rank writes its own trace. The run directory is bitwise the one Run
  // writes. `progress` is called on rank 0 only.
  Status RunAsRank(Communicator& comm, const std::function<void(const TrainProgress&)>& progress,
                   TrainResult* result);

  const nlohmann::json& config() const { return config_; }
  // The options in force (for --resume: as loaded from the run's config).
  const TrainOptions& options() const { return options_; }
  // The step the run starts at (after Run: where it resumed; 0 when fresh).
  int64_t first_step() const { return first_step_; }
  const Preset& preset() const { return preset_; }
  size_t num_parameters() const;
  int batch_size() const { return batch_; }
  // Whether this process runs under a control file (DGRR_CONTROL: `dgrr
  // replay`, `rollback` or `bisect` started it; docs/control-file.md): then
  // the run directory is the control's, and the recorded run it names in
  // --out is never touched.
  const std::optional<ControlFile>& control() const { return control_; }

 private:
  struct Impl;
  Trainer() = default;
  Status Validate();
  Status PrepareRun();
  void ApplyControl();
  Status RunRanks(std::span<Communicator* const> comms,
                  const std::function<void(const TrainProgress&)>& progress, TrainResult* result);
  Status LoadConfigForResume();
  Status PrepareRunDirectory() const;
  // Refuses a directory holding anything but dgrr's lock and temporaries,
  // unless --force (or a fresh start asked by --resume) may replace it.
  Status CheckRunDirectoryFree() const;
  Status PrepareResume();
  // Removes the run's ckpt/ directory with every file in it.
  Status RemoveCheckpoints() const;
  Status ValidateControlDumps() const;
  std::string StateConfigJson() const;

  TrainOptions options_;
  Preset preset_;
  int batch_ = 0;
  float lr_ = 0;
  Device device_ = Device::kCpu;
  GemmBackend gemm_ = GemmBackend::kExact;
  std::unique_ptr<Dataset> data_;
  RunConfig run_config_;   // what config.json records (built by Validate)
  nlohmann::json config_;  // run_config_.ToJson()
  std::vector<std::string> per_example_names_;  // boundary names of one example, in order
  // The phase and operator the model reports at each of them (same order).
  std::vector<std::pair<model::Phase, Operator>> per_example_ops_;
  std::shared_ptr<const FaultTargets> fault_targets_;  // every recorded boundary, as a bitflip target
  std::string plan_json_;                       // the fast-forward plan stored in checkpoints
  std::unique_ptr<checkpoint::FastForwardPlan> plan_;
  // Where every rank's checkpoints go and come from; its restorer reads the
  // trainer's layouts (model/train_state.h) and leaves out restore_skip_.
  std::unique_ptr<checkpoint::Hdf5CheckpointStore> store_;
  std::set<std::string> restore_skip_;  // --resume's skip-restore faults
  // --resume of a run with checkpoints (PrepareResume): the sessions open
  // with OpenMode::kContinue and Session::Resume finds, restores and cuts.
  bool continue_run_ = false;
  int64_t first_step_ = 0;
  std::unique_ptr<Impl> impl_;
  // The run directory, locked by LockRunDirectory (or Run) until Run returns;
  // null under a control file (the session locks the control's directory).
  std::unique_ptr<RunDirectory> directory_;
  std::optional<ControlFile> control_;  // the control this process obeys (DGRR_CONTROL)
  std::optional<LaunchRecord> launch_;  // what launch.json records; nullopt: not re-executable
};

// The names of every per-example boundary of `config`, in the order one
// example reports them (learned by running one example).
StatusOr<std::vector<std::string>> PerExampleBoundaryNames(const GptConfig& config);

}  // namespace dgrr::model
