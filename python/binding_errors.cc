// dgrr._dgrr's exceptions (python/binding.h): dgrr.Error and one subclass per
// StatusCode, and Throw, which raises the class of a non-OK Status's code.
#include "python/binding.h"

#include <array>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dgrr::python {
namespace {

constexpr size_t kCodeCount = static_cast<size_t>(StatusCode::kInternal) + 1;
std::array<PyObject*, kCodeCount> g_error_classes{};
PyObject* g_error_base = nullptr;

struct ErrorClass {
  StatusCode code;
  const char* name;
  bool is_value_error;  // also derives from the builtin ValueError
  Status (*make)(std::string_view);
};

const ErrorClass kErrorClasses[] = {
    {StatusCode::kInvalidArgument, "InvalidArgumentError", true, &Status::InvalidArgument},
    {StatusCode::kNotFound, "NotFoundError", false, &Status::NotFound},
    {StatusCode::kIOError, "IoError", false, &Status::IOError},
    {StatusCode::kCorruption, "CorruptionError", false, &Status::Corruption},
    {StatusCode::kDivergence, "DivergenceError", false, &Status::Divergence},
    {StatusCode::kIntegrityFailure, "IntegrityFailureError", false, &Status::IntegrityFailure},
    {StatusCode::kFailedPrecondition, "FailedPreconditionError", false, &Status::FailedPrecondition},
    {StatusCode::kInternal, "InternalError", false, &Status::Internal},
};

}  // namespace

[[noreturn]] void Throw(const Status& status) {
  size_t index = static_cast<size_t>(status.code());
  PyObject* cls = index < kCodeCount && g_error_classes[index] ? g_error_classes[index] : g_error_base;
  PyErr_SetString(cls, status.message().c_str());
  throw py::error_already_set();
}

[[noreturn]] void ThrowInvalid(const std::string& message) {
  Throw(Status::InvalidArgument(message));
}

Status StatusNamed(std::string_view code, std::string_view message) {
  for (const ErrorClass& c : kErrorClasses) {
    if (code == StatusCodeName(c.code)) return c.make(message);
  }
  return Status::Internal(message);
}

void BindErrors(py::module_& m) {
  g_error_base = PyErr_NewExceptionWithDoc(
      "dgrr._dgrr.Error", "Base class of every error dgrr raises; .code names the StatusCode.",
      PyExc_Exception, nullptr);
  if (g_error_base == nullptr) throw py::error_already_set();
  m.attr("Error") = py::handle(g_error_base);
  for (const ErrorClass& c : kErrorClasses) {
    std::string qualified = std::string("dgrr._dgrr.") + c.name;
    py::object bases = c.is_value_error ? py::object(py::make_tuple(py::handle(g_error_base),
                                                                    py::handle(PyExc_ValueError)))
                                        : py::reinterpret_borrow<py::object>(g_error_base);
    PyObject* cls = PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    py::handle(cls).attr("code") = StatusCodeName(c.code);
    // The exit code the CLI gives this error (docs: 1 usage, 2 I/O, ...).
    py::handle(cls).attr("exit_code") = ExitCodeFor(c.make(""));
    g_error_classes[static_cast<size_t>(c.code)] = cls;
    m.attr(c.name) = py::handle(cls);
  }
}

}  // namespace dgrr::python
