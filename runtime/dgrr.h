// runtime/dgrr.h: the runtime half of <dgrr/dgrr.h>, the one header a training
// program includes (docs/api.md walks through a complete loop; what is stable).
//
//   dgrr::Session          one rank of one run: controls, env, RNG, trace, state
//   dgrr::OpGuard          RAII guard recording an operator's inputs and outputs
//   dgrr::rng::RngStreams  counter-based randomness by (purpose, coordinates)
//   dgrr::TensorRef        a view of the bytes to fingerprint, with dtype and shape
//   dgrr::Communicator     collectives between ranks, on bytes (in-process here;
//                          MPI in runtime/mpi_communicator.h: dgrr::mpi, in-tree only)
//   dgrr::CanonicalAllReduce  the gradient sum across ranks, bitwise the same
//                          for any number of ranks and threads
#pragma once

#include "base/status.h"
#include "fingerprint/fingerprint.h"
#include "fingerprint/tensor.h"
#include "rng/distributions.h"
#include "rng/rng_streams.h"
#include "runtime/canonical_reduce.h"
#include "runtime/checkpoint_store.h"
#include "runtime/communicator.h"
#include "runtime/control_file.h"
#include "runtime/inprocess_communicator.h"
#include "runtime/launch_record.h"
#include "runtime/op_guard.h"
#include "runtime/metrics_log.h"
#include "runtime/recording_mode.h"
#include "runtime/tree_reduce.h"
#include "runtime/session.h"
#include "runtime/state_registry.h"
#include "trace_format/record.h"
