// kvcheck._reference: the reference transformer (reference/model.h) and tokenizers
// (reference/tokenizer.h) from Python. A separate module because it needs the whole of
// reference/ (model I/O, GGUF, tokenizers), which is most of the package's build time.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/src/arrays.h"
#include "reference/errors.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace nb = nanobind;

namespace kvcheck::py {
namespace {

struct PyModel {
  std::unique_ptr<ReferenceModel> model;
  std::optional<Tokenizer> tokenizer;
  std::string path;
};

PyModel load(const std::string& path, int threads) {
  PyModel m;
  m.path = path;
  LoadOptions opt;
  opt.threads = threads;
  {
    nb::gil_scoped_release release;
    m.model.reset(new ReferenceModel(ReferenceModel::load(path, opt)));  // not movable: elided
    m.tokenizer = Tokenizer::find(path);
  }
  return m;
}

const Tokenizer& tokenizer_of(const PyModel& m) {
  if (!m.tokenizer) {
    raise_value("kvcheck.ReferenceModel: " + m.path + " has no tokenizer (tokenizer.json, tokenizer.model or GGUF tokenizer keys)");
  }
  return *m.tokenizer;
}

}  // namespace
}  // namespace kvcheck::py

NB_MODULE(_reference, m) {
  using namespace kvcheck;
  using namespace kvcheck::py;
  m.doc() = "kvcheck's reference transformer (use kvcheck.ReferenceModel)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  nb::class_<PyModel>(m, "ReferenceModel", "The double-precision reference transformer (reference/model.h)")
      .def_static("load", &load, nb::arg("path"), nb::arg("threads") = 0,
                  "A model directory (config.json + safetensors) or a GGUF file.")
      .def_prop_ro("vocab_size", [](const PyModel& s) { return s.model->config().vocab_size; })
      .def_prop_ro("origin", [](const PyModel& s) { return s.model->origin(); })
      .def_prop_ro("has_tokenizer", [](const PyModel& s) { return s.tokenizer.has_value(); })
      .def("tokenize", [](const PyModel& s, const std::string& text, bool add_bos) {
             return tokenizer_of(s).encode(text, add_bos);
           }, nb::arg("text"), nb::arg("add_bos") = true)
      .def("detokenize", [](const PyModel& s, const std::vector<std::int32_t>& ids) {
             return tokenizer_of(s).decode(ids);
           }, nb::arg("ids"))
      .def("logits", [](const PyModel& s, nb::handle ids) {
             std::vector<std::int32_t> storage;
             View<std::int32_t> v = index_view(ids, "kvcheck.ReferenceModel.logits", "ids", storage);
             s.model->check_tokens(v.data, 0, "kvcheck.ReferenceModel.logits: ids");
             MatrixRM out;
             {
               nb::gil_scoped_release release;
               out = s.model->forward(v.data);
             }
             std::vector<float> data(out.data(), out.data() + out.size());
             return numpy_f32(std::move(data), {static_cast<std::int64_t>(out.rows()), static_cast<std::int64_t>(out.cols())});
           }, nb::arg("ids"),
           "Teacher-forced logits [len(ids), vocab] (float32): row i predicts the token after ids[i].");
}
