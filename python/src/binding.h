// The pieces of the `parallax._core` extension (python/src/module.cc puts
// them together). A thin layer over the public Session API
// (<parallax/session.h>): the semantics live in C++ and are tested there;
// this adds what Python users expect (numpy arrays, exceptions, the GIL
// released while the Session blocks).
#ifndef PARALLAX_PYTHON_SRC_BINDING_H_
#define PARALLAX_PYTHON_SRC_BINDING_H_

#include <pybind11/pybind11.h>

#include "parallax/status.h"

namespace parallax::python {

// Raises parallax.Error (code name and message) for a failed Status.
void ThrowIfError(const Status& status);

// SessionOptions and the job's settings as Python sees them
// (python/src/options.cc: the one file that reads SessionOptions' fields
// and the job config types).
void BindOptions(pybind11::module_& m);
// The Session (python/src/session.cc).
void BindSession(pybind11::module_& m);
// A dynamic table held in this process (python/src/dynamic_table.cc).
void BindDynamicTable(pybind11::module_& m);

}  // namespace parallax::python

#endif  // PARALLAX_PYTHON_SRC_BINDING_H_
