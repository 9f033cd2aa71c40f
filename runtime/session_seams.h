// The seams of a Session that are not a training program's knobs: what the
// reference trainer, the re-execution machinery and tests substitute inside
// a session. Internal: this header stays in the tree (it is not installed,
// docs/api.md "What is stable"), and a program outside it opens its session
// with Session::Open(options) or dgrr::Open(options) alone.
//
//   SessionSeams seams;
//   seams.device_fingerprinter = fake_device;   // tests/support/fake_device.h
//   auto session = Session::Open(options, seams);
#pragma once

#include <memory>
#include <string_view>

#include "base/status.h"
#include "fingerprint/async_fingerprint.h"
#include "runtime/determinism.h"
#include "runtime/run_directory.h"
#include "runtime/session.h"
#include "trace_format/record.h"

namespace dgrr {

// Checks every record a session is about to append; a non-OK result stops
// the append and is returned to the caller. Replay uses it to compare a
// re-execution with the recorded trace as it goes (runtime/trace_check.h).
class RecordCheck {
 public:
  virtual ~RecordCheck() = default;
  virtual Status CheckBoundary(const trace::BoundaryRecord& record, std::string_view name) = 0;
  virtual Status CheckStep(const trace::StepRecord& record) = 0;
};

// Every pointer is borrowed and must outlive the session; null (empty) is
// the default Session::Open(options) uses.
struct SessionSeams {
  // The run directory's owner, when the program holds one (the trainer
  // does, locked, for the whole run): the session locks and cuts through it.
  // Null, or another directory than the one this session writes (a control
  // file's): the session makes its own over run_dir.
  RunDirectory* directory = nullptr;
  // Tests substitute the environment; null: the real process environment.
  ProcessEnvironment* environment = nullptr;
  // Checks each BOUNDARY and STEP record before it is appended; null: none,
  // unless a control file asks the session to verify against a recorded
  // run, which then uses its own TraceCheck.
  RecordCheck* check = nullptr;
  // The session's device: fingerprints the device tensors passed to Record
  // (TensorRef::where) and the device parameters (StateEntry::where) on their
  // own streams, and copies device state and dumped tensors to and from the
  // host; null: a CUDA one is made on first use (MakeCudaFingerprinter).
  // Tests substitute their own (tests/support/fake_device.h).
  std::shared_ptr<AsyncFingerprinter> device_fingerprinter;
};

}  // namespace dgrr
