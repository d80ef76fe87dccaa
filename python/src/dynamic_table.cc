// parallax._core.DynamicTable: core/ps's dynamic table (the one the PS
// shards serve) in this process, for a PyTorch model training alone
// (parallax.torch.DynamicEmbedding without a coordinator): the same rows,
// admission, eviction and optimizer as on a shard, never a second copy in
// Python.
#include "core/ps/dynamic_table.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/optim/optimizer.h"
#include "core/ps/dynamic_file.h"
#include "python/src/binding.h"

namespace py = pybind11;

namespace parallax::python {
namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
using Ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

const uint64_t* Keys(const Ids& ids) {
  return reinterpret_cast<const uint64_t*>(ids.data());  // an id's 64 bits
}

OptimizerSettings OptimizerOf(const py::dict& d) {
  OptimizerSettings o;
  const std::string type = py::cast<std::string>(d["type"]);
  std::optional<OptimizerType> t = ParseOptimizerType(type);
  if (!t) ThrowIfError(InvalidArgument("optimizer type \"" + type + "\" is not sgd, momentum, adagrad or adam"));
  o.type = *t;
  auto get = [&](const char* key, float* out) {
    if (d.contains(key)) *out = py::cast<float>(d[key]);
  };
  get("lr", &o.lr);
  get("momentum", &o.momentum);
  get("beta1", &o.beta1);
  get("beta2", &o.beta2);
  get("epsilon", &o.epsilon);
  get("initial_accumulator", &o.initial_accumulator);
  return o;
}

std::unique_ptr<ps::DynamicTable> Make(const std::string& name, uint32_t var_id, uint32_t dim,
                                       int64_t admit_after, int64_t ttl_steps, int64_t max_rows,
                                       const std::string& eviction,
                                       const std::vector<int64_t>& never_admit,
                                       const std::string& init, uint64_t seed, float scale,
                                       const py::dict& optimizer) {
  ps::VariableSpec var;
  var.id = var_id;
  var.name = name;
  var.dim = dim;
  var.optimizer = OptimizerOf(optimizer);
  std::optional<Initializer::Type> type = ParseInitializerType(init);
  if (!type) ThrowIfError(InvalidArgument("initializer \"" + init + "\" is not uniform, normal or zeros"));
  var.init.type = *type;
  var.init.seed = seed;
  var.init.scale = scale;
  std::optional<EvictionPolicy> policy = ParseEvictionPolicy(eviction);
  if (!policy) ThrowIfError(InvalidArgument("eviction \"" + eviction + "\" is not lru or lfu"));
  var.dynamic = DynamicTableSettings{admit_after, ttl_steps, max_rows, *policy, never_admit};
  // One partition on "shard 0": a shard's table of the whole variable, with
  // the seeds a shard of this plan would use.
  var.partition_shards = {0};
  ps::DynamicTableOptions o = ps::ShardTableOptions(var, 0);
  StatusOr<std::unique_ptr<ps::DynamicTable>> t = ps::DynamicTable::Create(std::move(o));
  ThrowIfError(t.status());
  return std::move(t).value();
}

py::array_t<float> Read(ps::DynamicTable& t, const Ids& ids) {
  py::array_t<float> out(static_cast<py::ssize_t>(ids.size()) * t.dim());
  t.ReadAll(Keys(ids), static_cast<size_t>(ids.size()), out.mutable_data());
  return out;
}

void Push(ps::DynamicTable& t, const Ids& ids, const Floats& grads, float lr_scale) {
  if (static_cast<size_t>(grads.size()) != static_cast<size_t>(ids.size()) * t.dim()) {
    ThrowIfError(InvalidArgument("push: " + std::to_string(grads.size()) + " gradient values for " +
                                 std::to_string(ids.size()) + " ids of dim " +
                                 std::to_string(t.dim())));
  }
  ThrowIfError(t.Push(Keys(ids), static_cast<size_t>(ids.size()), grads.data(), lr_scale));
}

// The ids held, sorted as int64, and their rows in that order.
py::tuple Rows(const ps::DynamicTable& t) {
  std::vector<uint64_t> keys = t.Ids();
  std::vector<int64_t> ids(keys.begin(), keys.end());
  std::sort(ids.begin(), ids.end());
  py::array_t<int64_t> out_ids(static_cast<py::ssize_t>(ids.size()));
  py::array_t<float> out_rows({static_cast<py::ssize_t>(ids.size()), static_cast<py::ssize_t>(t.dim())});
  float* rows = out_rows.mutable_data();
  for (size_t i = 0; i < ids.size(); ++i) {
    out_ids.mutable_data()[i] = ids[i];
    const float* w = t.weights(t.Find(static_cast<uint64_t>(ids[i])));
    std::copy(w, w + t.dim(), rows + i * t.dim());
  }
  return py::make_tuple(out_ids, out_rows);
}

py::dict Stats(const ps::DynamicTable& t) {
  const ps::DynamicTableStats s = t.stats();
  py::dict d;
  for (const ps::DynamicCounter& c : ps::kDynamicCounters) d[c.name] = s.*c.field;
  return d;
}

}  // namespace

void BindDynamicTable(py::module_& m) {
  py::class_<ps::DynamicTable, std::unique_ptr<ps::DynamicTable>>(
      m, "DynamicTable",
      "A dynamic embedding table held in this process (core/ps/dynamic_table.h): any int64 is "
      "an id; admission after admit_after contributions, eviction by TTL and at max_rows")
      .def(py::init(&Make), py::arg("name"), py::arg("var_id"), py::arg("dim"),
           py::arg("admit_after") = 1, py::arg("ttl_steps") = 0, py::arg("max_rows") = 0,
           py::arg("eviction") = "lru", py::arg("never_admit") = std::vector<int64_t>(),
           py::arg("init") = "normal", py::arg("seed") = 1, py::arg("scale") = 1.0f,
           py::arg("optimizer") = py::dict())
      .def_property_readonly("dim", &ps::DynamicTable::dim)
      .def_property_readonly("step", &ps::DynamicTable::step)
      .def("advance_to", &ps::DynamicTable::AdvanceTo, py::arg("step"),
           "starts step `step` (rows whose TTL ran out are evicted)")
      .def("read", &Read, py::arg("ids"),
           "rows of `ids` (len(ids) * dim float32): a row's values, else the initializer's "
           "(zeros for a never-admitted id)")
      .def("push", &Push, py::arg("ids"), py::arg("grads"), py::arg("lr_scale") = 1.0f,
           "one contribution: gradients of repeated ids summed, ids admitted, rows updated")
      .def("rows", &Rows, "(ids sorted as int64, their rows (n, dim))")
      .def("stats", &Stats)
      .def("serialize",
           [](const ps::DynamicTable& t) { return py::bytes(t.Serialize()); })
      .def("restore", [](ps::DynamicTable& t, const py::bytes& b) {
        ThrowIfError(t.Restore(std::string(b)));
      });
}

}  // namespace parallax::python
