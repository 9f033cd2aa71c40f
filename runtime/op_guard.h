// OpGuard: an RAII scope around one operator. Inputs are fingerprinted when
// declared (before the operator runs, so a corrupted input is caught at its
// consumer), outputs when the scope ends (after it ran):
//
//   {
//     OpGuard g(session, {first_example, count});
//     g.Input(fc_in, x);
//     g.Output(fc_out, y);   // recorded when g goes out of scope
//     matmul_forward(y, x, w, ...);
//   }
//
// Errors are reported by Finish(); a guard that is only destroyed hands its
// error to the session (Session::deferred_error), returned by EndStep.
#pragma once

#include <vector>

#include "runtime/session.h"

namespace dgrr {

class OpGuard {
 public:
  OpGuard(Session& session, ExampleRange examples) : session_(session), examples_(examples) {}
  ~OpGuard() {
    Status s = Finish();
    if (!s.ok()) session_.DeferError(s);
  }
  OpGuard(const OpGuard&) = delete;
  OpGuard& operator=(const OpGuard&) = delete;

  OpGuard& Input(const BoundaryHandle& boundary, const TensorRef& tensor) {
    Keep(session_.Record(boundary, tensor, examples_));
    return *this;
  }
  OpGuard& Output(const BoundaryHandle& boundary, const TensorRef& tensor) {
    outputs_.push_back({boundary, tensor});
    return *this;
  }
  // Records the pending outputs; idempotent.
  Status Finish() {
    for (const auto& o : outputs_) Keep(session_.Record(o.boundary, o.tensor, examples_));
    outputs_.clear();
    return status_;
  }

 private:
  struct Pending {
    BoundaryHandle boundary;
    TensorRef tensor;
  };
  void Keep(const Status& s) {
    if (status_.ok() && !s.ok()) status_ = s;
  }
  Session& session_;
  ExampleRange examples_;
  std::vector<Pending> outputs_;
  Status status_;
};

}  // namespace dgrr
