// Communicators (python/binding.h): the ranks of a data-parallel run
// (docs/python.md): MPI's when an MPI launcher started the process, a world
// of one, or dgrr.distributed's over torch.distributed; and the canonical
// all-reduce and gather over them.
#include "python/binding.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/environment.h"
#include "base/status.h"
#include "python/python_communicator.h"
#include "runtime/canonical_reduce.h"
#include "runtime/communicator.h"
#if defined(DGRR_HAVE_MPI)
#include "runtime/mpi_communicator.h"
#endif

namespace dgrr::python {
namespace {

bool StartedByMpiLauncher() {
  for (const char* launcher_variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (GetEnv(launcher_variable)) return true;
  }
  return false;
}

// backend: "auto" (MPI when an MPI launcher started this process, else a
// world of one), "mpi" (MPI or an error) or "single" (a world of one).
std::unique_ptr<PyCommunicator> OpenCommunicator(const std::string& backend) {
  if (backend != "auto" && backend != "mpi" && backend != "single") {
    ThrowInvalid("unknown communicator backend '" + backend + "' (one of: auto, mpi, single)");
  }
  if (backend == "single" || (backend == "auto" && !StartedByMpiLauncher())) {
    return std::make_unique<PyCommunicator>();
  }
#if defined(DGRR_HAVE_MPI)
  StatusOr<std::unique_ptr<MpiCommunicator>> mpi = Status::Internal("unset");
  {
    py::gil_scoped_release release;
    mpi = OpenMpiCommunicator();
  }
  return std::make_unique<PyCommunicator>(Unwrap(std::move(mpi)));
#else
  Throw(Status::FailedPrecondition(
      std::string(backend == "mpi" ? "an MPI communicator was asked for"
                                   : "this process was started by an MPI launcher") +
      ", but this build of dgrr has no MPI support (dgrr::mpi was not built: install "
      "libopenmpi-dev and reconfigure, or run one process without mpirun)"));
#endif
}

// A float32 tensor's memory as `rows` x `cols` (rows: its first dimension).
struct FloatMatrix {
  TensorView view;
  float* data = nullptr;
  size_t rows = 0, cols = 0;
};

FloatMatrix FloatMatrixOf(const py::handle& obj, const std::string& what, int ndim) {
  FloatMatrix m;
  m.view = ViewOf(obj, what, /*need_writable=*/true);
  if (m.view.ref.dtype != DType::kF32 || m.view.ref.ndim != ndim) {
    ThrowInvalid(what + ": must be a " + std::to_string(ndim) + "-dimensional float32 tensor, not " +
                 std::to_string(m.view.ref.ndim) + "-dimensional " + std::string(DTypeName(m.view.ref.dtype)));
  }
  m.data = static_cast<float*>(const_cast<void*>(m.view.ref.data));
  m.rows = ndim == 2 ? static_cast<size_t>(m.view.ref.dims[0]) : 1;
  m.cols = static_cast<size_t>(m.view.ref.dims[ndim - 1]);
  return m;
}

// CanonicalAllReduce over the rows of `leaves` (this rank's leaves
// [first, first + rows) of `total`; clobbered) into `out`: bitwise the
// one-process canonical tree sum whatever the number of ranks.
void CanonicalAllReducePy(PyCommunicator& c, const py::handle& leaves, uint64_t first, uint64_t total,
                          const py::handle& out, int threads) {
  Communicator& comm = c.Get();
  FloatMatrix in = FloatMatrixOf(leaves, "canonical_all_reduce leaves", 2);
  FloatMatrix result = FloatMatrixOf(out, "canonical_all_reduce out", 1);
  if (in.rows > 0 && in.cols != result.cols) {
    ThrowInvalid("canonical_all_reduce: leaves of " + std::to_string(in.cols) + " values, out of " +
                 std::to_string(result.cols));
  }
  std::vector<float*> rows(in.rows);
  for (size_t r = 0; r < in.rows; ++r) rows[r] = in.data + r * result.cols;
  Status status;
  {
    py::gil_scoped_release release;
    status = CanonicalAllReduce(comm, rows, first, total, result.cols, result.data, threads);
  }
  Check(status);
}

std::vector<float> GatherExampleScalarsPy(PyCommunicator& c, const std::vector<float>& mine, uint64_t first,
                                          uint64_t total) {
  Communicator& comm = c.Get();
  std::vector<float> all;
  Status status;
  {
    py::gil_scoped_release release;
    status = GatherExampleScalars(comm, mine, first, total, &all);
  }
  Check(status);
  return all;
}

}  // namespace

void PyCommunicator::Close() {
  // Closing a session removes it from users_.
  while (!users_.empty()) {
    PySession* s = users_.back();
    try {
      s->Close();
    } catch (py::error_already_set&) {
      // Its error was raised in Python before; the communicator still closes.
    }
    RemoveUser(s);
  }
  if (comm_ == nullptr) return;
  py::gil_scoped_release release;  // MPI_Finalize waits for the other ranks
  comm_ = nullptr;
  owned_.reset();
  alone_.reset();
}

void BindCommunicator(py::module_& m) {
  py::class_<PyCommunicator>(m, "Communicator",
                             "This process's rank of a data-parallel run (dgrr.communicator()).")
      .def_property_readonly("rank", [](PyCommunicator& c) { return c.Get().rank(); })
      .def_property_readonly("size", [](PyCommunicator& c) { return c.Get().size(); })
      .def_property_readonly("backend",
                             [](PyCommunicator& c) { return std::string(c.Get().name()); })
      .def_property_readonly("closed", &PyCommunicator::closed)
      .def("barrier",
           [](PyCommunicator& c) {
             Communicator& comm = c.Get();
             Status status;
             {
               py::gil_scoped_release release;
               status = comm.Barrier();
             }
             Check(status);
           })
      .def("canonical_all_reduce", &CanonicalAllReducePy, py::arg("leaves"), py::arg("first"),
           py::arg("total"), py::arg("out"), py::arg("threads") = 1,
           "out = the canonical tree sum of all ranks' leaves (float32 rows; this rank's are "
           "leaves [first, first + rows) of total, and are clobbered): bitwise the one-process "
           "sum whatever the number of ranks.")
      .def("gather_example_scalars", &GatherExampleScalarsPy, py::arg("mine"), py::arg("first"),
           py::arg("total"), "Every leaf's scalar (float32), in leaf order, on every rank.")
      .def("abort", &PyCommunicator::Abort, py::arg("message"), py::arg("code") = "Internal error",
           "Ends the whole job (MPI_Abort with the CLI's exit code for `code`).")
      .def("close", &PyCommunicator::Close);
  m.def("_open_communicator", &OpenCommunicator, py::arg("backend") = "auto");
  m.def(
      "_open_python_communicator",
      [](int rank, int size, const std::string& name, py::object ops) {
        if (size < 1 || rank < 0 || rank >= size) {
          ThrowInvalid("rank " + std::to_string(rank) + " of " + std::to_string(size) + " is not a rank");
        }
        return std::make_unique<PyCommunicator>(MakePythonCommunicator(rank, size, name, std::move(ops)));
      },
      py::arg("rank"), py::arg("size"), py::arg("name"), py::arg("ops"),
      "A communicator whose byte collectives call ops's methods (dgrr.distributed).");
  DefineTreeReduce(m);
  m.attr("have_mpi") =
#if defined(DGRR_HAVE_MPI)
      true;
#else
      false;
#endif
}

}  // namespace dgrr::python
