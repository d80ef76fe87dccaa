// The rule by which GradientFusion (core/comm/gradient_fusion.h) packs a
// step's gradients into fusion buckets, one all-reduce call each, without
// the data: GradientFusion places every gradient with it, and the planner's
// cost model (core/plan) counts a plan's all-reduce calls with it, so the
// prediction and the trainer cannot drift apart.
//
// Gradients are placed in the order they are registered. A gradient that
// does not fit in the open bucket's remaining room seals it first; one of at
// least `bucket_bytes` that would start an empty bucket is reduced alone,
// in place; a bucket is sealed as soon as it holds `bucket_bytes` or more.
// `bucket_bytes` = 0: every gradient is its own bucket.
//
// Header-only on purpose: core/plan uses it without linking px_comm (Gloo).
#ifndef PARALLAX_CORE_COMM_FUSION_BUCKETS_H_
#define PARALLAX_CORE_COMM_FUSION_BUCKETS_H_

#include <cstddef>
#include <span>

namespace parallax::comm {

class FusionBucketRule {
 public:
  // Where the next gradient goes, in the order GradientFusion acts on it.
  struct Placement {
    bool seal_before = false;  // the open bucket has no room: seal it first
    bool opens = false;        // the gradient starts a new bucket
    bool in_place = false;     // reduced alone where it lies (too large to copy)
    bool seal_after = false;   // the bucket is full with it: seal it
  };

  explicit FusionBucketRule(size_t bucket_bytes) : limit_(bucket_bytes / sizeof(float)) {}

  // Places the next gradient of `count` float32 elements.
  Placement Add(size_t count) {
    Placement p;
    if (open_ && fill_ > 0 && fill_ + count > limit_) {
      p.seal_before = true;
      open_ = false;
    }
    if (!open_) {
      p.opens = true;
      open_ = true;
      fill_ = 0;
      ++buckets_;
    }
    p.in_place = count >= limit_ && fill_ == 0;
    fill_ += count;
    if (fill_ >= limit_) {
      p.seal_after = true;
      open_ = false;
    }
    return p;
  }

  // Buckets formed since construction or the last Reset().
  int buckets() const { return buckets_; }

  // The step ended (its last bucket was sealed): the next gradient opens a
  // new bucket and the count starts again.
  void Reset() {
    open_ = false;
    fill_ = 0;
    buckets_ = 0;
  }

 private:
  size_t limit_;        // elements
  bool open_ = false;   // a bucket is being filled
  size_t fill_ = 0;     // elements in the open bucket
  int buckets_ = 0;
};

// All-reduce calls of a step whose gradients have `counts` float32 elements,
// registered in this order.
inline int CountFusionBuckets(std::span<const size_t> counts, size_t bucket_bytes) {
  FusionBucketRule rule(bucket_bytes);
  for (size_t count : counts) rule.Add(count);
  return rule.buckets();
}

}  // namespace parallax::comm

#endif  // PARALLAX_CORE_COMM_FUSION_BUCKETS_H_
