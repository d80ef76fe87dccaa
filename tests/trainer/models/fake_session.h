// FakeSession: an in-memory Session for the models' gradient checks. Values
// live in plain vectors; Step() keeps the step's gradients (sparse rows
// summed into a whole-table gradient) for the test to read, applies SGD with
// `lr` when lr > 0, and advances step() only when `advance` is set, so the
// same batch can be replayed under perturbed values.
#ifndef PARALLAX_TESTS_TRAINER_MODELS_FAKE_SESSION_H_
#define PARALLAX_TESTS_TRAINER_MODELS_FAKE_SESSION_H_

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "parallax/session.h"

namespace parallax::testing {

class FakeSession final : public Session {
 public:
  struct Var {
    std::string name;
    bool sparse = false;
    int64_t rows = 1;
    uint32_t dim = 1;
    std::vector<float> values, grad, last_grad;
  };

  float lr = 0;
  bool advance = false;
  std::vector<Var> vars;
  double last_loss = 0;

  StatusOr<int> RegisterDense(const std::string& name, size_t size,
                              const VariableOptions& o) override {
    Var v;
    v.name = name;
    v.dim = static_cast<uint32_t>(size);
    v.values = o.initial_values.empty()
                   ? InitialDenseValues(o.init, static_cast<uint32_t>(vars.size()), size)
                   : o.initial_values;
    v.grad.assign(size, 0.0f);
    vars.push_back(std::move(v));
    return static_cast<int>(vars.size() - 1);
  }
  StatusOr<int> RegisterSparse(const std::string& name, int64_t rows, uint32_t dim,
                               const VariableOptions& o) override {
    Var v;
    v.name = name;
    v.sparse = true;
    v.rows = rows;
    v.dim = dim;
    v.values.resize(static_cast<size_t>(rows) * dim);
    for (int64_t r = 0; r < rows; ++r)
      InitialSparseRow(o.init, static_cast<uint32_t>(vars.size()), r, dim, v.values.data() + r * dim);
    v.grad.assign(v.values.size(), 0.0f);
    vars.push_back(std::move(v));
    return static_cast<int>(vars.size() - 1);
  }
  StatusOr<int> RegisterDynamic(const std::string& name, uint32_t, const DynamicTableSettings&,
                                const VariableOptions&) override {
    return FailedPrecondition("FakeSession holds no dynamic table (\"" + name + "\")");
  }
  Status SampleIds(int, std::span<const int64_t>) override { return Status::Ok(); }
  // Registered state is saved inside every Step(), as a checkpoint does.
  Status RegisterState(const std::string&, std::function<std::string()> save,
                       std::function<Status(std::string_view)>) override {
    save_ = std::move(save);
    return Status::Ok();
  }
  std::string saved_state;  // what the registered save returned at the last Step()
  void set_step(int64_t step) { step_ = step; }
  Status Start() override { return Status::Ok(); }
  std::optional<int64_t> resumed_from() const override { return std::nullopt; }
  StatusOr<VariablePath> PathOf(int var) const override {
    return vars[static_cast<size_t>(var)].sparse ? VariablePath::kAllGather : VariablePath::kAllReduce;
  }
  Status Prefetch(int, std::span<const int64_t>) override { return Status::Ok(); }
  Status PrefetchMany(std::span<const int>, std::span<const std::span<const int64_t>>) override {
    return Status::Ok();
  }
  Status Lookup(int var, std::span<const int64_t> ids, std::vector<float>* rows) override {
    const Var& v = vars[static_cast<size_t>(var)];
    rows->resize(ids.size() * v.dim);
    for (size_t i = 0; i < ids.size(); ++i)
      std::copy_n(v.values.begin() + ids[i] * v.dim, v.dim, rows->begin() + static_cast<std::ptrdiff_t>(i * v.dim));
    return Status::Ok();
  }
  Status Gradient(int var, std::span<const float> g) override {
    Var& v = vars[static_cast<size_t>(var)];
    if (g.size() != v.grad.size()) return InvalidArgument("dense gradient size");
    std::copy(g.begin(), g.end(), v.grad.begin());
    return Status::Ok();
  }
  Status Gradient(int var, std::span<const int64_t> ids, std::span<const float> rows) override {
    Var& v = vars[static_cast<size_t>(var)];
    if (rows.size() != ids.size() * v.dim) return InvalidArgument("sparse gradient size");
    for (size_t i = 0; i < ids.size(); ++i)
      for (uint32_t j = 0; j < v.dim; ++j) v.grad[ids[i] * v.dim + j] += rows[i * v.dim + j];
    return Status::Ok();
  }
  Status Step() override {
    for (Var& v : vars) {
      if (lr > 0)
        for (size_t i = 0; i < v.values.size(); ++i) v.values[i] -= lr * v.grad[i];
      v.last_grad = v.grad;
      std::fill(v.grad.begin(), v.grad.end(), 0.0f);
    }
    if (advance) ++step_;
    if (save_) saved_state = save_();
    return Status::Ok();
  }
  int64_t step() const override { return step_; }
  StatusOr<std::span<const float>> Dense(int var) const override {
    return std::span<const float>(vars[static_cast<size_t>(var)].values);
  }
  Status ReadSparse(int var, int64_t first, int64_t count, std::vector<float>* out) override {
    const Var& v = vars[static_cast<size_t>(var)];
    out->assign(v.values.begin() + first * v.dim, v.values.begin() + (first + count) * v.dim);
    return Status::Ok();
  }
  Status GradientDevice(int, const void*, size_t) override {
    return FailedPrecondition("the built-in models compute on the CPU");
  }
  Status SetLearningRate(int, double) override {
    return FailedPrecondition("the built-in models set no learning rate");
  }
  Status ReportMetrics(int64_t, double loss, int64_t) override {
    last_loss = loss;
    return Status::Ok();
  }
  const SessionOptions& options() const override { return options_; }

 private:
  int64_t step_ = 0;
  SessionOptions options_;
  std::function<std::string()> save_;
};

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TRAINER_MODELS_FAKE_SESSION_H_
