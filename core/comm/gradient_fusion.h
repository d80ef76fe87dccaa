// GradientFusion: all-reduces gradients while the backward pass is still
// running. Gradients are registered in the order backward produces them
// (last layer first); small ones are packed into fusion buckets of up to
// `bucket_bytes` (Horovod's tensor fusion), and a background thread
// all-reduces each bucket as soon as it is full, so communication overlaps
// the computation of the remaining gradients. A bucket is one call either
// way; where the communicator reduces pieces in place (shared memory) it is
// a list of the gradients and nothing is copied, otherwise the gradients are
// packed into it and copied back. How gradients are packed is
// core/comm/fusion_buckets.h, which the planner counts calls with. Synchronize() flushes the last,
// partly filled bucket and waits until every result is back in place.
//
//   GradientFusion fusion(comm, {});
//   for each layer, last first: compute grad; fusion.Register(grad.data(), grad.size());
//   PX_RETURN_IF_ERROR(fusion.Synchronize(deadline));  // grads now hold the mean
//
// REQUIRES: every rank registers the same gradients (counts) in the same
// order each step, so buckets line up; host float32 memory (Gloo backend).
// A registered buffer must stay valid and untouched until Synchronize()
// returns. While buckets are pending, do not use `comm` from other threads.
//
// Thread-compatible: Register() and Synchronize() are called from one thread
// (the training loop); the background thread is internal.
#ifndef PARALLAX_CORE_COMM_GRADIENT_FUSION_H_
#define PARALLAX_CORE_COMM_GRADIENT_FUSION_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/fusion_buckets.h"

namespace parallax::comm {

struct FusionEvent {
  enum Kind { kRegistered, kBucketStarted, kBucketFinished };
  Kind kind;
  int index;  // gradient index for kRegistered, bucket index otherwise (per step)
};

struct FusionOptions {
  // Buckets are filled up to this many bytes of float32 (Horovod's default).
  // A gradient at least this large is reduced alone, in place. 0: no fusion
  // (every gradient is its own bucket).
  size_t bucket_bytes = 64u << 20;
  ReduceOp op = ReduceOp::kMean;
  // Sends buckets as fp16 (half the bytes; sums lose precision: fp16 has an
  // 11-bit significand and overflows above 65504).
  bool fp16_compression = false;
  // Deadline of each bucket's all-reduce, counted from when it starts.
  std::chrono::milliseconds bucket_timeout{300'000};
  // Called from the registering thread (kRegistered) and the background
  // thread (bucket events). For tests and tracing; must be quick.
  std::function<void(const FusionEvent&)> observer;
};

class GradientFusion {
 public:
  // `comm` must outlive this object.
  GradientFusion(Communicator* comm, FusionOptions options);
  ~GradientFusion();  // waits for the bucket in flight, then joins the thread
  GradientFusion(const GradientFusion&) = delete;
  GradientFusion& operator=(const GradientFusion&) = delete;

  // Adds a gradient to the current bucket (copying it in, unless unpacked) and hands the
  // bucket to the background thread once it is full. Returns the error of an
  // earlier bucket, if any.
  Status Register(float* data, size_t count);

  // Sends the last bucket and waits until every bucket of this step is reduced
  // and copied back. Then the next step may begin. Returns the first error of
  // the step (naming the bucket), or DEADLINE_EXCEEDED.
  Status Synchronize(Deadline deadline);

  // Buckets formed in the current (or just synchronized) step.
  int buckets_in_step() const;

 private:
  struct Bucket;
  void Seal();  // hands the current bucket to the thread
  void Loop();

  // Constant after construction.
  Communicator* const comm_;
  const FusionOptions options_;
  // The communicator reduces a bucket's gradients where they lie
  // (ReducesPiecesInPlace): buckets are lists, nothing is copied.
  const bool unpacked_;

  // Registering thread only.
  FusionBucketRule rule_;                         // places each gradient
  std::vector<std::unique_ptr<Bucket>> buckets_;  // reused across steps
  int open_ = -1;                                 // index of the bucket being filled
  int used_ = 0;                                  // buckets formed this step
  int registered_ = 0;                            // gradients this step

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Bucket*> queue_;  // guarded by mu_
  int done_ = 0;               // guarded by mu_: buckets finished this step
  Status error_;               // guarded by mu_: first error of this step
  bool stop_ = false;          // guarded by mu_
  std::thread thread_;
};

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_GRADIENT_FUSION_H_
