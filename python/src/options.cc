// SessionOptions for Python: the rank's identity and the job's settings. The
// one file of the extension that reads SessionOptions' fields and the job
// config types, so that a change of their shape touches only this file.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <string>

#include "parallax/session.h"
#include "python/src/binding.h"

namespace py = pybind11;

namespace parallax::python {
namespace {

// A float setting as the job file wrote it: the shortest decimal that reads
// back as `f` (0.01f is 0.01, not 0.009999999776...), as a Python float.
double AsWritten(float f) {
  char text[32];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, f);
  return std::strtod(std::string(text, r.ptr).c_str(), nullptr);
}

py::dict OptimizerDict(const OptimizerSettings& c) {
  py::dict d;
  d["type"] = OptimizerTypeName(c.type);
  d["lr"] = AsWritten(c.lr);
  d["momentum"] = AsWritten(c.momentum);
  d["beta1"] = AsWritten(c.beta1);
  d["beta2"] = AsWritten(c.beta2);
  d["epsilon"] = AsWritten(c.epsilon);
  d["initial_accumulator"] = AsWritten(c.initial_accumulator);
  return d;
}

// The settings a Python trainer reads: the job file's when there is one,
// else the defaults a Session runs with. Enums as job files spell them.
py::dict JobDict(const SessionOptions& o) {
  const JobConfig& j = o.config;
  py::dict d;
  d["name"] = j.job.name;
  d["workers"] = j.job.workers;
  d["arch"] = ArchName(j.job.arch);
  d["consistency"] = ConsistencyName(j.job.consistency);
  d["staleness"] = j.job.staleness;
  d["source"] = j.source;
  d["base_dir"] = j.base_dir;
  d["steps"] = j.trainer.steps;
  d["batch_size"] = j.trainer.batch_size;
  d["checkpoint_dir"] = j.trainer.checkpoint_dir;
  d["checkpoint_every"] = j.trainer.checkpoint_every;
  d["metrics_every"] = j.trainer.metrics_every;
  d["hot_rows"] = j.ps.hot_rows;  // [ps] hot_rows: -1 "auto", 0 none, N
  d["dense_optimizer"] = OptimizerDict(j.dense_optimizer);
  d["sparse_optimizer"] = OptimizerDict(j.sparse_optimizer);
  d["user_toml"] = j.user_toml;
  d["model_toml"] = j.model_toml;
  py::list overrides;
  for (const VariableOverride& v : j.variables) {
    py::dict over;
    over["name"] = v.name;
    over["path"] = v.path ? py::cast(std::string(VariablePathName(*v.path))) : py::none();
    over["optimizer"] = v.optimizer ? py::object(OptimizerDict(*v.optimizer)) : py::none();
    // A dynamic table's settings, None where the entry leaves them.
    over["admit_after"] = v.admit_after ? py::cast(*v.admit_after) : py::none();
    over["ttl_steps"] = v.ttl_steps ? py::cast(*v.ttl_steps) : py::none();
    over["max_rows"] = v.max_rows ? py::cast(*v.max_rows) : py::none();
    over["eviction"] =
        v.eviction ? py::cast(std::string(EvictionPolicyName(*v.eviction))) : py::none();
    overrides.append(over);
  }
  d["variables"] = overrides;
  return d;
}

}  // namespace

void BindOptions(py::module_& m) {
  py::class_<SessionOptions>(m, "SessionOptions",
                             "One rank's identity and its job's settings (parallax/session.h)")
      .def_static(
          "from_environment",
          [] {
            StatusOr<SessionOptions> o = SessionOptions::FromEnvironment();
            ThrowIfError(o.status());
            return std::move(o).value();
          },
          "Reads the task environment the agent sets (schemas/task_env.md) and the job file "
          "(PARALLAX_JOB_FILE); without them, one rank with no coordinator.")
      .def_readonly("job_id", &SessionOptions::job_id)
      .def_readonly("attempt", &SessionOptions::attempt)
      .def_readonly("rank", &SessionOptions::rank)
      .def_readonly("world_size", &SessionOptions::world_size)
      .def_readonly("local_rank", &SessionOptions::local_rank)
      .def_readonly("local_world_size", &SessionOptions::local_world_size)
      .def_readonly("host_index", &SessionOptions::host_index)
      .def_readonly("num_hosts", &SessionOptions::num_hosts)
      .def_readonly("num_shards", &SessionOptions::num_shards)
      .def_readonly("coordinator", &SessionOptions::coordinator)
      .def_readonly("trial_steps", &SessionOptions::trial_steps,
                    "in a partition-search trial attempt: its timed steps (0: not a trial)")
      .def_readonly("trial_warmup_steps", &SessionOptions::trial_warmup_steps)
      .def_readwrite("fusion_bucket_bytes", &SessionOptions::fusion_bucket_bytes,
                     "dense fusion buckets, bytes of float32 (0: no fusion)")
      .def_property(
          "step_timeout_ms", [](const SessionOptions& o) { return o.step_timeout.count(); },
          [](SessionOptions& o, int64_t ms) { o.step_timeout = std::chrono::milliseconds(ms); },
          "deadline of each collective and PS wait")
      .def_property_readonly("job", &JobDict,
                             "the job's settings as a dict (steps, batch_size, optimizers, "
                             "[user] as TOML text, ...)");
}

}  // namespace parallax::python
