#include "trainer/step_metrics.h"

#include <numeric>

namespace parallax::trainer {
namespace {

class Counting final : public comm::Communicator {
 public:
  Counting(std::unique_ptr<comm::Communicator> inner, CollectiveBytes* bytes)
      : inner_(std::move(inner)), bytes_(bytes) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  comm::Backend backend() const override { return inner_->backend(); }
  bool Supports(comm::DataType type) const override { return inner_->Supports(type); }

  Status AllReduce(void* data, size_t count, comm::DataType type, comm::ReduceOp op,
                   comm::Deadline deadline) override {
    const auto n = static_cast<int64_t>(count * comm::DataTypeSize(type));
    bytes_->allreduce_sent += n;
    Status st = inner_->AllReduce(data, count, type, op, deadline);
    if (st.ok()) bytes_->allreduce_received += n;
    return st;
  }
  Status Broadcast(void* data, size_t count, comm::DataType type, int root,
                   comm::Deadline deadline) override {
    bytes_->other += static_cast<int64_t>(count * comm::DataTypeSize(type));
    return inner_->Broadcast(data, count, type, root, deadline);
  }
  Status AllGather(const void* in, size_t count, comm::DataType type, void* out,
                   comm::Deadline deadline) override {
    const auto n = static_cast<int64_t>(count * comm::DataTypeSize(type));
    bytes_->allgather_sent += n;
    Status st = inner_->AllGather(in, count, type, out, deadline);
    if (st.ok()) bytes_->allgather_received += n * inner_->world_size();
    return st;
  }
  Status AllGatherv(const void* in, const std::vector<size_t>& counts, comm::DataType type,
                    void* out, comm::Deadline deadline) override {
    const size_t size = comm::DataTypeSize(type);
    const size_t mine = static_cast<size_t>(inner_->rank()) < counts.size()
                            ? counts[static_cast<size_t>(inner_->rank())]
                            : 0;
    bytes_->allgather_sent += static_cast<int64_t>(mine * size);
    Status st = inner_->AllGatherv(in, counts, type, out, deadline);
    if (st.ok()) {
      bytes_->allgather_received +=
          static_cast<int64_t>(std::accumulate(counts.begin(), counts.end(), size_t{0}) * size);
    }
    return st;
  }
  Status Barrier(comm::Deadline deadline) override { return inner_->Barrier(deadline); }

 private:
  std::unique_ptr<comm::Communicator> inner_;
  CollectiveBytes* bytes_;
};

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

std::unique_ptr<comm::Communicator> CountingCommunicator(std::unique_ptr<comm::Communicator> inner,
                                                         CollectiveBytes* bytes) {
  return std::make_unique<Counting>(std::move(inner), bytes);
}

void StepMetrics::EndStep(Clock::time_point step_started, Clock::time_point now) {
  const Clock::duration waits = dense_wait_ + sparse_wait_;
  const Clock::duration whole = now - step_started;
  compute_ += whole > waits ? whole - waits : Clock::duration{};
  total_dense_ += dense_wait_;
  total_sparse_ += sparse_wait_;
  dense_wait_ = sparse_wait_ = Clock::duration{};
  ++steps_;
}

std::map<std::string, double> StepMetrics::Take(const CollectiveBytes& coll,
                                                const ps::PsClient* ps) {
  Snapshot now;
  now.v[0] = coll.allreduce_sent;
  now.v[1] = coll.allreduce_received;
  now.v[2] = coll.allgather_sent;
  now.v[3] = coll.allgather_received;
  if (ps) {
    const ps::TransportBytes t = ps->transport_bytes();
    now.v[4] = t.push_sent;
    now.v[5] = t.push_received;
    now.v[6] = t.pull_sent;
    now.v[7] = t.pull_received;
  }
  static const char* kNames[8] = {"allreduce_sent_bytes", "allreduce_recv_bytes",
                                  "allgather_sent_bytes", "allgather_recv_bytes",
                                  "ps_push_sent_bytes",   "ps_push_recv_bytes",
                                  "ps_pull_sent_bytes",   "ps_pull_recv_bytes"};
  std::map<std::string, double> out;
  const double steps = static_cast<double>(std::max<int64_t>(steps_, 1));
  for (int i = 0; i < 8; ++i) out[kNames[i]] = static_cast<double>(now.v[i] - last_.v[i]) / steps;
  out["compute_ms"] = Ms(compute_) / steps;
  out["dense_wait_ms"] = Ms(total_dense_) / steps;
  out["sparse_wait_ms"] = Ms(total_sparse_) / steps;
  out["steps"] = static_cast<double>(steps_);
  last_ = now;
  compute_ = total_dense_ = total_sparse_ = Clock::duration{};
  steps_ = 0;
  return out;
}

}  // namespace parallax::trainer
