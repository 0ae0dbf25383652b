// The page-manager model from Python (oracles/page_manager_model.h): the sequential model of
// LeanKV's unified page manager, for people testing an allocator: admit, prompt (allocate),
// decode (append, copy-on-write), share, release (free), and what every page table holds.
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "oracles/page_manager_model.h"
#include "python/src/arrays.h"

namespace kvcheck::py {

namespace {

std::string outcome_name(ModelOutcome o) {
  switch (o) {
    case ModelOutcome::kOk: return "ok";
    case ModelOutcome::kPoolExhausted: return "pool_exhausted";
    case ModelOutcome::kTableFull: return "table_full";
    case ModelOutcome::kRejected: return "rejected";
  }
  return "?";
}

void require_request(const PageManagerModel& m, std::int64_t request, const char* fn, bool present) {
  const bool has = m.requests().count(request) != 0;
  if (has != present) {
    raise_value(std::string(fn) + ": request " + std::to_string(request) + (present ? " is not admitted" : " is already admitted"));
  }
}

}  // namespace

void bind_pages(nb::module_& m) {
  nb::class_<PageManagerModel>(m, "PageManagerModel",
                               "The sequential model of the unified page manager (docs/design.md §6)")
      .def(nb::init<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>(),
           nb::arg("pool_pages"), nb::arg("layers"), nb::arg("kv_heads"), nb::arg("high_tokens_per_page"),
           nb::arg("low_tokens_per_page"), nb::arg("max_seq_len"))
      .def("admit", [](PageManagerModel& s, std::int64_t r) {
             require_request(s, r, "kvcheck.PageManagerModel.admit", false);
             s.admit(r);
           }, nb::arg("request"))
      .def("prompt", [](PageManagerModel& s, std::int64_t r, std::int64_t prompt_len) {
             require_request(s, r, "kvcheck.PageManagerModel.prompt", true);
             if (prompt_len <= 0 || prompt_len > s.max_seq_len()) {
               raise_value("kvcheck.PageManagerModel.prompt: prompt_len must be in [1, " + std::to_string(s.max_seq_len()) +
                           "], got " + std::to_string(prompt_len));
             }
             ModelPrompt p{r, prompt_len, {}};
             ModelPromptHead h;
             for (std::int32_t i = 0; i < prompt_len; ++i) h.high.push_back(i);
             p.heads.assign(static_cast<std::size_t>(s.heads_per_request()), h);
             return outcome_name(s.prompt({p}));
           }, nb::arg("request"), nb::arg("prompt_len"),
           "Allocate a request's prompt: every token kept at the high tier on every head. Returns the outcome.")
      .def("append", [](PageManagerModel& s, std::int64_t r) {
             require_request(s, r, "kvcheck.PageManagerModel.append", true);
             const ModelRequest& req = s.requests().at(r);
             if (!req.prompted) raise_value("kvcheck.PageManagerModel.append: request " + std::to_string(r) + " has no prompt yet");
             std::vector<ModelDecodeOp> ops;
             for (std::int64_t l = 0; l < s.layers(); ++l) {
               for (std::int64_t h = 0; h < s.kv_heads(); ++h) {
                 ModelDecodeOp op;
                 op.request = r;
                 op.layer = l;
                 op.head = h;
                 op.position = req.next_position;
                 ops.push_back(op);
               }
             }
             return outcome_name(s.decode(ops));
           }, nb::arg("request"),
           "One decode step of a request: a new token on every head (copy-on-write of a shared page).")
      .def("share", [](PageManagerModel& s, std::int64_t from, std::int64_t to, std::int64_t tokens) {
             require_request(s, from, "kvcheck.PageManagerModel.share", true);
             require_request(s, to, "kvcheck.PageManagerModel.share", true);
             return outcome_name(s.share(from, to, tokens));
           }, nb::arg("from_request"), nb::arg("to_request"), nb::arg("tokens"))
      .def("release", [](PageManagerModel& s, std::int64_t r) {
             require_request(s, r, "kvcheck.PageManagerModel.release", true);
             s.release(r);
           }, nb::arg("request"), "Finish or preempt: every page whose reference count drops to 0 is freed.")
      .def("refcount", &PageManagerModel::refcount, nb::arg("page"))
      .def("pages", [](const PageManagerModel& s, std::int64_t r, std::int64_t layer, std::int64_t head, int tier) {
             require_request(s, r, "kvcheck.PageManagerModel.pages", true);
             if (layer < 0 || layer >= s.layers() || head < 0 || head >= s.kv_heads() || tier < 0 || tier > 1) {
               raise_value("kvcheck.PageManagerModel.pages: layer, head or tier out of range");
             }
             std::vector<std::int32_t> ids;
             for (const ModelPage& p : s.head(r, layer, head).pages[tier]) ids.push_back(p.id);
             return ids;
           }, nb::arg("request"), nb::arg("layer") = 0, nb::arg("head") = 0, nb::arg("tier") = 0,
           "The page ids of one head's table at a tier, in table order.")
      .def_prop_ro("free_pages", [](const PageManagerModel& s) {
             return std::vector<std::int32_t>(s.free_run().begin(), s.free_run().end());
           })
      .def_prop_ro("copies", &PageManagerModel::copies, "copy-on-write copies made so far")
      .def("sharing_violation", &PageManagerModel::sharing_violation);
}

}  // namespace kvcheck::py
