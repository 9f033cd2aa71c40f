// A Communicator whose byte collectives are Python calls (python/python_communicator.cc).
//
// dgrr.distributed uses it to run dgrr's session and canonical reduction over
// torch.distributed's process group (gloo on the CPU) under `torchrun`: the
// C++ side asks Python to move bytes, never to add them, exactly as it asks
// MPI (docs/ddp.md).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "runtime/communicator.h"

namespace dgrr::python {

// rank of size, backend name `name` (say "torch.distributed:gloo"); `ops` is a
// Python object with the methods barrier(), broadcast(buf, root),
// all_gather(mine, out), all_gather_v(mine, counts, out),
// all_to_all_v(send, send_counts, send_offsets, recv, recv_counts,
// recv_offsets) and abort(message, exit_code), where the buffers are
// writable memoryviews of bytes, valid only during the call. A Python
// exception in one of them becomes a FailedPrecondition Status naming the
// collective. The communicator takes the GIL for each call (the callers
// release it while they wait on other ranks).
std::unique_ptr<Communicator> MakePythonCommunicator(int rank, int size, std::string name,
                                                     pybind11::object ops);

// Defines dgrr._dgrr.tree_reduce(rows, threads=1): the canonical tree sum
// (runtime/tree_reduce.h) of the rows of a C-contiguous float32 NumPy array,
// into row 0 (the other rows are clobbered). dgrr.distributed combines the
// ranks' gathered node sums with it.
void DefineTreeReduce(pybind11::module_& m);

}  // namespace dgrr::python
