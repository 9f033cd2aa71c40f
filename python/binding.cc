// dgrr._dgrr: the Python binding of the C++ session (docs/python.md). This
// file is the module: PYBIND11_MODULE calls each part's Bind*(m) (the parts
// and what they share: python/binding.h), then defines the few functions
// that belong to no part.
#include "python/binding.h"

#include <cstdint>
#include <string>

#include "model/corpus.h"
#include "runtime/determinism.h"
#include "runtime/launch_record.h"

PYBIND11_MODULE(_dgrr, m) {
  using namespace dgrr;
  using namespace dgrr::python;
  m.doc() = "dgrr's C++ session, bound for Python (use the dgrr package, not this module)";
  BindErrors(m);
  BindTorchHooks(m);
  BindSession(m);
  BindCommunicator(m);
  BindTensors(m);
  BindRng(m);
  m.def("arithmetic_corpus",
        [](uint64_t seed, size_t num_bytes) {
          std::string text;
          {
            py::gil_scoped_release release;
            text = model::ArithmeticCorpus(seed, num_bytes);
          }
          return py::bytes(text);
        },
        py::arg("seed"), py::arg("num_bytes") = model::kDefaultCorpusBytes,
        "The embedded arithmetic corpus dgrr train uses (model/corpus.h).");
  {
    // The runtime's names for where a control's value came from, so the
    // torch controls dgrr.torch records read like the C++ ones.
    py::dict origins;
    origins["environment"] = ControlOriginName(ControlOrigin::kEnvironment);
    origins["dgrr_default"] = ControlOriginName(ControlOrigin::kDgrrDefault);
    origins["session"] = ControlOriginName(ControlOrigin::kSession);
    origins["not_applicable"] = ControlOriginName(ControlOrigin::kNotApplicable);
    m.attr("control_origins") = origins;
  }
  m.def("file_digest", [](const std::string& path) { return Unwrap(FileContentDigest(path)); },
        py::arg("path"), "XXH3-64 of a file's bytes (what the launch record stores).");
}
