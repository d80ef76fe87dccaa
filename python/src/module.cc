// parallax._core: the Session API for Python. parallax/__init__.py re-exports
// what users need; parallax.torch builds on it.
#include <Python.h>

#include <string>

#include "python/src/binding.h"

namespace py = pybind11;

namespace parallax::python {
namespace {

// parallax.Error, created once when the module loads; owned by the module.
PyObject* error_class = nullptr;

}  // namespace

void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  py::object cls = py::reinterpret_borrow<py::object>(error_class);
  py::object error = cls(status.ToString());
  error.attr("code") = std::string(StatusCodeName(status.code()));
  error.attr("message") = status.message();
  PyErr_SetObject(error_class, error.ptr());
  throw py::error_already_set();
}

}  // namespace parallax::python

PYBIND11_MODULE(_core, m) {
  m.doc() = "The libparallax Session API (parallax/session.h) for Python";
  parallax::python::error_class = PyErr_NewExceptionWithDoc(
      "parallax.Error",
      "A failed Parallax call: `code` is the status code name (INVALID_ARGUMENT, "
      "FAILED_PRECONDITION, ...), `message` what went wrong and what to do.",
      PyExc_RuntimeError, nullptr);
  if (parallax::python::error_class == nullptr) throw py::error_already_set();
  m.attr("Error") = py::reinterpret_steal<py::object>(parallax::python::error_class);
  parallax::python::BindOptions(m);
  parallax::python::BindSession(m);
  parallax::python::BindDynamicTable(m);
}
