#include "core/comm/gradient_fusion.h"

#include <cstring>
#include <string>

#include "core/comm/half.h"

namespace parallax::comm {

struct GradientFusion::Bucket {
  struct Slice {
    float* dst;
    size_t count;
    size_t offset;
  };
  int index = 0;
  std::vector<float> packed;  // fused gradients; capacity kept across steps
  size_t count = 0;           // elements in use
  std::vector<Slice> slices;
  float* in_place = nullptr;   // a large gradient reduced where it lies
  std::vector<uint16_t> wire;  // fp16 copy when compressing
  std::vector<Piece> pieces;   // unpacked: the gradients, reduced where they lie

  float* data() { return in_place != nullptr ? in_place : packed.data(); }
  void Reset(int i) {
    index = i;
    count = 0;
    slices.clear();
    in_place = nullptr;
    pieces.clear();
  }
};

GradientFusion::GradientFusion(Communicator* comm, FusionOptions options)
    : comm_(comm),
      options_(std::move(options)),
      unpacked_(!options_.fp16_compression && comm_->ReducesPiecesInPlace()),
      rule_(options_.bucket_bytes),
      thread_([this] { Loop(); }) {}

GradientFusion::~GradientFusion() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int GradientFusion::buckets_in_step() const { return used_; }

Status GradientFusion::Register(float* data, size_t count) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
  }
  if (data == nullptr && count > 0) return InvalidArgument("GradientFusion: null gradient");
  const int index = registered_++;
  if (options_.observer) options_.observer({FusionEvent::kRegistered, index});
  const FusionBucketRule::Placement place = rule_.Add(count);
  if (place.seal_before) Seal();
  if (place.opens) {
    if (static_cast<size_t>(used_) == buckets_.size())
      buckets_.push_back(std::make_unique<Bucket>());
    open_ = used_++;
    buckets_[open_]->Reset(open_);
  }
  Bucket& b = *buckets_[open_];
  if (unpacked_) {
    b.pieces.push_back({data, count});
    b.count += count;
  } else if (place.in_place) {
    b.in_place = data;  // too large to be worth a copy
    b.count = count;
  } else {
    if (b.packed.size() < b.count + count) b.packed.resize(b.count + count);
    if (count > 0) std::memcpy(b.packed.data() + b.count, data, count * sizeof(float));
    b.slices.push_back({data, count, b.count});
    b.count += count;
  }
  if (place.seal_after) Seal();
  return Status::Ok();
}

void GradientFusion::Seal() {
  Bucket* b = buckets_[open_].get();
  open_ = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(b);
  }
  cv_.notify_all();
}

Status GradientFusion::Synchronize(Deadline deadline) {
  if (open_ >= 0) Seal();
  rule_.Reset();
  std::unique_lock<std::mutex> lock(mu_);
  bool finished = cv_.wait_until(lock, deadline, [&] { return done_ == used_; });
  Status result = error_;
  if (!finished) {
    result = DeadlineExceeded("GradientFusion: " + std::to_string(used_ - done_) + " of " +
                              std::to_string(used_) +
                              " bucket(s) still being all-reduced at the Synchronize deadline");
    error_ = result;  // the step is lost; later calls fail too
    return result;
  }
  if (result.ok()) {
    done_ = 0;
    used_ = 0;
    registered_ = 0;
  }
  return result;
}

void GradientFusion::Loop() {
  while (true) {
    Bucket* b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      b = queue_.front();
      queue_.pop_front();
      if (!error_.ok()) {  // an earlier bucket failed: the step is lost
        ++done_;
        cv_.notify_all();
        continue;
      }
    }
    if (options_.observer) options_.observer({FusionEvent::kBucketStarted, b->index});
    Deadline deadline = DeadlineAfter(options_.bucket_timeout);
    Status s;
    if (unpacked_) {
      s = comm_->AllReducePieces(b->pieces, DataType::kFloat32, options_.op, deadline);
    } else if (options_.fp16_compression) {
      b->wire.resize(b->count);
      FloatsToHalves(b->data(), b->wire.data(), b->count);
      s = comm_->AllReduce(b->wire.data(), b->count, DataType::kFloat16, options_.op, deadline);
      if (s.ok()) HalvesToFloats(b->wire.data(), b->data(), b->count);
    } else {
      s = comm_->AllReduce(b->data(), b->count, DataType::kFloat32, options_.op, deadline);
    }
    if (s.ok()) {
      for (const auto& slice : b->slices) {
        if (slice.count > 0) {
          std::memcpy(slice.dst, b->packed.data() + slice.offset, slice.count * sizeof(float));
        }
      }
    }
    if (options_.observer) options_.observer({FusionEvent::kBucketFinished, b->index});
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!s.ok() && error_.ok()) {
        error_ = s.WithContext("GradientFusion bucket " + std::to_string(b->index) + " (" +
                               std::to_string(b->count) + " elements)");
      }
      ++done_;
    }
    cv_.notify_all();
  }
}

}  // namespace parallax::comm
