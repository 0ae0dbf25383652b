// kvcheck._kvcheck: the C++ library's quantizers, bounds, oracles, metrics and page-manager
// model, for Python (python/kvcheck/__init__.py re-exports them; the reference model is
// kvcheck._reference, python/src/model.cpp).
#include <nanobind/nanobind.h>

#include "reference/errors.h"

namespace nb = nanobind;

namespace kvcheck::py {
void bind_quant(nb::module_& m);
void bind_attention(nb::module_& m);
void bind_metrics(nb::module_& m);
void bind_pages(nb::module_& m);
}  // namespace kvcheck::py

NB_MODULE(_kvcheck, m) {
  m.doc() = "kvcheck's C++ oracles, bounds and metrics (use the kvcheck package)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const kvcheck::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  kvcheck::py::bind_quant(m);
  kvcheck::py::bind_attention(m);
  kvcheck::py::bind_metrics(m);
  kvcheck::py::bind_pages(m);
}
