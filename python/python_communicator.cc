// A Communicator that calls back into Python for every collective: see
// python/python_communicator.h.
#include "python/python_communicator.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <pybind11/numpy.h>

#include "base/status.h"
#include "runtime/tree_reduce.h"

namespace py = pybind11;

namespace dgrr::python {
namespace {

py::memoryview Bytes(const void* data, size_t count) {
  // Writable even for send buffers: torch.frombuffer warns on read-only
  // memory, and the Python side never writes into what it sends.
  return py::memoryview::from_memory(const_cast<void*>(data), static_cast<py::ssize_t>(count),
                                     /*readonly=*/false);
}

py::list Sizes(std::span<const size_t> values) {
  py::list out;
  for (size_t v : values) out.append(py::int_(v));
  return out;
}

class PythonCommunicator final : public Communicator {
 public:
  PythonCommunicator(int rank, int size, std::string name, py::object ops)
      : rank_(rank), size_(size), name_(std::move(name)), ops_(std::move(ops)) {}

  ~PythonCommunicator() override {
    // Destroyed from PyCommunicator::Close with the GIL released.
    if (Py_IsInitialized() == 0) {
      ops_.release();   // the interpreter is gone: nothing left to decrement
      return;
    }
    py::gil_scoped_acquire gil;
    ops_ = py::object();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return name_; }

  Status Barrier() override {
    return Call("barrier", [&] { ops_.attr("barrier")(); });
  }

  Status Broadcast(void* data, size_t count, int root, const Placement& where) override {
    DGRR_RETURN_IF_ERROR(HostOnly(where, "Broadcast"));
    if (root < 0 || root >= size_) return Status::InvalidArgument("Broadcast: root out of range");
    return Call("broadcast", [&] { ops_.attr("broadcast")(Bytes(data, count), root); });
  }

  Status AllGather(const void* mine, size_t count, void* out, const Placement& where) override {
    DGRR_RETURN_IF_ERROR(HostOnly(where, "AllGather"));
    return Call("all_gather", [&] {
      ops_.attr("all_gather")(Bytes(mine, count), Bytes(out, count * static_cast<size_t>(size_)));
    });
  }

  Status AllGatherV(const void* mine, std::span<const size_t> counts, void* out,
                    const Placement& where) override {
    DGRR_RETURN_IF_ERROR(HostOnly(where, "AllGatherV"));
    if (counts.size() != static_cast<size_t>(size_)) {
      return Status::InvalidArgument("AllGatherV: counts has " + std::to_string(counts.size()) +
                                     " entries for " + std::to_string(size_) + " ranks");
    }
    size_t total = 0;
    for (size_t c : counts) total += c;
    return Call("all_gather_v", [&] {
      ops_.attr("all_gather_v")(Bytes(mine, counts[static_cast<size_t>(rank_)]), Sizes(counts),
                                Bytes(out, total));
    });
  }

  Status AllToAllV(const void* send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_offsets, void* recv, std::span<const size_t> recv_counts,
                   std::span<const size_t> recv_offsets, const Placement& where) override {
    DGRR_RETURN_IF_ERROR(HostOnly(where, "AllToAllV"));
    DGRR_RETURN_IF_ERROR(CheckRankArrays(*this, send_counts, send_offsets, "AllToAllV send"));
    DGRR_RETURN_IF_ERROR(CheckRankArrays(*this, recv_counts, recv_offsets, "AllToAllV recv"));
    size_t send_end = 0, recv_end = 0;
    for (int r = 0; r < size_; ++r) {
      send_end = std::max(send_end, send_offsets[r] + send_counts[r]);
      recv_end = std::max(recv_end, recv_offsets[r] + recv_counts[r]);
    }
    return Call("all_to_all_v", [&] {
      ops_.attr("all_to_all_v")(Bytes(send, send_end), Sizes(send_counts), Sizes(send_offsets),
                                Bytes(recv, recv_end), Sizes(recv_counts), Sizes(recv_offsets));
    });
  }

  void Abort(const Status& why) override {
    py::gil_scoped_acquire gil;
    try {
      ops_.attr("abort")(why.ToString(), ExitCodeFor(why));
    } catch (py::error_already_set& e) {
      e.restore();
      PyErr_Print();
    }
  }

 private:
  Status HostOnly(const Placement& where, const char* what) const {
    if (!where.host()) {
      return Status::FailedPrecondition(std::string(what) + ": the " + name_ +
                                        " communicator moves host memory only");
    }
    return Status::OK();
  }

  template <typename F>
  Status Call(const char* what, F&& f) {
    py::gil_scoped_acquire gil;
    try {
      f();
      return Status::OK();
    } catch (py::error_already_set& e) {
      std::string message = std::string(e.what());
      return Status::FailedPrecondition(name_ + " " + what + " failed on rank " + std::to_string(rank_) +
                                        ": " + message);
    }
  }

  int rank_;
  int size_;
  std::string name_;
  py::object ops_;
};

}  // namespace

std::unique_ptr<Communicator> MakePythonCommunicator(int rank, int size, std::string name, py::object ops) {
  return std::make_unique<PythonCommunicator>(rank, size, std::move(name), std::move(ops));
}

void DefineTreeReduce(py::module_& m) {
  m.def(
      "tree_reduce",
      [](py::array rows, int threads) {
        if (!py::isinstance<py::array_t<float>>(rows) || rows.ndim() != 2 ||
            (rows.flags() & py::array::c_style) == 0 || !rows.writeable()) {
          throw py::value_error("tree_reduce: rows must be a writable C-contiguous 2-D float32 array");
        }
        const size_t count = static_cast<size_t>(rows.shape(0));
        const size_t n = static_cast<size_t>(rows.shape(1));
        if (count == 0) throw py::value_error("tree_reduce: no rows");
        float* base = static_cast<float*>(rows.mutable_data());
        std::vector<float*> buffers(count);
        for (size_t r = 0; r < count; ++r) buffers[r] = base + r * n;
        py::gil_scoped_release release;
        TreeReduceInPlace(buffers, n, threads < 1 ? 1 : threads);
      },
      py::arg("rows"), py::arg("threads") = 1,
      "Row 0 = the canonical tree sum of the rows (float32; the others are clobbered).");
}

}  // namespace dgrr::python
