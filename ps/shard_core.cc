#include "ps/shard_core.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <set>
#include <tuple>
#include <unordered_map>

#include <absl/container/flat_hash_map.h>
#include <nlohmann/json.hpp>

#include "core/base/finite.h"
#include "core/base/logging.h"
#include "core/checkpoint/rank_files.h"
#include "core/optim/optimizer.h"
#include "core/ps/row_state.h"
#include "core/ps/row_versions.h"
#include "ps/checkpoint.h"
#include "ps/reshard.h"

namespace parallax::ps {
namespace {

bool IsPushOp(uint8_t op) {
  return op == static_cast<uint8_t>(Op::kPush) || op == static_cast<uint8_t>(Op::kPushPull);
}

size_t StalenessBucket(int64_t tau) {
  if (tau <= 0) return 0;
  size_t b = 1;
  while (b < 15 && tau >= (int64_t{1} << b)) ++b;
  return b;
}

}  // namespace

StatusOr<std::unique_ptr<ShardCore>> ShardCore::Create(ShardOptions options) {
  if (options.shard >= options.plan.num_shards)
    return InvalidArgument("shard " + std::to_string(options.shard) + " is not in the plan, which has " +
                           std::to_string(options.plan.num_shards) + " shards");
  if (options.max_steps_ahead < 1) return InvalidArgument("max_steps_ahead must be >= 1");
  std::unique_ptr<ShardCore> core(new ShardCore(std::move(options)));
  PX_RETURN_IF_ERROR(core->init_status_);
  return core;
}

namespace {

// The dense.pxck entries (same id and name) of `moved`, the variables the
// checkpoint in `dir` has no partition files of (its plan held them on
// workers), by id. The file is read only when there are some, piece by
// piece, and only their entries are kept: it may hold a whole model.
StatusOr<std::map<uint32_t, checkpoint::DenseEntry>> WorkerCopies(
    const std::string& dir, const std::map<uint32_t, const VariableSpec*>& moved) {
  std::map<uint32_t, checkpoint::DenseEntry> copies;
  const std::string path = dir + "/" + checkpoint::kDenseFile;
  if (moved.empty() || !std::filesystem::exists(path)) return copies;
  auto is_moved = [&](uint32_t id, std::string_view name) {
    auto it = moved.find(id);
    return it != moved.end() && it->second->name == name;
  };
  PX_ASSIGN_OR_RETURN(std::vector<checkpoint::DenseEntry> entries,
                      checkpoint::ReadDenseFile(path, is_moved));
  for (checkpoint::DenseEntry& e : entries) copies.try_emplace(e.id, std::move(e));
  return copies;
}

}  // namespace

Status ShardCore::LoadCheckpoint(const std::string& dir, int64_t step) {
  std::map<uint32_t, std::vector<PartitionSnapshot>> loaded;
  std::map<uint32_t, LoadedDynamic> loaded_dynamic;
  // A fixed variable the checkpoint held on workers (the plan moved it here
  // since) has no partition files; dense.pxck holds its rows and state.
  std::map<uint32_t, const VariableSpec*> moved;
  for (const auto& [id, vs] : vars_) {
    if (!vs.dynamic && !std::filesystem::exists(dir + "/" + PartitionFileName(id, 0))) moved[id] = vs.spec;
  }
  auto copies = WorkerCopies(dir, moved);
  if (!copies.ok()) return FailedPrecondition(copies.status().message() + "; nothing was loaded");
  for (auto& [id, vs] : vars_) {
    std::vector<uint32_t> owned;
    for (uint32_t p = 0; p < vs.parts.size(); ++p) {
      if (vs.parts[p].owned) owned.push_back(p);
    }
    if (vs.dynamic) {
      // One file per shard; another partitioning is re-split (ps/reshard.h).
      auto table = LoadDynamic(dir, *vs.spec, options_.shard, options_.plan.num_shards, owned);
      if (!table.ok()) return FailedPrecondition(table.status().message() + "; nothing was loaded");
      loaded_dynamic[id] = std::move(table).value();
      continue;
    }
    if (auto copy = copies->find(id); copy != copies->end()) {
      auto snaps = PartitionsFromWorkerCopy(copy->second.values, copy->second.optimizer, *vs.spec, owned,
                                            step, dir + "/" + checkpoint::kDenseFile);
      if (!snaps.ok()) return FailedPrecondition(snaps.status().message() + "; nothing was loaded");
      PX_LOG(INFO) << "shard " << options_.shard << ": \"" << vs.spec->name
                   << "\" was held on workers at the checkpoint in " << dir
                   << ": its partitions come from " << checkpoint::kDenseFile << ", at step " << step;
      loaded[id] = std::move(snaps).value();
      continue;
    }
    // Another partitioning than the checkpoint's is re-split (ps/reshard.h).
    auto snaps = LoadOwnedPartitions(dir, vs.table->spec(), owned);
    if (!snaps.ok()) return FailedPrecondition(snaps.status().message() + "; nothing was loaded");
    loaded[id] = std::move(snaps).value();
  }
  auto set_part = [&](VarState& vs, uint32_t p, int64_t applied, int64_t version) {
    PartitionState& ps = vs.parts[p];
    ps.applied = applied;
    ps.version = version;
    ps.pending.clear();
  };
  for (auto& [id, snaps] : loaded) {
    VarState& vs = vars_.at(id);
    RestoreTable(vs.table.get(), snaps);
    for (const auto& snap : snaps) set_part(vs, snap.partition, snap.applied, snap.version);
  }
  for (auto& [id, d] : loaded_dynamic) {
    VarState& vs = vars_.at(id);
    vs.dynamic = std::move(d.table);
    vs.dynamic_full.clear();
    for (const DynamicFilePart& p : d.parts) set_part(vs, p.partition, p.applied, p.version);
    if (d.resharded) {
      PX_LOG(INFO) << "shard " << options_.shard << ": dynamic table \"" << vs.spec->name
                   << "\" resharded from the checkpoint in " << dir << ": "
                   << vs.dynamic->stats().rows << " rows held"
                   << (d.evicted > 0 ? ", " + std::to_string(d.evicted) +
                                           " evicted to fit this shard's max_rows"
                                     : std::string());
    }
  }
  // Every row may differ from what a worker's row cache holds.
  for (auto& [id, vs] : vars_) ++vs.resets;
  if (updates_file_) updates_file_->Set(UpdatesApplied());
  return Status::Ok();
}

void ShardCore::AttachUpdatesFile(std::unique_ptr<UpdatesFile> file) {
  updates_file_ = std::move(file);
  updates_file_->Set(UpdatesApplied());
}

void ShardCore::NoteUpdateApplied() {
  if (updates_file_) updates_file_->Set(updates_file_->Get() + 1);
}

int64_t ShardCore::UpdatesApplied() const {
  int64_t total = 0;
  for (const auto& [id, vs] : vars_) {
    for (const PartitionState& p : vs.parts) {
      if (p.owned) total += p.version;
    }
  }
  return total;
}

ShardCore::ShardCore(ShardOptions options)
    : options_(std::move(options)), schedule_(options_.plan) {
  for (const auto& var : options_.plan.variables) {
    VarState vs;
    vs.parts.resize(var.partitions);
    bool any = false;
    for (uint32_t p = 0; p < var.partitions; ++p) {
      vs.parts[p].owned = ShardOf(var, p) == options_.shard;
      any |= vs.parts[p].owned;
    }
    if (!any) continue;
    int64_t owned = 0;
    for (const auto& p : vs.parts) owned += p.owned;
    vs.spec = &var;
    vs.dim = var.dim;
    if (var.dynamic) {
      DynamicTableOptions o = ShardTableOptions(var, options_.shard);
      o.commit_bytes = options_.prefault_bytes;  // as a fixed table's arrays
      StatusOr<std::unique_ptr<DynamicTable>> table = DynamicTable::Create(std::move(o));
      if (!table.ok()) {
        init_status_ = table.status().WithContext("dynamic table \"" + var.name + "\"");
        continue;
      }
      vs.dynamic = std::move(table).value();
    } else {
      vs.table = std::make_unique<VariableTable>(var, var.rows * owned / var.partitions + 1,
                                                 options_.prefault_bytes);
    }
    vars_.emplace(var.id, std::move(vs));
  }
  worker_clock_.assign(options_.plan.contributors(), 0);
}

const VariableTable* ShardCore::table(uint32_t var) const {
  auto it = vars_.find(var);
  return it == vars_.end() ? nullptr : it->second.table.get();
}

const DynamicTable* ShardCore::dynamic_table(uint32_t var) const {
  auto it = vars_.find(var);
  return it == vars_.end() ? nullptr : it->second.dynamic.get();
}

int64_t ShardCore::applied_steps(uint32_t var, uint32_t partition) const {
  auto it = vars_.find(var);
  if (it == vars_.end() || partition >= it->second.parts.size()) return -1;
  return it->second.parts[partition].applied;
}

size_t ShardCore::settings_kept(uint32_t var) const {
  auto it = vars_.find(var);
  return it == vars_.end() ? 0 : it->second.lr_from_step.size();
}

OutMessage ShardCore::Reply(const std::string& identity, const Header& request, Op op) {
  OutMessage m;
  m.identity = identity;
  Header h;
  h.op = static_cast<uint8_t>(op);
  h.flags = ps_wire::kFlagReply |
            (request.flags & (ps_wire::kFlagFp16 | ps_wire::kFlagShm | ps_wire::kFlagRowState |
                              ps_wire::kFlagRowVersions));
  h.variable = request.variable;
  h.partition = request.partition;
  h.worker = request.worker;
  h.request_id = request.request_id;
  // Echoed, unless it was the invalid field of a rejected request.
  h.clock = request.clock >= 0 && request.clock <= ps_wire::kMaxClock ? request.clock : 0;
  h.attempt = request.attempt;
  h.generation = request.generation;
  m.frames[0].resize(ps_wire::kHeaderSize);
  ps_wire::WriteHeader(h, m.frames[0].data());
  return m;
}

OutMessage ShardCore::DataReply(const std::string& identity, const Header& request, Op op) const {
  OutMessage m = Reply(identity, request, op);
  const VarState& vs = vars_.at(request.variable);
  const int64_t evicted = vs.dynamic ? vs.dynamic->evictions() : 0;
  Header h = ps_wire::ReadHeader(m.frames[0].data());
  h.resets = static_cast<uint16_t>(static_cast<uint64_t>(vs.resets + evicted) & 0xFFFF);
  ps_wire::WriteHeader(h, m.frames[0].data());
  return m;
}

void ShardCore::Error(const std::string& identity, const Header& request, ErrorCode code,
                      const std::string& text, std::vector<OutMessage>* out) {
  ++stats_.errors;
  ++errors_by_code_[std::min<size_t>(static_cast<size_t>(code), errors_by_code_.size() - 1)];
  Header h = request;
  h.flags &= ps_wire::kKnownFlags;  // an error reply carries no values
  OutMessage m = Reply(identity, h, Op::kError);
  Header rh = ps_wire::ReadHeader(m.frames[0].data());
  rh.flags = ps_wire::kFlagReply;
  rh.error_code = static_cast<uint16_t>(code);
  ps_wire::WriteHeader(rh, m.frames[0].data());
  m.frames[1] = text;
  out->push_back(std::move(m));
}

void ShardCore::Handle(const std::string& identity, const void* const* frames, const size_t* sizes,
                       size_t num_frames, std::vector<OutMessage>* out) {
  const size_t first = out->size();
  HandleMessage(identity, frames, sizes, num_frames, out);
  if (!batch_parts_.empty()) CollectBatchReplies(first, out);
}

bool ShardCore::CheckFencing(const std::string& identity, const Header& h,
                             std::vector<OutMessage>* out) {
  if (options_.attempt != 0 && h.attempt != 0 && h.attempt != options_.attempt) {
    Error(identity, h, ErrorCode::kStaleAttempt,
          "request from attempt " + std::to_string(h.attempt) + ", this shard serves attempt " +
              std::to_string(options_.attempt),
          out);
    return false;
  }
  if (options_.generation != 0 && h.generation != 0 && h.generation != options_.generation) {
    Error(identity, h, ErrorCode::kStaleGeneration,
          "request for generation " + std::to_string(h.generation) + " of PS shard " +
              std::to_string(options_.shard) + ", this process serves generation " +
              std::to_string(options_.generation) +
              " (the shard was started again: resolve its endpoint anew)",
          out);
    return false;
  }
  return true;
}

void ShardCore::HandleMessage(const std::string& identity, const void* const* frames,
                              const size_t* sizes, size_t num_frames,
                              std::vector<OutMessage>* out) {
  if (IsBatch(frames, sizes, num_frames)) {
    ++stats_.requests;
    ++stats_.batches;
    HandleBatch(identity, frames, sizes, num_frames, out);
    return;
  }
  MessageView m;
  WireError e = ParseMessage(frames, sizes, num_frames, options_.limits, /*expect_reply=*/false, &m);
  if (!e.ok()) {
    Header h;
    if (num_frames >= 1 && sizes[0] == ps_wire::kHeaderSize) h = ps_wire::ReadHeader(frames[0]);
    Error(identity, h, e.code, e.text, out);
    return;
  }
  const Header& h = m.header;
  if (!CheckFencing(identity, h, out)) return;
  const Op op = static_cast<Op>(h.op);
  if (op == Op::kPull || op == Op::kPush || op == Op::kPushPull || op == Op::kWrite) {
    ++stats_.requests;
    HandleData(identity, m, out);
  } else {
    HandleControl(identity, m, out);
  }
}

void ShardCore::HandleData(const std::string& identity, const MessageView& m,
                           std::vector<OutMessage>* out) {
  DataRequest r;
  if (!CheckData(identity, m, &r, out) || !ReadGradients(identity, m, &r, out)) return;
  const Op op = static_cast<Op>(m.header.op);
  if (op != Op::kPush && op != Op::kWrite && held_.size() >= options_.max_held) {
    Error(identity, m.header, ErrorCode::kBadClock,
          std::to_string(held_.size()) + " requests already wait for their step; refusing more", out);
    return;
  }
  if (IsPushOp(m.header.op) && schedule_.At(m.header.clock).consistency == Consistency::kSync) {
    if (std::string why = SyncPushRefusal(m.header, *r.ps, r.spec->name); !why.empty()) {
      Error(identity, m.header, ErrorCode::kBadClock, why, out);
      return;
    }
  }
  ApplyData(identity, m.header, &r, out);
}

void ShardCore::ApplyData(const std::string& identity, const Header& h, DataRequest* rp,
                          std::vector<OutMessage>* out) {
  DataRequest& r = *rp;
  max_clock_seen_ = std::max(max_clock_seen_, h.clock);
  const Op op = static_cast<Op>(h.op);
  if (op == Op::kWrite) {
    WriteRows(*r.vs, r.ids, r.gp, h.flags & ps_wire::kFlagRowState);
    ++r.vs->resets;
    out->push_back(DataReply(identity, h, Op::kWrite));
    return;
  }
  if (op == Op::kPull) {
    ++stats_.pulls;
    if (PullReady(h)) {
      AnswerPull(identity, h, r.ids, r.shm_reply, out, r.held_versions);
    } else {
      ++stats_.held;
      held_.push_back(Held{identity, h, std::move(r.ids), r.shm_reply, std::move(r.held_versions)});
    }
    return;
  }
  op == Op::kPush ? ++stats_.pushes : ++stats_.push_pulls;
  stats_.rows_pushed += static_cast<int64_t>(r.ids.size());
  const bool sync = schedule_.At(h.clock).consistency == Consistency::kSync;
  CountPeriodPush(h, sync);
  if (sync) {
    PushSync(identity, h, &r, out);
  } else {
    PushAsync(identity, h, &r, out);
  }
}

// An ERROR reply (already counted by Error()) made the refusal of a whole
// batch: the envelope's header, the text saying which part; nothing of the
// batch was applied.
OutMessage ShardCore::AsBatchError(OutMessage m, const Header& env, const std::string& where) {
  const Header eh = ps_wire::ReadHeader(m.frames[0].data());
  Header h = env;
  h.version = ps_wire::kBatchVersion;
  h.op = static_cast<uint8_t>(Op::kError);
  h.flags = ps_wire::kFlagReply;
  h.error_code = eh.error_code;
  h.count = 0;
  h.dim = 0;
  h.clock = eh.clock;
  h.version_seen = 0;
  ps_wire::WriteHeader(h, m.frames[0].data());
  if (!where.empty()) m.frames[1] = where + m.frames[1] + "; nothing in the batch was applied";
  m.values = ValueFrame();
  return m;
}

void ShardCore::HandleBatch(const std::string& identity, const void* const* frames,
                            const size_t* sizes, size_t num_frames, std::vector<OutMessage>* out) {
  Header env;
  std::vector<OutMessage> refused;
  auto refuse = [&](ErrorCode code, const std::string& text, const std::string& where) {
    Error(identity, env, code, text, &refused);
    out->push_back(AsBatchError(std::move(refused.back()), env, where));
  };
  std::vector<BatchPart> parts;
  if (WireError e = ParseBatch(frames, sizes, num_frames, options_.limits, /*expect_reply=*/false,
                               &env, &parts);
      !e.ok()) {
    refuse(e.code, e.text, "");
    return;
  }
  if (!CheckFencing(identity, env, &refused)) {
    out->push_back(AsBatchError(std::move(refused.back()), env, ""));
    return;
  }
  const size_t n = env.count;
  std::vector<MessageView> views(n);
  std::vector<DataRequest> reqs(n);
  BatchSeen seen;
  for (size_t k = 0; k < n; ++k) {
    if (!CheckBatchPart(identity, env, parts[k], &seen, &views[k], &reqs[k], &refused)) {
      const Header& h = views[k].header;
      const std::string where = "batch part " + std::to_string(k) + " of " + std::to_string(n) +
                                " (" + OpName(h.op) + " of variable " +
                                std::to_string(h.variable) + " partition " +
                                std::to_string(h.partition) + "): ";
      out->push_back(AsBatchError(std::move(refused.back()), env, where));
      return;
    }
  }
  if (held_.size() + seen.pulls > options_.max_held) {
    refuse(ErrorCode::kBadClock,
           std::to_string(held_.size()) + " requests already wait for their step; refusing " +
               std::to_string(seen.pulls) + " more",
           "batch: ");
    return;
  }
  // Every part is sound: register the batch, then apply the parts in order.
  // Their replies (now, or when a held pull is answered) are gathered by
  // CollectBatchReplies.
  const uint64_t serial = ++batch_serial_;
  PendingBatch& b = batches_[serial];
  b.identity = identity;
  b.header = env;
  b.replies.resize(n);
  b.missing = n;
  for (size_t k = 0; k < n; ++k) {
    const Header& h = views[k].header;
    batch_parts_[{identity, h.request_id, h.variable, h.partition}] = {serial, k};
  }
  for (size_t k = 0; k < n; ++k) ApplyData(identity, views[k].header, &reqs[k], out);
}

bool ShardCore::CheckBatchPart(const std::string& identity, const Header& env,
                               const BatchPart& part, BatchSeen* seen, MessageView* m,
                               DataRequest* r, std::vector<OutMessage>* refused) {
  WireError e = ParseMessage(part.frames, part.sizes, 3, options_.limits, /*expect_reply=*/false, m);
  if (!e.ok()) {
    Error(identity, m->header, e.code, e.text, refused);
    return false;
  }
  const Op op = static_cast<Op>(m->header.op);
  if (op != Op::kPull && op != Op::kPush && op != Op::kPushPull && op != Op::kWrite) {
    Error(identity, m->header, ErrorCode::kUnknownOp,
          "a batch carries PULL, PUSH, PUSH_PULL and WRITE only", refused);
    return false;
  }
  // The envelope fences the whole batch.
  m->header.attempt = env.attempt;
  m->header.generation = env.generation;
  const Header& h = m->header;
  if (!seen->keys.insert({h.request_id, h.variable, h.partition}).second ||
      batch_parts_.count({identity, h.request_id, h.variable, h.partition})) {
    Error(identity, h, ErrorCode::kBadPartition,
          "request " + std::to_string(h.request_id) +
              " names this partition twice (in this batch, or in one still waiting)",
          refused);
    return false;
  }
  if (!CheckData(identity, *m, r, refused) || !ReadGradients(identity, *m, r, refused)) return false;
  if (op == Op::kPull || op == Op::kPushPull) ++seen->pulls;
  if (IsPushOp(h.op) && schedule_.At(h.clock).consistency == Consistency::kSync) {
    std::string why = SyncPushRefusal(h, *r->ps, r->spec->name);
    if (why.empty() && !seen->sync_pushes.insert({h.variable, h.partition, h.clock}).second) {
      why = "worker " + std::to_string(h.worker) + " pushes step " + std::to_string(h.clock) +
            " to partition " + std::to_string(h.partition) + " twice";
    }
    if (!why.empty()) {
      Error(identity, h, ErrorCode::kBadClock, why, refused);
      return false;
    }
  }
  return true;
}

void ShardCore::CollectBatchReplies(size_t first, std::vector<OutMessage>* out) {
  std::vector<OutMessage> done;
  size_t kept = first;
  for (size_t i = first; i < out->size(); ++i) {
    OutMessage& m = (*out)[i];
    bool taken = false;
    if (!m.part_headers && m.frames[0].size() == ps_wire::kHeaderSize) {
      const Header h = ps_wire::ReadHeader(m.frames[0].data());
      auto it = batch_parts_.find({m.identity, h.request_id, h.variable, h.partition});
      if (h.version == ps_wire::kVersion && it != batch_parts_.end()) {
        auto [serial, k] = it->second;
        batch_parts_.erase(it);
        PendingBatch& b = batches_.at(serial);
        b.replies[k] = std::move(m);
        taken = true;
        if (--b.missing == 0) {
          done.push_back(BatchReply(b));
          batches_.erase(serial);
        }
      }
    }
    if (!taken) {
      if (kept != i) (*out)[kept] = std::move(m);
      ++kept;
    }
  }
  out->resize(kept);
  for (auto& m : done) out->push_back(std::move(m));
}

// The three frames of a batch's reply: the envelope and every part's
// header; the parts' texts (an ERROR part's count is its text's length);
// the parts' rows.
OutMessage ShardCore::BatchReply(PendingBatch& b) {
  OutMessage reply;
  reply.identity = std::move(b.identity);
  Header env = b.header;
  env.flags = ps_wire::kFlagReply;
  reply.frames[0].resize(ps_wire::kHeaderSize);
  ps_wire::WriteHeader(env, reply.frames[0].data());
  reply.part_headers.emplace(ps_wire::kHeaderSize * b.replies.size(), '\0');
  size_t value_bytes = 0;
  for (const OutMessage& part : b.replies) value_bytes += part.values.size();
  reply.values = ValueFrame(value_bytes);
  size_t at = 0;
  for (size_t k = 0; k < b.replies.size(); ++k) {
    OutMessage& part = b.replies[k];
    Header h = ps_wire::ReadHeader(part.frames[0].data());
    if (h.op == static_cast<uint8_t>(Op::kError)) h.count = static_cast<uint32_t>(part.frames[1].size());
    ps_wire::WriteHeader(h, reply.part_headers->data() + ps_wire::kHeaderSize * k);
    reply.frames[1] += part.frames[1];
    if (!part.values.empty()) std::memcpy(reply.values.data() + at, part.values.data(), part.values.size());
    at += part.values.size();
  }
  return reply;
}

bool ShardCore::CheckData(const std::string& identity, const MessageView& m, DataRequest* r,
                          std::vector<OutMessage>* out) {
  const Header& h = m.header;
  const PsPlan& plan = options_.plan;
  const VariableSpec* spec = plan.FindVariable(h.variable);
  if (spec == nullptr) {
    Error(identity, h, ErrorCode::kUnknownVariable,
          "variable " + std::to_string(h.variable) + " is not in the plan", out);
    return false;
  }
  if (h.partition >= spec->partitions) {
    Error(identity, h, ErrorCode::kBadPartition,
          "partition " + std::to_string(h.partition) + " of variable \"" + spec->name +
              "\" is out of range (it has " + std::to_string(spec->partitions) + ")",
          out);
    return false;
  }
  auto vit = vars_.find(h.variable);
  if (vit == vars_.end() || !vit->second.parts[h.partition].owned) {
    Error(identity, h, ErrorCode::kBadPartition,
          "partition " + std::to_string(h.partition) + " of variable \"" + spec->name +
              "\" belongs to shard " + std::to_string(ShardOf(*spec, h.partition)) +
              ", not to shard " + std::to_string(options_.shard),
          out);
    return false;
  }
  const bool row_state = h.flags & ps_wire::kFlagRowState;
  if (row_state && spec->dynamic.has_value()) {
    Error(identity, h, ErrorCode::kBadFlags,
          "ROW_STATE of dynamic table \"" + spec->name +
              "\": only a table of fixed rows hands its rows' state over",
          out);
    return false;
  }
  if (const uint32_t width = row_state ? RowStateWidth(*spec) : spec->dim; h.count > 0 && h.dim != width) {
    Error(identity, h, ErrorCode::kBadDim,
          "dim " + std::to_string(h.dim) + " but variable \"" + spec->name + "\" has " +
              (row_state ? "a row state of width " : "dim ") + std::to_string(width) +
              (row_state ? " (weights, " + std::to_string(optim::StateSlots(spec->optimizer.type)) +
                               " optimizer slots, step)"
                         : ""),
          out);
    return false;
  }
  if (IsPushOp(h.op) && schedule_.At(h.clock).consistency != Consistency::kAsync &&
      h.worker >= plan.contributors()) {
    Error(identity, h, ErrorCode::kBadWorker,
          "worker " + std::to_string(h.worker) + " but the plan expects " +
              std::to_string(plan.contributors()) + " contributors",
          out);
    return false;
  }
  r->spec = spec;
  r->vs = &vit->second;
  r->ps = &vit->second.parts[h.partition];
  r->ids.resize(h.count);
  if (h.count > 0) std::memcpy(r->ids.data(), m.ids, r->ids.size() * sizeof(int64_t));
  const Partitioner partition_of(*spec);
  const bool dynamic = spec->dynamic.has_value();
  for (size_t i = 0; i < r->ids.size(); ++i) {
    const int64_t id = r->ids[i];
    if ((!dynamic && (id < 0 || id >= spec->rows)) || partition_of(id) != h.partition) {
      Error(identity, h, ErrorCode::kIdOutOfRange,
            "id " + std::to_string(id) + " at position " + std::to_string(i) +
                " is not in partition " + std::to_string(h.partition) + " of variable \"" +
                spec->name + "\"" +
                (dynamic ? " (a dynamic table: ids go to partitions by a hash of their bits)"
                         : " (rows 0.." + std::to_string(spec->rows - 1) + ")"),
            out);
      return false;
    }
  }
  if (dynamic && static_cast<Op>(h.op) == Op::kWrite) {
    Error(identity, h, ErrorCode::kBadFlags,
          "WRITE of dynamic table \"" + spec->name +
              "\": its rows start from the initializer when their id is admitted",
          out);
    return false;
  }
  if (!vit->second.dynamic_full.empty()) {
    Error(identity, h, ErrorCode::kTableFull, vit->second.dynamic_full, out);
    return false;
  }
  return true;
}

bool ShardCore::ReadGradients(const std::string& identity, const MessageView& m, DataRequest* r,
                              std::vector<OutMessage>* out) {
  const Header& h = m.header;
  const PsPlan& plan = options_.plan;
  const bool row_state = h.flags & ps_wire::kFlagRowState;
  const uint32_t dim = row_state ? RowStateWidth(*r->spec) : r->spec->dim;
  const bool writes = static_cast<Op>(h.op) == Op::kWrite;
  const bool pushes = IsPushOp(h.op) || writes;  // values to read
  // With kFlagShm the gradients are read from, and the rows written to, the
  // region this connection attached; both ranges are checked first.
  const char* values = m.values;
  if (m.shm()) {
    const uint64_t value_bytes = uint64_t{h.count} * dim * ValueBytes(h.flags);
    if (pushes && (values = ShmSpan(identity, h, m.shm_ref.values, value_bytes, "gradients",
                                    out)) == nullptr) {
      return false;
    }
    if (static_cast<Op>(h.op) != Op::kPush && !writes) {
      r->shm_reply = m.shm_ref.reply;
      r->shm_rows = ShmSpan(identity, h, r->shm_reply, value_bytes, "rows", out);
      if (r->shm_rows == nullptr) return false;
    }
  }
  if (h.flags & ps_wire::kFlagRowVersions) {  // a PULL (ParseMessage): frame 2 holds the versions held
    r->held_versions.resize(h.count);
    if (h.count > 0) std::memcpy(r->held_versions.data(), values, size_t{h.count} * sizeof(uint32_t));
  }
  if (!pushes) return true;
  // Gradients are read in place when they are float32 and aligned (the
  // common case); copied when fp16, misaligned, kept for a sync step, or
  // compacted because non-finite rows are dropped.
  const size_t n = size_t{h.count} * dim;
  const bool in_place = !m.fp16() && schedule_.At(h.clock).consistency != Consistency::kSync &&
                        reinterpret_cast<uintptr_t>(values) % alignof(float) == 0;
  if (in_place) {
    r->gp = reinterpret_cast<const float*>(values);
  } else {
    r->grads.resize(n);
    DecodeValues(values, n, m.fp16(), r->grads.data());
    r->gp = r->grads.data();
  }
  if (!AnyNonFinite(r->gp, n)) return !row_state || CheckRowStates(identity, h, *r, out);
  // rows are looked at one by one only then
  size_t bad_rows = 0;
  for (size_t i = 0; i < r->ids.size(); ++i) {
    if (!AnyNonFinite(r->gp + i * dim, dim)) continue;
    if (plan.reject_nonfinite || writes) {
      Error(identity, h, ErrorCode::kNonFinite,
            std::string(writes ? "value" : "gradient") + " of id " + std::to_string(r->ids[i]) +
                " of variable \"" + r->spec->name + "\" is NaN or Inf; nothing was applied",
            out);
      return false;
    }
    ++bad_rows;
  }
  // A PUSH_PULL still answers every row it asked for.
  if (static_cast<Op>(h.op) == Op::kPushPull) r->pull_ids = r->ids;
  if (r->grads.empty()) r->grads.assign(r->gp, r->gp + n);
  size_t kept = 0;
  for (size_t i = 0; i < r->ids.size(); ++i) {
    const float* g = &r->grads[i * dim];
    if (AnyNonFinite(g, dim)) continue;
    if (kept != i) {
      r->ids[kept] = r->ids[i];
      std::memmove(&r->grads[kept * dim], g, dim * sizeof(float));
    }
    ++kept;
  }
  stats_.nonfinite_rows += static_cast<int64_t>(bad_rows);
  r->ids.resize(kept);
  r->grads.resize(kept * dim);
  r->gp = r->grads.data();
  return true;
}

// WRITE: the rows' weights become the given values (their optimizer state
// stays as the initializer left it: a new row's, or what training made it);
// with ROW_STATE the rows' whole state does.
void ShardCore::WriteRows(VarState& vs, const std::vector<int64_t>& ids, const float* values,
                          bool row_state) {
  VariableTable& table = *vs.table;
  const uint32_t dim = table.dim();
  const size_t width = row_state ? RowStateWidth(table.spec()) : dim;
  std::vector<uint32_t> idx(ids.size());
  table.TouchAll(ids.data(), ids.size(), idx.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* row = values + i * width;
    if (row_state) {
      table.UnpackState(row, idx[i]);
    } else {
      std::memcpy(table.weights(idx[i]), row, dim * sizeof(float));
    }
  }
}

bool ShardCore::CheckRowStates(const std::string& identity, const Header& h, const DataRequest& r,
                               std::vector<OutMessage>* out) {
  const size_t width = RowStateWidth(*r.spec);
  for (size_t i = 0; i < r.ids.size(); ++i) {
    if (std::string why = CheckRowState(*r.spec, r.gp + i * width); !why.empty()) {
      Error(identity, h, ErrorCode::kBadRowState,
            "the state of id " + std::to_string(r.ids[i]) + " of variable \"" + r.spec->name +
                "\" cannot be a row's: " + why + "; nothing was written",
            out);
      return false;
    }
  }
  return true;
}

// async and ssp: apply now; a PUSH_PULL answers the next step's rows when
// they are ready, else waits with the held requests.
void ShardCore::PushAsync(const std::string& identity, const Header& h, DataRequest* r,
                          std::vector<OutMessage>* out) {
  // Every push advances its worker's clock (ssp reads it, and so does the
  // first step after a switch to sync or ssp).
  if (h.worker < worker_clock_.size())
    worker_clock_[h.worker] = std::max(worker_clock_[h.worker], h.clock + 1);
  Header pull = h;
  pull.clock = h.clock + 1;  // PUSH_PULL: rows for the next step
  // False after a TABLE_FULL reply: a dynamic table could not hold the rows.
  auto apply = [&](char* rows_out) {
    if (ApplyAsync(*r->vs, *r->ps, h, r->ids, r->gp, rows_out)) return true;
    Error(identity, h, ErrorCode::kTableFull, r->vs->dynamic_full, out);
    return false;
  };
  if (static_cast<Op>(h.op) == Op::kPush) {
    if (!apply(nullptr)) return;
    out->push_back(DataReply(identity, h, Op::kPush));
  } else if (PullReady(pull) && !r->pull_ids.empty()) {
    if (!apply(nullptr)) return;
    AnswerPull(identity, pull, r->pull_ids, r->shm_reply, out);
  } else if (PullReady(pull)) {
    // The rows are written into the reply (or the region) as they are
    // updated: one pass over them instead of two.
    const size_t n = r->ids.size();
    ValueFrame rows(r->shm_rows != nullptr ? 0 : n * r->spec->dim * ValueBytes(h.flags));
    if (!apply(r->shm_rows != nullptr ? r->shm_rows : rows.data())) return;
    stats_.rows_pulled += static_cast<int64_t>(n);
    out->push_back(PullReply(identity, pull, n, std::move(rows)));
  } else {
    if (!apply(nullptr)) return;
    ++stats_.held;
    held_.push_back(Held{identity, pull, r->pull_ids.empty() ? std::move(r->ids) : std::move(r->pull_ids),
                         r->shm_reply, {}});
  }
  ReleaseHeld(out);
}

// sync: buffer the contribution until every contributor sent step h.clock.
void ShardCore::PushSync(const std::string& identity, const Header& h, DataRequest* r,
                         std::vector<OutMessage>* out) {
  PartitionState& ps = *r->ps;
  // The first sync step of a period after async or ssp ones: the steps
  // before it were applied on arrival, so this partition's sync steps start
  // there (SyncPushRefusal checked the push against that).
  ps.applied = std::max(ps.applied, schedule_.PeriodStart(h.clock));
  auto& step = ps.pending[h.clock];
  step.resize(options_.plan.contributors());
  Contribution& c = step[h.worker];
  c.present = true;  // not before: HandleData and HandleBatch refuse a repeat (SyncPushRefusal)
  c.ids = std::move(r->ids);
  c.grads = std::move(r->grads);
  if (static_cast<Op>(h.op) == Op::kPush) {
    out->push_back(DataReply(identity, h, Op::kPush));
  } else {
    Header pull = h;
    pull.clock = h.clock + 1;
    ++stats_.held;
    held_.push_back(
        Held{identity, pull, r->pull_ids.empty() ? c.ids : std::move(r->pull_ids), r->shm_reply, {}});
  }
  if (TryApplySync(*r->vs, ps)) TrySave(out);
  ReleaseHeld(out);
}

std::string ShardCore::SyncPushRefusal(const Header& h, const PartitionState& ps,
                                       const std::string& name) const {
  const int64_t applied = std::max(ps.applied, schedule_.PeriodStart(h.clock));
  if (h.clock < applied) {
    return "push for step " + std::to_string(h.clock) + " but partition " +
           std::to_string(h.partition) + " of \"" + name + "\" already applied step " +
           std::to_string(applied - 1);
  }
  if (h.clock >= applied + options_.max_steps_ahead) {
    return "push for step " + std::to_string(h.clock) + " is more than " +
           std::to_string(options_.max_steps_ahead) + " steps ahead of step " +
           std::to_string(applied);
  }
  auto it = ps.pending.find(h.clock);
  if (it != ps.pending.end() && h.worker < it->second.size() && it->second[h.worker].present) {
    return "worker " + std::to_string(h.worker) + " already pushed step " +
           std::to_string(h.clock) + " to partition " + std::to_string(h.partition);
  }
  return "";
}

OutMessage ShardCore::PullReply(const std::string& identity, const Header& h, size_t n,
                                ValueFrame values) {
  const VarState& vs = vars_.at(h.variable);
  OutMessage m = DataReply(identity, h, static_cast<Op>(h.op));
  Header rh = ps_wire::ReadHeader(m.frames[0].data());
  rh.count = static_cast<uint32_t>(n);
  rh.dim = h.flags & ps_wire::kFlagRowState ? RowStateWidth(*vs.spec) : vs.dim;
  rh.version_seen = vs.parts[h.partition].version;
  ps_wire::WriteHeader(rh, m.frames[0].data());
  m.values = std::move(values);
  return m;
}

void ShardCore::AnswerPull(const std::string& identity, const Header& h,
                           const std::vector<int64_t>& ids, uint64_t shm_reply,
                           std::vector<OutMessage>* out, const std::vector<uint32_t>& held) {
  VarState& vs = vars_.at(h.variable);
  if (h.flags & ps_wire::kFlagRowVersions) {
    AnswerVersionedPull(identity, h, ids, held, out);
    return;
  }
  const uint32_t dim = vs.dim;
  const bool fp16 = h.flags & ps_wire::kFlagFp16;
  const bool row_state = h.flags & ps_wire::kFlagRowState;  // a table of fixed rows (CheckData)
  const size_t row_bytes = size_t{row_state ? RowStateWidth(*vs.spec) : dim} * ValueBytes(h.flags);
  // A held request's region may have been replaced since: check again.
  char* dst = nullptr;
  ValueFrame values;
  if (h.flags & ps_wire::kFlagShm) {
    if ((dst = ShmSpan(identity, h, shm_reply, ids.size() * row_bytes, "rows", out)) == nullptr) return;
  } else {
    values = ValueFrame(ids.size() * row_bytes);
    dst = values.data();
  }
  if (vs.dynamic) {
    ReadDynamic(vs, ids, fp16, dst);
  } else {
    VariableTable& table = *vs.table;
    std::vector<uint32_t> idx(ids.size());
    table.TouchAll(ids.data(), ids.size(), idx.data());
    constexpr size_t kAhead = 4;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + kAhead < ids.size()) table.PrefetchRow(idx[i + kAhead]);
      if (row_state) {
        table.PackState(idx[i], reinterpret_cast<float*>(dst + i * row_bytes));
      } else {
        EncodeValues(table.weights(idx[i]), dim, fp16, dst + i * row_bytes);
      }
    }
  }
  stats_.rows_pulled += static_cast<int64_t>(ids.size());
  out->push_back(PullReply(identity, h, ids.size(), std::move(values)));
}

void ShardCore::AnswerVersionedPull(const std::string& identity, const Header& h,
                                    const std::vector<int64_t>& ids,
                                    const std::vector<uint32_t>& held,
                                    std::vector<OutMessage>* out) {
  VarState& vs = vars_.at(h.variable);
  const uint32_t dim = vs.dim;
  const bool fp16 = h.flags & ps_wire::kFlagFp16;
  const size_t row_bytes = size_t{dim} * ValueBytes(h.flags);
  const uint64_t bound = static_cast<uint64_t>(h.version_seen);
  // Each id's version now, and where its weights are: a fixed table's row,
  // or a dynamic table's read (every id read, as a plain pull reads it: a
  // row becomes the step's, an id not a row reads the initializer's values).
  std::vector<uint32_t> now(ids.size());
  std::vector<const float*> weights(ids.size());
  std::vector<float> read;
  if (vs.dynamic) {
    DynamicTable& table = *vs.dynamic;
    table.EnableVersions();
    const uint64_t* keys = reinterpret_cast<const uint64_t*>(ids.data());
    std::vector<int64_t> slots(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      slots[i] = table.Find(keys[i]);
      now[i] = table.version(slots[i]);
    }
    read.resize(ids.size() * dim);
    table.ReadSlots(keys, slots.data(), ids.size(), read.data());
    for (size_t i = 0; i < ids.size(); ++i) weights[i] = read.data() + i * dim;
  } else {
    VariableTable& table = *vs.table;
    table.EnableVersions();
    std::vector<uint32_t> idx(ids.size());
    table.TouchAll(ids.data(), ids.size(), idx.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      now[i] = table.version(idx[i]);
      weights[i] = table.weights(idx[i]);
    }
  }
  std::string versions(ids.size() * sizeof(uint32_t), '\0');
  std::vector<uint32_t> send;  // positions whose rows go
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t v = VersionAnswer(now[i], held[i], bound);
    std::memcpy(versions.data() + i * sizeof v, &v, sizeof v);
    if (v != ps_wire::kRowFresh) send.push_back(static_cast<uint32_t>(i));
  }
  ValueFrame values(send.size() * row_bytes);
  for (size_t k = 0; k < send.size(); ++k)
    EncodeValues(weights[send[k]], dim, fp16, values.data() + k * row_bytes);
  stats_.rows_pulled += static_cast<int64_t>(send.size());
  stats_.rows_fresh += static_cast<int64_t>(ids.size() - send.size());
  OutMessage m = PullReply(identity, h, ids.size(), std::move(values));
  Header rh = ps_wire::ReadHeader(m.frames[0].data());
  rh.worker = static_cast<uint32_t>(send.size());
  ps_wire::WriteHeader(rh, m.frames[0].data());
  m.frames[1] = std::move(versions);
  out->push_back(std::move(m));
}

bool ShardCore::ApplyAsync(VarState& vs, PartitionState& ps, const Header& h,
                           const std::vector<int64_t>& ids, const float* grads, char* rows_out) {
  const int64_t tau = std::max<int64_t>(0, ps.version - h.version_seen);
  ++stats_.staleness[StalenessBucket(tau)];
  stats_.staleness_sum += tau;
  const float scale = (options_.plan.staleness_lr ? 1.0f / static_cast<float>(std::max<int64_t>(1, tau)) : 1.0f) *
                      LrScale(vs, ps_wire::kMaxClock);
  if (vs.dynamic) {
    // The step in progress of an async or ssp table is the newest step any
    // push named: rows a push touches are never evicted under it.
    if (!PushDynamic(vs, h.clock, ids, grads, scale, rows_out, h.flags & ps_wire::kFlagFp16).ok())
      return false;
    ++ps.version;
    NoteUpdateApplied();
    return true;
  }
  VariableTable& table = *vs.table;
  const uint32_t dim = table.dim();
  const bool fp16 = h.flags & ps_wire::kFlagFp16;
  const size_t row_bytes = size_t{dim} * ValueBytes(h.flags);
  std::vector<uint32_t> idx(ids.size());
  bool distinct = true;
  table.TouchAll(ids.data(), ids.size(), idx.data(), rows_out != nullptr ? &distinct : nullptr);
  // A repeated id must read as after its last update: copy in a second pass.
  const bool copy_while_applying = rows_out != nullptr && distinct;
  constexpr size_t kAhead = 4;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kAhead < ids.size()) table.PrefetchRow(idx[i + kAhead]);
    table.Apply(idx[i], grads + i * dim, scale);
    if (copy_while_applying) EncodeValues(table.weights(idx[i]), dim, fp16, rows_out + i * row_bytes);
  }
  if (rows_out != nullptr && !copy_while_applying) {
    for (size_t i = 0; i < ids.size(); ++i)
      EncodeValues(table.weights(idx[i]), dim, fp16, rows_out + i * row_bytes);
  }
  ++ps.version;
  NoteUpdateApplied();
  return true;
}

void ShardCore::ReadDynamic(VarState& vs, const std::vector<int64_t>& ids, bool fp16, char* dst,
                            const int64_t* slots) {
  DynamicTable& table = *vs.dynamic;
  const uint64_t* keys = reinterpret_cast<const uint64_t*>(ids.data());  // the same 64 bits
  auto read = [&](float* out) {
    if (slots != nullptr) {
      table.ReadSlots(keys, slots, ids.size(), out);
    } else {
      table.ReadAll(keys, ids.size(), out);
    }
  };
  if (!fp16 && reinterpret_cast<uintptr_t>(dst) % alignof(float) == 0) {
    // float32 rows are the wire's values: read them in place.
    read(reinterpret_cast<float*>(dst));
    return;
  }
  const uint32_t dim = vs.dim;
  std::vector<float> rows(ids.size() * dim);
  read(rows.data());
  const size_t row_bytes = size_t{dim} * (fp16 ? 2 : 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    EncodeValues(rows.data() + i * dim, dim, fp16, dst + i * row_bytes);
  }
}

bool ShardCore::AdmitDynamic(VarState& vs, int64_t step, const std::vector<int64_t>& ids,
                             std::vector<int64_t>* slots, bool* distinct,
                             DynamicTable::Spare spare) {
  slots->resize(ids.size());
  Status st = vs.dynamic->AdmitAll(reinterpret_cast<const uint64_t*>(ids.data()), ids.size(),
                                   slots->data(), distinct, spare);
  if (st.ok()) return true;
  vs.dynamic_full =
      "shard " + std::to_string(options_.shard) + ", step " + std::to_string(step) + ": " + st.message();
  return false;
}

void ShardCore::ApplyDynamic(VarState& vs, const std::vector<int64_t>& slots, const float* grads,
                             float lr_scale, const int64_t* ids, char* rows_out, bool fp16) {
  DynamicTable& table = *vs.dynamic;
  const size_t dim = vs.dim;
  const size_t row_bytes = dim * (fp16 ? 2 : 4);
  // float32 rows are the wire's values: read in place where aligned.
  const bool in_place = !fp16 && reinterpret_cast<uintptr_t>(rows_out) % alignof(float) == 0;
  std::vector<float> row(rows_out != nullptr && !in_place ? dim : 0);
  constexpr size_t kAhead = 4;  // rows fetched ahead, as the fixed table's loops do
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i + kAhead < slots.size() && slots[i + kAhead] != DynamicTable::kNotARow) {
      table.PrefetchRow(slots[i + kAhead]);
    }
    if (slots[i] == DynamicTable::kNotARow) {
      table.DropGradient();
    } else {
      table.Apply(slots[i], grads + i * dim, lr_scale);
    }
    if (rows_out == nullptr) continue;
    // The row after its update, while it is in the cache (what ReadDynamic
    // with these slots reads after the whole push, when no id repeats).
    const uint64_t key = static_cast<uint64_t>(ids[i]);
    if (in_place) {
      table.ReadSlots(&key, &slots[i], 1, reinterpret_cast<float*>(rows_out + i * row_bytes));
    } else {
      table.ReadSlots(&key, &slots[i], 1, row.data());
      EncodeValues(row.data(), vs.dim, fp16, rows_out + i * row_bytes);
    }
  }
}

Status ShardCore::PushDynamic(VarState& vs, int64_t step, const std::vector<int64_t>& ids,
                              const float* grads, float lr_scale, char* rows_out, bool fp16) {
  DynamicTable& table = *vs.dynamic;
  if (step > table.step()) table.AdvanceTo(step);
  // One contribution: each distinct id counts once (AdmitAll), its
  // gradients summed.
  std::vector<int64_t> slots;
  bool distinct = true;
  // An async or ssp push (PushDynamic's only caller): the rows of other
  // steps may be evicted for it, only its own are spared.
  if (!AdmitDynamic(vs, step, ids, &slots, &distinct, DynamicTable::Spare::kContribution)) {
    return FailedPrecondition(vs.dynamic_full);
  }
  if (distinct) {
    // No id repeats: the gradients as they came, each row read right after
    // its update.
    ApplyDynamic(vs, slots, grads, lr_scale, ids.data(), rows_out, fp16);
    return Status::Ok();
  }
  table.ApplyRepeated(reinterpret_cast<const uint64_t*>(ids.data()), slots.data(), ids.size(),
                      grads, lr_scale);
  // The rows after the whole push (a repeated id's after its last
  // gradient), from the slots just found: nothing was admitted or evicted
  // since.
  if (rows_out != nullptr) ReadDynamic(vs, ids, fp16, rows_out, slots.data());
  return Status::Ok();
}

bool ShardCore::ApplySyncDynamic(VarState& vs, int64_t step,
                                 const std::vector<Contribution>& contribs, float lr_scale) {
  DynamicTable& table = *vs.dynamic;
  if (step > table.step()) table.AdvanceTo(step);
  std::vector<int64_t> slots;
  for (const Contribution& c : contribs) {
    if (!AdmitDynamic(vs, step, c.ids, &slots)) return false;  // each distinct id once
  }
  // The step's rows after every contribution's admission: the sums of the
  // ids that are rows apply, the others are dropped.
  const std::vector<int64_t>& ids = sync_scratch_.slot_ids;
  slots.resize(ids.size());
  for (size_t s = 0; s < ids.size(); ++s) slots[s] = table.Find(static_cast<uint64_t>(ids[s]));
  ApplyDynamic(vs, slots, sync_scratch_.acc.data(), lr_scale);
  return true;
}

bool ShardCore::TryApplySync(VarState& vs, PartitionState& ps) {
  const PsPlan& plan = options_.plan;
  const uint32_t dim = vs.dim;
  bool any = false;
  while (true) {
    auto it = ps.pending.find(ps.applied);
    if (it == ps.pending.end()) break;
    // A SAVE at step s holds the table at s: step s applies after the save.
    bool gated = false;
    for (const auto& save : pending_saves_) gated |= save.header.clock <= ps.applied;
    if (gated) break;
    const auto& contribs = it->second;
    if (!std::all_of(contribs.begin(), contribs.end(), [](const Contribution& c) { return c.present; }))
      break;
    // Sum in rank order, then apply once per row. Room for every row up
    // front: no rehash, and no growth of `acc` that copies the sums so far.
    std::unordered_map<int64_t, uint32_t>& slot_of = sync_scratch_.slot_of;
    std::vector<int64_t>& slot_ids = sync_scratch_.slot_ids;
    std::vector<float>& acc = sync_scratch_.acc;
    slot_of.clear();
    slot_ids.clear();
    acc.clear();
    // At most every contribution's rows, and (a hint: the partitions are
    // about equal) not many more than the partition has.
    size_t rows = 0;
    for (const Contribution& c : contribs) rows += c.ids.size();
    const size_t parts = std::max<size_t>(vs.parts.size(), 1);
    if (vs.table) rows = std::min(rows, static_cast<size_t>(vs.table->spec().rows) / parts + 1);
    slot_of.reserve(rows);
    slot_ids.reserve(rows);
    acc.reserve(rows * dim);
    for (const Contribution& c : contribs) {
      for (size_t r = 0; r < c.ids.size(); ++r) {
        auto [sit, inserted] = slot_of.try_emplace(c.ids[r], static_cast<uint32_t>(slot_ids.size()));
        if (inserted) {
          slot_ids.push_back(c.ids[r]);
          acc.resize(acc.size() + dim, 0.0f);
        }
        float* a = &acc[size_t{sit->second} * dim];
        const float* g = &c.grads[r * dim];
        for (uint32_t j = 0; j < dim; ++j) a[j] += g[j];
      }
    }
    if (plan.sync_mean) {
      const float n = static_cast<float>(plan.num_workers);
      for (float& a : acc) a /= n;
    }
    const float lr_scale = LrScale(vs, ps.applied);
    if (vs.dynamic) {
      if (!ApplySyncDynamic(vs, ps.applied, contribs, lr_scale)) break;
    } else {
      VariableTable& table = *vs.table;
      for (size_t s = 0; s < slot_ids.size(); ++s) table.Apply(table.Touch(slot_ids[s]), &acc[s * dim], lr_scale);
    }
    ps.pending.erase(it);
    ++ps.applied;
    ++ps.version;
    NoteUpdateApplied();
    ++stats_.sync_steps_applied;
    any = true;
  }
  return any;
}

void ShardCore::ReleaseHeld(std::vector<OutMessage>* out) {
  for (auto it = held_.begin(); it != held_.end();) {
    // A dynamic table that could not hold a step never gets there.
    const std::string& full = vars_.at(it->header.variable).dynamic_full;
    if (!full.empty()) {
      Error(it->identity, it->header, ErrorCode::kTableFull, full, out);
      it = held_.erase(it);
    } else if (PullReady(it->header)) {
      AnswerPull(it->identity, it->header, it->ids, it->shm_reply, out, it->held_versions);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
}

void ShardCore::TrySave(std::vector<OutMessage>* out) {
  while (!pending_saves_.empty()) {
    const PendingSave& save = pending_saves_.front();
    bool ready = true;
    for (auto& [id, vs] : vars_) {
      for (auto& ps : vs.parts) ready &= !ps.owned || SyncApplied(ps, save.header.clock) >= save.header.clock;
    }
    if (!ready) return;
    Status st;
    for (auto& [id, vs] : vars_) {
      for (auto& ps : vs.parts) ps.applied = SyncApplied(ps, save.header.clock);
    }
    for (auto& [id, vs] : vars_) {
      if (vs.dynamic && st.ok()) {
        std::vector<DynamicFilePart> parts;
        for (uint32_t p = 0; p < vs.parts.size(); ++p) {
          if (vs.parts[p].owned)
            parts.push_back(DynamicFilePart{p, 0, vs.parts[p].applied, vs.parts[p].version});
        }
        st = SaveDynamic(save.dir, *vs.spec, options_.shard, options_.plan.num_shards, parts,
                         *vs.dynamic);
      }
      for (uint32_t p = 0; p < vs.parts.size() && st.ok() && vs.table; ++p) {
        if (vs.parts[p].owned)
          st = SavePartition(save.dir, *vs.table, p, vs.parts[p].applied, vs.parts[p].version);
      }
    }
    if (st.ok()) {
      out->push_back(Reply(save.identity, save.header, Op::kSave));
    } else {
      Error(save.identity, save.header, ErrorCode::kCheckpoint, st.message(), out);
    }
    pending_saves_.erase(pending_saves_.begin());
    // The gate is lifted: steps that waited for the save may apply now.
    bool again = false;
    for (auto& [id, vs] : vars_) {
      for (auto& ps : vs.parts) {
        if (ps.owned) again |= TryApplySync(vs, ps);
      }
    }
    (void)again;
  }
}

void ShardCore::HandleControl(const std::string& identity, const MessageView& m,
                              std::vector<OutMessage>* out) {
  const Header& h = m.header;
  switch (static_cast<Op>(h.op)) {
    case Op::kClock:
      ++stats_.clocks;
      if (h.worker >= worker_clock_.size()) {
        Error(identity, h, ErrorCode::kBadWorker,
              "worker " + std::to_string(h.worker) + " but the plan expects " +
                  std::to_string(worker_clock_.size()) + " contributors",
              out);
        return;
      }
      worker_clock_[h.worker] = std::max(worker_clock_[h.worker], h.clock + 1);
      out->push_back(Reply(identity, h, Op::kClock));
      TrySave(out);  // a sync SAVE at the first step after async ones waits for every clock
      ReleaseHeld(out);
      return;
    case Op::kStats: {
      OutMessage r = Reply(identity, h, Op::kStats);
      r.frames[1] = StatsJson();
      out->push_back(std::move(r));
      return;
    }
    case Op::kSave: {
      if (m.text.empty()) {
        Error(identity, h, ErrorCode::kCheckpoint, "SAVE needs a directory", out);
        return;
      }
      const bool sync_save = schedule_.At(h.clock).consistency == Consistency::kSync;
      if (sync_save && h.clock > 0) {
        for (auto& [id, vs] : vars_) {
          for (uint32_t p = 0; p < vs.parts.size(); ++p) {
            if (vs.parts[p].owned && vs.parts[p].applied > h.clock) {
              Error(identity, h, ErrorCode::kBadClock,
                    "SAVE at step " + std::to_string(h.clock) + " but partition " +
                        std::to_string(p) + " of variable " + std::to_string(id) +
                        " already applied step " + std::to_string(vs.parts[p].applied - 1),
                    out);
              return;
            }
          }
        }
      }
      Header at = h;
      if (!sync_save || at.clock <= 0) at.clock = 0;
      pending_saves_.push_back(PendingSave{identity, at, std::string(m.text)});
      TrySave(out);
      ReleaseHeld(out);
      return;
    }
    case Op::kLoad: {
      if (Status st = LoadCheckpoint(std::string(m.text), h.clock); !st.ok()) {
        Error(identity, h, ErrorCode::kCheckpoint, st.message(), out);
        return;
      }
      out->push_back(Reply(identity, h, Op::kLoad));
      ReleaseHeld(out);
      return;
    }
    case Op::kAttach:
      Attach(identity, m, out);
      return;
    case Op::kSet:
      Set(identity, m, out);
      return;
    default:
      Error(identity, h, ErrorCode::kUnknownOp, std::string("op ") + OpName(h.op) + " is not a request", out);
      return;
  }
}

void ShardCore::Attach(const std::string& identity, const MessageView& m, std::vector<OutMessage>* out) {
  const Header& h = m.header;
  if (!regions_.count(identity) && regions_.size() >= options_.max_shm_regions) {
    Error(identity, h, ErrorCode::kSharedMemory,
          std::to_string(regions_.size()) + " connections already attached shared memory; send values inline",
          out);
    return;
  }
  auto region = ShmRegion::Attach(std::string(m.text), options_.max_shm_bytes);
  if (!region.ok()) {
    Error(identity, h, ErrorCode::kSharedMemory, region.status().message() + "; send values inline", out);
    return;
  }
  regions_[identity] = std::move(region).value();
  out->push_back(Reply(identity, h, Op::kAttach));
}

float ShardCore::LrScale(const VarState& vs, int64_t step) {
  auto it = vs.lr_from_step.upper_bound(step);
  if (it == vs.lr_from_step.begin()) return 1.0f;
  return std::prev(it)->second / vs.spec->optimizer.lr;
}

void ShardCore::Set(const std::string& identity, const MessageView& m, std::vector<OutMessage>* out) {
  const Header& h = m.header;
  Setting setting;
  WireError e = ParseSetting(m.text, &setting);
  if (!e.ok()) return Error(identity, h, e.code, e.text, out);
  if (setting.name == "consistency") return SetConsistency(identity, h, setting.value, out);
  if (setting.name != "lr") {
    return Error(identity, h, ErrorCode::kBadSetting,
                 "unknown setting \"" + std::string(setting.name) +
                     "\"; the shard knows: lr, consistency",
                 out);
  }
  const std::string value(setting.value);
  char* end = nullptr;
  const float lr = std::strtof(value.c_str(), &end);
  if (end != value.c_str() + value.size() || !std::isfinite(lr) || lr <= 0) {
    return Error(identity, h, ErrorCode::kBadSetting,
                 "lr \"" + value + "\" is not a finite number > 0; nothing was changed", out);
  }
  if (h.variable != ps_wire::kAllVariables && options_.plan.FindVariable(h.variable) == nullptr) {
    return Error(identity, h, ErrorCode::kUnknownVariable,
                 "variable " + std::to_string(h.variable) + " is not in the plan", out);
  }
  for (auto& [id, vs] : vars_) {
    if (h.variable != ps_wire::kAllVariables && id != h.variable) continue;
    vs.lr_from_step[h.clock] = lr;
    // Entries no partition can use any more go: every owned partition has
    // applied the steps before the newest entry at or below the oldest one.
    int64_t oldest = ps_wire::kMaxClock;
    if (schedule_.At(h.clock).consistency == Consistency::kSync) {
      for (const PartitionState& p : vs.parts) {
        if (p.owned) oldest = std::min(oldest, p.applied);
      }
    }
    auto keep = vs.lr_from_step.upper_bound(oldest);
    if (keep != vs.lr_from_step.begin()) vs.lr_from_step.erase(vs.lr_from_step.begin(), std::prev(keep));
  }
  out->push_back(Reply(identity, h, Op::kSet));
}

char* ShardCore::ShmSpan(const std::string& identity, const Header& h, uint64_t offset, uint64_t bytes,
                         const char* what, std::vector<OutMessage>* out) {
  auto it = regions_.find(identity);
  if (it == regions_.end()) {
    Error(identity, h, ErrorCode::kSharedMemory,
          "a shared-memory request, but this connection attached no region (send ATTACH first, or "
          "the values inline)",
          out);
    return nullptr;
  }
  if (!it->second->Contains(offset, bytes)) {
    Error(identity, h, ErrorCode::kSharedMemory,
          std::string(what) + " at offset " + std::to_string(offset) + " (" + std::to_string(bytes) +
              " bytes) lie outside the attached region of " + std::to_string(it->second->size()) +
              " bytes; nothing was applied",
          out);
    return nullptr;
  }
  return it->second->data() + offset;
}

int64_t ShardCore::rows_held() const {
  int64_t rows = 0;
  for (const auto& [id, vs] : vars_) {
    if (vs.table) rows += static_cast<int64_t>(vs.table->size());
    if (vs.dynamic) rows += vs.dynamic->stats().rows;
  }
  return rows;
}

std::vector<std::pair<std::string, DynamicTableStats>> ShardCore::dynamic_stats() const {
  std::vector<std::pair<std::string, DynamicTableStats>> out;
  for (const auto& [id, vs] : vars_) {
    if (vs.dynamic) out.emplace_back(vs.spec->name, vs.dynamic->stats());
  }
  return out;
}

std::string ShardCore::StatsJson() const {
  nlohmann::json j;
  j["shard"] = options_.shard;
  j["generation"] = options_.generation;
  j["updates_applied"] = UpdatesApplied();
  // A next generation: what its predecessor applied after the checkpoint
  // it loaded (null: unknown).
  if (lost_updates_) {
    j["lost_updates"] = *lost_updates_ >= 0 ? nlohmann::json(*lost_updates_) : nlohmann::json();
  }
  j["requests"] = stats_.requests;
  j["batches"] = stats_.batches;
  j["pulls"] = stats_.pulls;
  j["pushes"] = stats_.pushes;
  j["push_pulls"] = stats_.push_pulls;
  j["clocks"] = stats_.clocks;
  j["rows_pulled"] = stats_.rows_pulled;
  j["rows_fresh"] = stats_.rows_fresh;
  j["rows_pushed"] = stats_.rows_pushed;
  j["errors"] = stats_.errors;
  j["nonfinite_rows"] = stats_.nonfinite_rows;
  j["held"] = stats_.held;
  j["held_now"] = held_.size();
  j["sync_steps_applied"] = stats_.sync_steps_applied;
  j["staleness_histogram"] = stats_.staleness;
  // Pushes by consistency period: how each was applied (sync: buffered for
  // its step; async/ssp: on arrival), so a switch can be seen to hold.
  nlohmann::json periods = nlohmann::json::array();
  for (const auto& [start, p] : periods_) {
    periods.push_back({{"from_step", start},
                       {"mode", FormatConsistencyMode(schedule_.At(start))},
                       {"sync_pushes", p.sync_pushes},
                       {"async_pushes", p.async_pushes}});
  }
  j["consistency_periods"] = periods;
  nlohmann::json errors = nlohmann::json::object();
  for (size_t c = 1; c < errors_by_code_.size(); ++c) {
    if (errors_by_code_[c] > 0) errors[ErrorCodeName(static_cast<ErrorCode>(c))] = errors_by_code_[c];
  }
  j["errors_by_code"] = errors;
  j["rows_held"] = rows_held();
  // Each dynamic table's share on this shard: rows, admission and eviction.
  nlohmann::json dynamic = nlohmann::json::object();
  for (const auto& [name, d] : dynamic_stats()) {
    for (const DynamicCounter& c : kDynamicCounters) dynamic[name][c.name] = d.*c.field;
  }
  if (!dynamic.empty()) j["dynamic_tables"] = dynamic;
  j["shm_regions"] = regions_.size();  // connections whose values go through shared memory
  return j.dump();
}

}  // namespace parallax::ps
