// parallax._core.Session: one rank's Session (parallax/session.h) over numpy
// arrays. Calls that may block (Start, Lookup, Step, ...) release the GIL;
// the checkpoint-state callbacks take it back while they run.
#include "parallax/session.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "python/src/binding.h"

namespace py = pybind11;

namespace parallax::python {
namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// Runs a Session call without the GIL (it may block) and raises its error.
template <typename Call>
void WithoutGil(Call call) {
  Status st;
  {
    py::gil_scoped_release nogil;
    st = call();
  }
  ThrowIfError(st);
}

std::span<const int64_t> Span(const Ids& a) { return {a.data(), static_cast<size_t>(a.size())}; }
std::span<const float> Span(const Floats& a) { return {a.data(), static_cast<size_t>(a.size())}; }

// A float vector handed to numpy without a copy: the array owns it.
py::array_t<float> ToArray(std::unique_ptr<std::vector<float>> values) {
  std::vector<float>* raw = values.release();
  py::capsule owner(raw, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  return py::array_t<float>({static_cast<py::ssize_t>(raw->size())}, {sizeof(float)}, raw->data(),
                            owner);
}

StatusOr<Initializer> ParseInitializer(const std::string& type, uint64_t seed, float scale) {
  Initializer init;
  init.seed = seed;
  init.scale = scale;
  if (type == "uniform") {
    init.type = Initializer::Type::kUniform;
  } else if (type == "normal") {
    init.type = Initializer::Type::kNormal;
  } else if (type == "zeros") {
    init.type = Initializer::Type::kZeros;
  } else {
    return InvalidArgument("initializer \"" + type + "\" is not one of uniform, normal, zeros");
  }
  return init;
}

VariableOptions MakeVariableOptions(const std::string& init, uint64_t seed, float scale) {
  StatusOr<Initializer> i = ParseInitializer(init, seed, scale);
  ThrowIfError(i.status());
  VariableOptions v;
  v.init = *i;
  return v;
}

int RegisterDense(Session& s, const std::string& name, size_t size,
                  std::optional<Floats> initial_values, const std::string& init, uint64_t seed,
                  float scale) {
  VariableOptions v = MakeVariableOptions(init, seed, scale);
  if (initial_values) {
    v.initial_values.assign(initial_values->data(),
                            initial_values->data() + initial_values->size());
  }
  StatusOr<int> id = s.RegisterDense(name, size, v);
  ThrowIfError(id.status());
  return *id;
}

int RegisterSparse(Session& s, const std::string& name, int64_t rows, uint32_t dim,
                   const std::string& init, uint64_t seed, float scale,
                   std::optional<Floats> initial_values) {
  VariableOptions v = MakeVariableOptions(init, seed, scale);
  if (initial_values) {
    v.initial_values.assign(initial_values->data(),
                            initial_values->data() + initial_values->size());
  }
  StatusOr<int> id = s.RegisterSparse(name, rows, dim, v);
  ThrowIfError(id.status());
  return *id;
}

int RegisterDynamic(Session& s, const std::string& name, uint32_t dim, int64_t admit_after,
                    int64_t ttl_steps, int64_t max_rows, const std::string& eviction,
                    const std::string& init, uint64_t seed, float scale,
                    const std::vector<int64_t>& never_admit) {
  DynamicTableSettings settings;
  settings.admit_after = admit_after;
  settings.ttl_steps = ttl_steps;
  settings.max_rows = max_rows;
  settings.never_admit = never_admit;
  std::optional<EvictionPolicy> policy = ParseEvictionPolicy(eviction);
  if (!policy) {
    ThrowIfError(InvalidArgument("dynamic table \"" + name + "\": eviction \"" + eviction +
                                 "\" is not lru or lfu"));
  }
  settings.eviction = *policy;
  StatusOr<int> id = s.RegisterDynamic(name, dim, settings, MakeVariableOptions(init, seed, scale));
  ThrowIfError(id.status());
  return *id;
}

// `save()` returns bytes; `restore(bytes)` may raise, which fails the
// resume with the Python error's text.
void RegisterState(Session& s, const std::string& name, py::function save, py::function restore) {
  auto save_fn = [save]() -> std::string {
    py::gil_scoped_acquire gil;
    return std::string(py::bytes(save()));
  };
  auto restore_fn = [restore, name](std::string_view bytes) -> Status {
    py::gil_scoped_acquire gil;
    try {
      restore(py::bytes(bytes.data(), bytes.size()));
    } catch (py::error_already_set& e) {
      return InvalidArgument("restoring state \"" + name + "\": " + e.what());
    }
    return Status::Ok();
  };
  // The Session keeps the callbacks (and so the Python functions) until it is
  // destroyed, which pybind11 does with the GIL held.
  ThrowIfError(s.RegisterState(name, std::move(save_fn), std::move(restore_fn)));
}

py::array_t<float> Lookup(Session& s, int var, const Ids& ids) {
  auto rows = std::make_unique<std::vector<float>>();
  WithoutGil([&] { return s.Lookup(var, Span(ids), rows.get()); });
  return ToArray(std::move(rows));
}

py::array_t<float> ReadSparse(Session& s, int var, int64_t first_row, int64_t count) {
  auto rows = std::make_unique<std::vector<float>>();
  WithoutGil([&] { return s.ReadSparse(var, first_row, count, rows.get()); });
  return ToArray(std::move(rows));
}

// Copies the current values of dense variable `var` into `out`.
void DenseInto(const Session& s, int var, py::array_t<float, py::array::c_style> out) {
  StatusOr<std::span<const float>> values = s.Dense(var);
  ThrowIfError(values.status());
  if (static_cast<size_t>(out.size()) != values->size()) {
    ThrowIfError(InvalidArgument("dense_into: variable " + std::to_string(var) + " has " +
                                 std::to_string(values->size()) + " values, the array " +
                                 std::to_string(out.size())));
  }
  std::copy(values->begin(), values->end(), out.mutable_data());
}

}  // namespace

void BindSession(py::module_& m) {
  py::class_<Session, std::unique_ptr<Session>>(m, "Session",
                                                "One rank of a job (parallax/session.h)")
      .def(py::init([](const SessionOptions& o) {
             std::optional<StatusOr<std::unique_ptr<Session>>> s;
             {
               py::gil_scoped_release nogil;
               s.emplace(Session::Create(o));
             }
             ThrowIfError(s->status());
             return std::move(*s).value();
           }),
           py::arg("options"))
      .def("register_dense", &RegisterDense, py::arg("name"), py::arg("size"),
           py::arg("initial_values") = py::none(), py::arg("init") = "uniform", py::arg("seed") = 1,
           py::arg("scale") = 0.05f)
      .def("register_sparse", &RegisterSparse, py::arg("name"), py::arg("rows"), py::arg("dim"),
           py::arg("init") = "uniform", py::arg("seed") = 1, py::arg("scale") = 0.05f,
           py::arg("initial_values") = py::none(),
           "initial_values: rows × dim values (rank 0's win) instead of the initializer")
      .def("register_dynamic", &RegisterDynamic, py::arg("name"), py::arg("dim"),
           py::arg("admit_after") = 1, py::arg("ttl_steps") = 0, py::arg("max_rows") = 0,
           py::arg("eviction") = "lru", py::arg("init") = "uniform", py::arg("seed") = 1,
           py::arg("scale") = 0.05f, py::arg("never_admit") = std::vector<int64_t>(),
           "a dynamic table (no row count, any int64 id) on the PS shards; the job file's "
           "[[variable]] settings win; never_admit: ids never rows (read as zeros)")
      .def(
          "sample_ids",
          [](Session& s, int var, const Ids& ids) { ThrowIfError(s.SampleIds(var, Span(ids))); },
          py::arg("var"), py::arg("ids"))
      .def("register_state", &RegisterState, py::arg("name"), py::arg("save"), py::arg("restore"))
      .def("start", [](Session& s) { WithoutGil([&] { return s.Start(); }); })
      .def_property_readonly("resumed_from", &Session::resumed_from)
      .def(
          "path_of",
          [](const Session& s, int var) {
            StatusOr<VariablePath> p = s.PathOf(var);
            ThrowIfError(p.status());
            return std::string(VariablePathName(*p));
          },
          py::arg("var"))
      .def(
          "prefetch",
          [](Session& s, int var, const Ids& ids) {
            WithoutGil([&] { return s.Prefetch(var, Span(ids)); });
          },
          py::arg("var"), py::arg("next_ids"))
      .def(
          "prefetch_many",
          [](Session& s, const std::vector<int>& vars, const std::vector<Ids>& ids) {
            std::vector<std::span<const int64_t>> spans;
            for (const Ids& a : ids) spans.push_back(Span(a));
            WithoutGil([&] { return s.PrefetchMany(vars, spans); });
          },
          py::arg("vars"), py::arg("next_ids"),
          "prefetch of several tables at once: with [ps] batch, one pull message per shard")
      .def("lookup", &Lookup, py::arg("var"), py::arg("ids"),
           "rows of `ids` as a flat float32 array (len(ids) × dim)")
      .def(
          "gradient",
          [](Session& s, int var, const Floats& grad) {
            WithoutGil([&] { return s.Gradient(var, Span(grad)); });
          },
          py::arg("var"), py::arg("grad"))
      .def(
          "gradient_device",
          [](Session& s, int var, uintptr_t device_grad, size_t count) {
            WithoutGil([&] {
              return s.GradientDevice(var, reinterpret_cast<const void*>(device_grad), count);
            });
          },
          py::arg("var"), py::arg("data_ptr"), py::arg("count"),
          "a dense gradient in CUDA memory, by address (a tensor's data_ptr())")
      .def(
          "sparse_gradient",
          [](Session& s, int var, const Ids& ids, const Floats& rows) {
            WithoutGil([&] { return s.Gradient(var, Span(ids), Span(rows)); });
          },
          py::arg("var"), py::arg("ids"), py::arg("row_grads"))
      .def("step", [](Session& s) { WithoutGil([&] { return s.Step(); }); })
      .def_property_readonly("steps", &Session::step, "steps finished so far")
      .def("dense_into", &DenseInto, py::arg("var"), py::arg("out"))
      .def("read_sparse", &ReadSparse, py::arg("var"), py::arg("first_row"), py::arg("count"))
      .def(
          "set_learning_rate",
          [](Session& s, int var, double lr) {
            WithoutGil([&] { return s.SetLearningRate(var, lr); });
          },
          py::arg("var"), py::arg("lr"))
      .def(
          "report_metrics",
          [](Session& s, int64_t step, double loss, int64_t samples) {
            WithoutGil([&] { return s.ReportMetrics(step, loss, samples); });
          },
          py::arg("step"), py::arg("loss"), py::arg("samples"))
      .def_property_readonly("options", &Session::options, py::return_value_policy::copy);
}

}  // namespace parallax::python
