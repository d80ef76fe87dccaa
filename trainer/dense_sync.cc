#include "trainer/dense_sync.h"

#include <algorithm>

namespace parallax::trainer {

DenseSync::DenseSync(const Options& options, comm::Communicator* comm, Timeline* timeline,
                     StepMetrics* metrics)
    : options_(options), comm_(comm), timeline_(timeline), metrics_(metrics) {
  if (comm_ == nullptr) return;
  comm::FusionOptions fo;
  fo.bucket_bytes = options_.fusion_bucket_bytes;
  fo.op = comm::ReduceOp::kMean;
  fo.bucket_timeout = options_.step_timeout;
  fo.observer = timeline_->FusionObserver();
  fusion_ = std::make_unique<comm::GradientFusion>(comm_, fo);
}

DenseSync::~DenseSync() { fusion_.reset(); }

void DenseSync::Add(const plan::PlannedVariable& v, std::vector<float> values) {
  Slot slot;
  slot.var = v;
  slot.grad.assign(values.size(), 0.0f);
  slot.optimizer = std::make_unique<optim::DenseOptimizer>(v.optimizer, values.size());
  slot.values = std::move(values);
  index_[v.id] = slots_.size();
  slots_.push_back(std::move(slot));
}

Status DenseSync::BroadcastDenseValues() {
  if (comm_ == nullptr) return Status::Ok();
  for (Slot& s : slots_) {
    if (s.var.sparse) continue;
    Status st = comm_->Broadcast(s.values, 0, Deadline());
    if (!st.ok()) return st.WithContext("broadcasting the initial values of \"" + s.var.name + "\"");
  }
  return Status::Ok();
}

Status DenseSync::Gradient(uint32_t id, std::span<const float> grad) {
  Slot& s = At(id);
  s.grad_given = true;
  std::copy(grad.begin(), grad.end(), s.grad.begin());
  if (!fusion_) return Status::Ok();
  return fusion_->Register(s.grad.data(), s.grad.size()).WithContext("all-reduce");
}

void DenseSync::ReducedGradient(uint32_t id, std::span<const float> mean) {
  Slot& s = At(id);
  s.grad_given = true;  // Finish() neither registers nor zeroes it
  std::copy(mean.begin(), mean.end(), s.grad.begin());
}

bool DenseSync::HasGradient(uint32_t id) const { return At(id).grad_given; }

void DenseSync::AddRows(uint32_t id, std::span<const int64_t> ids, std::span<const float> rows) {
  Slot& s = At(id);
  const uint32_t dim = s.var.dim;
  for (size_t i = 0; i < ids.size(); ++i) {
    float* row = s.grad.data() + static_cast<size_t>(ids[i]) * dim;
    for (uint32_t j = 0; j < dim; ++j) row[j] += rows[i * dim + j];
  }
  s.grad_given = true;
}

Status DenseSync::Finish(std::span<const std::span<float>> extra) {
  // Registration order: the dense gradients given (in backward order), the
  // missing ones as zeros, then the whole-table gradients of sparse tables;
  // every rank registers the same sequence.
  for (Slot& s : slots_) {
    if (s.var.sparse || s.grad_given) continue;
    std::fill(s.grad.begin(), s.grad.end(), 0.0f);
    if (fusion_) PX_RETURN_IF_ERROR(fusion_->Register(s.grad.data(), s.grad.size()).WithContext("all-reduce"));
  }
  if (fusion_) {
    for (Slot& s : slots_) {
      if (!s.var.sparse) continue;
      PX_RETURN_IF_ERROR(fusion_->Register(s.grad.data(), s.grad.size()).WithContext("all-reduce"));
    }
    for (std::span<float> block : extra) {
      if (block.empty()) continue;
      PX_RETURN_IF_ERROR(fusion_->Register(block.data(), block.size()).WithContext("all-reduce of hot rows"));
    }
    WaitTimer timer(metrics_, /*dense=*/true, timeline_);
    PX_RETURN_IF_ERROR(fusion_->Synchronize(Deadline()).WithContext("all-reduce of dense gradients"));
  }
  for (Slot& s : slots_) {
    s.optimizer->Apply(s.grad, s.values);
    if (s.var.sparse) std::fill(s.grad.begin(), s.grad.end(), 0.0f);
    s.grad_given = false;
  }
  return Status::Ok();
}

std::span<const float> DenseSync::Values(uint32_t id) const {
  const Slot& s = At(id);
  return std::span<const float>(s.values.data(), s.var.sparse ? s.values.size() : s.var.size);
}

void DenseSync::AppendHeld(std::vector<HeldVariable>* held) {
  for (Slot& s : slots_) {
    held->push_back({s.var.id, s.var.name, &s.values, s.optimizer.get(), nullptr});
  }
}

}  // namespace parallax::trainer
