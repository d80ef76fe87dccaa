#include "trainer/sparse_sync.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <sstream>

#include "core/base/logging.h"
#include "core/ps/aggregate.h"
#include "core/ps/curve.h"
#include "core/ps/discovery.h"
#include "core/ps/row_cache.h"
#include "core/ps/row_state.h"
#include "schemas/ps_wire.h"
#include "parallax/session.h"
#include "trainer/sparse_allgather.h"

namespace parallax::trainer {

StatusOr<PsConnection> ConnectPs(CoordinatorClient* coord, const SessionOptions& options,
                                 const plan::JobPlan& plan, Timeline* timeline) {
  const int64_t rdv_ms = options.rendezvous_timeout.count();
  PsConnection out;
  auto endpoints = ps::ResolveShardEndpoints(coord, options.job_id, options.attempt,
                                             plan.ps.num_shards, rdv_ms);
  if (!endpoints.ok()) return endpoints.status().WithContext("finding the PS shards");
  out.endpoints = std::move(endpoints).value();
  ps::PsClientOptions po;
  po.plan = plan.ps;
  po.shard_endpoints = out.endpoints;
  // With local aggregation a host is one contributor (schemas/ps_wire.md).
  po.worker = static_cast<uint32_t>(plan.local_aggregation ? options.host_index : options.rank);
  po.attempt = static_cast<uint32_t>(options.attempt);
  po.on_complete = timeline->PsObserver();
  po.shared_memory = options.config.ps.shared_memory;
  po.shared_memory_bytes = static_cast<size_t>(options.config.ps.shared_memory_mb) << 20;
  if (!options.token.empty() && options.config.ps.curve) {
    // A secured control plane means CURVE on PS sockets (core/ps/curve.h),
    // unless the job says `[ps] curve = false`: publish our key, then learn
    // the shards' keys.
    PX_ASSIGN_OR_RETURN(po.curve_keys, ps::NewCurveKeyPair());
    PX_RETURN_IF_ERROR(ps::PublishClientCurveKey(coord, options.job_id, options.attempt,
                                                 po.curve_keys.public_key,
                                                 "trainer rank " + std::to_string(options.rank))
                           .WithContext("publishing this rank's PS key"));
    PX_ASSIGN_OR_RETURN(po.shard_curve_keys,
                        ps::ResolveShardCurveKeys(coord, options.job_id, options.attempt,
                                                  plan.ps.num_shards, rdv_ms));
  }
  if (po.plan.consistency != Consistency::kSync && !po.shared_memory) {
    // A lost shard is started again alone (docs/RELIABILITY.md, "A lost PS
    // shard"): its next generation is looked up on a coordinator connection
    // of the resolver's own (the client is not thread-safe), made at the
    // first loss and shared by the resolver threads of several lost shards.
    po.shard_generations.assign(plan.ps.num_shards, 1);
    po.shard_recovery_timeout_ms = rdv_ms;
    struct Lookup {
      std::mutex mu;
      CoordinatorClientOptions options;
      std::unique_ptr<CoordinatorClient> client;  // guarded by mu
    };
    auto lookup = std::make_shared<Lookup>();
    lookup->options = coord->options();
    lookup->options.client_name += "-ps-recovery";
    const bool curve = !po.shard_curve_keys.empty();
    const int64_t job_id = options.job_id;
    const int32_t attempt = options.attempt;
    po.resolve_shard = [lookup, curve, job_id, attempt](uint32_t shard, uint32_t generation,
                                                        ps::Deadline deadline)
        -> StatusOr<ps::ShardAddress> {
      std::lock_guard<std::mutex> lock(lookup->mu);
      if (lookup->client == nullptr) {
        PX_ASSIGN_OR_RETURN(lookup->client, CoordinatorClient::Connect(lookup->options));
      }
      return ps::ResolveShardGeneration(lookup->client.get(), job_id, attempt, shard, generation,
                                        curve, deadline);
    };
  }
  PX_ASSIGN_OR_RETURN(out.client, ps::PsClient::Create(po));
  return out;
}

void GatherRows(std::span<const float> table, uint32_t dim, std::span<const int64_t> ids,
                std::vector<float>* rows) {
  // Appended row by row into reserved storage: no zeroing pass first.
  rows->clear();
  rows->reserve(ids.size() * dim);
  for (int64_t id : ids) {
    const float* row = table.data() + static_cast<size_t>(id) * dim;
    rows->insert(rows->end(), row, row + dim);
  }
}

namespace {

std::vector<int64_t> AllRows(int64_t rows) {
  std::vector<int64_t> ids(static_cast<size_t>(rows));
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

}  // namespace

SparseSync::SparseSync(const Options& options, const plan::JobPlan* plan,
                       comm::Communicator* world, std::unique_ptr<comm::Communicator> host,
                       PsConnection ps, Timeline* timeline, StepMetrics* metrics)
    : options_(options),
      plan_(plan),
      world_(world),
      timeline_(timeline),
      metrics_(metrics),
      endpoints_(std::move(ps.endpoints)),
      host_(std::move(host)),
      ps_(std::move(ps.client)) {}

SparseSync::~SparseSync() {
  // The PS client's thread writes into our pull buffers: stop it first.
  ps_.reset();
}

void SparseSync::AddAllGather(const plan::PlannedVariable& v, std::vector<float> table) {
  Slot s;
  s.var = v;
  s.values = std::move(table);
  s.optimizer = std::make_unique<optim::SparseOptimizer>(v.optimizer, v.rows, v.dim);
  index_[v.id] = slots_.size();
  slots_.push_back(std::move(s));
}

void SparseSync::AddPs(const plan::PlannedVariable& v) {
  Slot s;
  s.var = v;
  if (!v.sparse) {
    s.values.assign(v.size, 0.0f);
    s.grad.assign(static_cast<size_t>(v.rows) * v.dim, 0.0f);
  } else if (options_.cache_staleness > 0) {
    const ps::VariableSpec* spec = plan_->ps.FindVariable(v.id);
    PX_CHECK(spec != nullptr) << "PS variable \"" << v.name << "\" not in the PS plan";
    const size_t value_bytes = plan_->ps.value_encoding == ValueEncoding::kFp16 ? 2 : 4;
    s.cache = std::make_unique<ps::RowCache>(*spec, options_.cache_staleness,
                                             std::max<size_t>(1, options_.cache_rows), value_bytes,
                                             options_.cache_accumulate,
                                             options_.cache_check_versions);
  }
  if (!v.hot_rows.empty()) {
    auto hot = std::make_unique<Hot>();
    const size_t h = v.hot_rows.size();
    hot->index.reserve(h);
    for (size_t i = 0; i < h; ++i) hot->index.emplace(v.hot_rows[i], static_cast<uint32_t>(i));
    hot->values.assign(h * v.dim, 0.0f);
    hot->optimizer = std::make_unique<optim::SparseOptimizer>(v.optimizer, static_cast<int64_t>(h), v.dim);
    hot->block.assign(h * (v.dim + 1), 0.0f);
    s.hot = std::move(hot);
  }
  if (options_.count_presence && v.sparse && !v.dynamic) {
    // At most about 30,000 rows stored in all, at most 25 bytes each in the
    // JSON: under the key-value store's default value limit of 1 MiB.
    const size_t tables = static_cast<size_t>(std::count_if(
        plan_->variables.begin(), plan_->variables.end(), [](const plan::PlannedVariable& p) {
          return p.path == VariablePath::kPs && p.sparse && !p.dynamic;
        }));
    // One step in 4 (bench/presence_bench.cc: about the push's own dedupe of
    // the same ids then).
    s.presence = std::make_unique<plan::PresenceCounter>(std::max<size_t>(64, 30'000 / std::max<size_t>(1, tables)),
                                                         /*every=*/4);
  }
  index_[v.id] = slots_.size();
  slots_.push_back(std::move(s));
}

Status SparseSync::LoadCheckpoint(const std::string& dir, int64_t step, bool rank0) {
  // A LOAD drops pending pushes: no rank pushes or pulls before every shard
  // has loaded.
  if (rank0) {
    PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Load(dir, step));
    PX_RETURN_IF_ERROR(
        ps_->Wait(t, Deadline()).WithContext("PS shards loading the checkpoint \"" + dir + "\""));
  }
  if (world_) {
    PX_RETURN_IF_ERROR(
        world_->Barrier(Deadline()).WithContext("waiting for the PS shards to load the checkpoint"));
  }
  if (step > 0) {
    // The shards' clocks start at 0 after a LOAD: tell them where this rank
    // is (ssp, and the first step after a switch, read them).
    PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Clock(step - 1));
    PX_RETURN_IF_ERROR(ps_->Wait(t, Deadline()).WithContext("PS clock after resuming"));
  }
  return Status::Ok();
}

Status SparseSync::WriteInitialValues(const std::map<uint32_t, std::span<const float>>& values,
                                      bool rank0) {
  if (rank0) {
    for (const auto& [id, given] : values) {
      const plan::PlannedVariable& v = At(id).var;
      const size_t row_values = v.dim;
      // Chunks of about 4 MiB: the shards' message size limit stays far.
      const size_t chunk_rows = std::max<size_t>(1, (size_t{4} << 20) / (row_values * sizeof(float)));
      std::vector<float> padded;  // a dense variable's last row, filled up with zeros
      for (int64_t first = 0; first < v.rows; first += static_cast<int64_t>(chunk_rows)) {
        const size_t n = std::min<size_t>(chunk_rows, static_cast<size_t>(v.rows - first));
        std::vector<int64_t> ids(n);
        std::iota(ids.begin(), ids.end(), first);
        const size_t begin = static_cast<size_t>(first) * row_values;
        std::span<const float> rows = given.subspan(begin, std::min(n * row_values, given.size() - begin));
        if (rows.size() < n * row_values) {
          padded.assign(rows.begin(), rows.end());
          padded.resize(n * row_values, 0.0f);
          rows = padded;
        }
        PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Write(id, ids, rows));
        PX_RETURN_IF_ERROR(ps_->Wait(t, Deadline())
                               .WithContext("writing the initial values of \"" + v.name +
                                            "\" to PS" + ShardsOf(At(id))));
      }
    }
  }
  if (world_) {
    PX_RETURN_IF_ERROR(world_->Barrier(Deadline())
                           .WithContext("waiting for rank 0 to write the initial values to the PS"));
  }
  return Status::Ok();
}

Status SparseSync::PullDenseValues() {
  for (Slot& s : slots_) {
    if (s.var.sparse || s.var.path != VariablePath::kPs) continue;
    PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Pull(s.var.id, AllRows(s.var.rows), 0, &s.pulled));
    PX_RETURN_IF_ERROR(ps_->Wait(t, Deadline())
                           .WithContext("pulling the initial values of \"" + s.var.name +
                                        "\" from PS" + ShardsOf(s)));
    std::copy(s.pulled.begin(), s.pulled.begin() + static_cast<std::ptrdiff_t>(s.var.size),
              s.values.begin());
  }
  return Status::Ok();
}

Status SparseSync::AwaitPull(ps::Ticket ticket, PullBuffer buf, std::vector<float>* out,
                             VersionBuffer* versions) {
  WaitTimer timer(metrics_, /*dense=*/false, timeline_);
  Status st = ps_->Wait(ticket, Deadline());
  if (st.ok()) {
    *out = std::move(*buf);
  } else if (st.code() == StatusCode::kDeadlineExceeded) {
    // Still owned by the pending ticket.
    abandoned_.emplace_back(std::move(buf), versions != nullptr ? std::move(*versions) : nullptr);
  }
  return st;
}

std::string SparseSync::ShardsOf(const Slot& s) const {
  const ps::VariableSpec* spec = plan_->ps.FindVariable(s.var.id);
  if (!spec) return "";
  std::vector<uint32_t> shards(spec->partition_shards);
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  std::string out = " (on PS shard";
  for (size_t i = 0; i < shards.size(); ++i) {
    out += (i ? ", " : " ") + std::to_string(shards[i]);
    if (shards[i] < endpoints_.size()) out += " at " + endpoints_[shards[i]];
  }
  return out + ")";
}

Status SparseSync::Prefetch(uint32_t id, std::span<const int64_t> next_ids, int64_t step) {
  const std::pair<uint32_t, std::span<const int64_t>> one[] = {{id, next_ids}};
  return PrefetchMany(one, step);
}

Status SparseSync::PrefetchMany(std::span<const std::pair<uint32_t, std::span<const int64_t>>> vars,
                                int64_t step) {
  for (size_t i = 0; i < vars.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (vars[j].first == vars[i].first)
        return InvalidArgument("prefetching \"" + At(vars[i].first).var.name + "\" twice at once");
    }
  }
  std::vector<ps::BatchCall> calls;
  std::vector<Slot*> slots;
  // A cached table's version checks, needed until the calls are submitted:
  // by the index in `vars` (sized once: calls point into them).
  std::vector<std::vector<uint32_t>> held(vars.size());
  std::vector<ps::RowVersionCheck> checks(vars.size());
  for (size_t v = 0; v < vars.size(); ++v) {
    const auto& [id, next_ids] = vars[v];
    Slot& s = At(id);
    if (s.var.path != VariablePath::kPs) continue;  // a replica: nothing to fetch
    if (s.prefetch) {  // an unused earlier prefetch
      std::unique_ptr<Prefetched> old = std::move(s.prefetch);
      std::vector<float> unused;
      PX_RETURN_IF_ERROR(AwaitPrefetch(*old, &unused)
                             .WithContext("earlier prefetch of \"" + s.var.name + "\"" + ShardsOf(s)));
    }
    auto pf = std::make_unique<Prefetched>();
    pf->clock = step;
    std::span<const int64_t> wanted = next_ids;
    std::vector<int64_t> cold;  // a table with hot rows: the others
    if (s.hot) {
      for (int64_t id : next_ids) {
        if (!s.hot->index.contains(id)) cold.push_back(id);
      }
      if (cold.empty()) continue;
      wanted = cold;
    }
    if (CacheAt(s, step)) {
      // Only the rows the cache cannot serve at `step`.
      const bool check = s.cache->check_versions();
      s.cache->Plan(wanted, step, &pf->ids, check ? &held[v] : nullptr);
      if (pf->ids.empty()) continue;
      if (check) {
        pf->versions = std::make_unique<std::vector<uint32_t>>();
        checks[v] = ps::RowVersionCheck{held[v], options_.cache_staleness, pf->versions.get()};
      }
    } else {
      pf->ids.assign(wanted.begin(), wanted.end());
    }
    calls.push_back({ps::BatchCall::Kind::kPull, s.var.id, pf->ids, {}, pf->rows.get(),
                     pf->versions ? &checks[v] : nullptr});
    s.prefetch = std::move(pf);
    slots.push_back(&s);
  }
  if (calls.empty()) return Status::Ok();
  std::vector<ps::Ticket> tickets;
  const Status st =
      ps::SubmitCalls(ps_.get(), calls, step, options_.batch && calls.size() > 1, &tickets);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i < tickets.size()) {
      slots[i]->prefetch->ticket = tickets[i];
    } else {
      slots[i]->prefetch.reset();  // not sent
    }
  }
  if (st.ok()) return st;
  Slot* s = slots[tickets.size()];  // the call that failed (a batch: the first)
  return st.WithContext("prefetching \"" + s->var.name + "\"" + ShardsOf(*s));
}

Status SparseSync::Lookup(uint32_t id, std::span<const int64_t> ids, int64_t step,
                          std::vector<float>* rows) {
  Slot& s = At(id);
  if (s.var.path != VariablePath::kPs) {
    GatherRows(s.values, s.var.dim, ids, rows);
    return Status::Ok();
  }
  if (s.hot) return LookupHot(s, ids, step, rows);
  return LookupPs(s, ids, step, rows);
}

void SparseSync::CopyHotRows(const Slot& s, std::span<const int64_t> ids, float* out,
                             std::vector<size_t>* cold_at) {
  const size_t dim = s.var.dim;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = s.hot->index.find(ids[i]);
    if (it != s.hot->index.end()) {
      std::memcpy(out + i * dim, s.hot->values.data() + size_t{it->second} * dim,
                  dim * sizeof(float));
    } else if (cold_at != nullptr) {
      cold_at->push_back(i);
    }
  }
}

Status SparseSync::LookupHot(Slot& s, std::span<const int64_t> ids, int64_t step,
                             std::vector<float>* rows) {
  const size_t dim = s.var.dim;
  std::vector<float> out(ids.size() * dim);
  std::vector<size_t> cold_at;
  CopyHotRows(s, ids, out.data(), &cold_at);
  if (!cold_at.empty()) {
    std::vector<int64_t> cold(cold_at.size());
    for (size_t k = 0; k < cold_at.size(); ++k) cold[k] = ids[cold_at[k]];
    std::vector<float> cold_rows;
    PX_RETURN_IF_ERROR(LookupPs(s, cold, step, &cold_rows));
    for (size_t k = 0; k < cold.size(); ++k) {
      std::memcpy(out.data() + cold_at[k] * dim, cold_rows.data() + k * dim, dim * sizeof(float));
    }
  }
  *rows = std::move(out);
  return Status::Ok();
}

Status SparseSync::LookupPs(Slot& s, std::span<const int64_t> ids, int64_t step,
                            std::vector<float>* rows) {
  if (CacheAt(s, step)) return LookupCached(s, ids, step, rows);
  bool served = false;
  PX_RETURN_IF_ERROR(LookupPrefetched(s, ids, step, rows, &served));
  if (served) return Status::Ok();
  const std::string what = "pulling \"" + s.var.name + "\"" + ShardsOf(s);
  auto buf = std::make_unique<std::vector<float>>();
  PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Pull(s.var.id, ids, step, buf.get()));
  return AwaitPull(t, std::move(buf), rows).WithContext(what);
}

Status SparseSync::LookupPrefetched(Slot& s, std::span<const int64_t> ids, int64_t step,
                                    std::vector<float>* rows, bool* served) {
  *served = false;
  Prefetched* pf = s.prefetched.get();
  if (pf == nullptr || pf->clock != step) return Status::Ok();
  if (!pf->arrived) {
    PX_RETURN_IF_ERROR(AwaitPrefetched(s));
    pf->row_of.reserve(pf->ids.size());
    for (size_t i = 0; i < pf->ids.size(); ++i)
      pf->row_of.try_emplace(pf->ids[i], static_cast<uint32_t>(i));
  }
  const size_t dim = s.var.dim;
  std::vector<float> out(ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = pf->row_of.find(ids[i]);
    if (it == pf->row_of.end()) return Status::Ok();  // not all there: pull instead
    std::memcpy(out.data() + i * dim, pf->rows->data() + size_t{it->second} * dim,
                dim * sizeof(float));
  }
  *rows = std::move(out);
  *served = true;
  return Status::Ok();
}

bool SparseSync::CacheAt(const Slot& s, int64_t step) const {
  return s.cache != nullptr && ps_->ConsistencyAt(step).consistency != Consistency::kSync;
}

void SparseSync::NoteResets(Slot& s) {
  const std::vector<uint16_t> now = ps_->PartitionResets(s.var.id);
  if (s.resets_seen.size() != now.size()) s.resets_seen.assign(now.size(), 0);
  for (size_t p = 0; p < now.size(); ++p) {
    if (now[p] == s.resets_seen[p]) continue;
    s.cache->DropPartition(static_cast<uint32_t>(p));
    s.resets_seen[p] = now[p];
  }
}

Status SparseSync::AwaitPrefetch(Prefetched& pf, std::vector<float>* rows) {
  PullBuffer buf = std::move(pf.rows);
  pf.rows = std::make_unique<std::vector<float>>();
  return AwaitPull(pf.ticket, std::move(buf), rows, &pf.versions);
}

Status SparseSync::AwaitPrefetched(Slot& s) {
  Prefetched* pf = s.prefetched.get();
  std::vector<float> rows;
  Status st = AwaitPrefetch(*pf, &rows);
  if (st.ok()) *pf->rows = std::move(rows);
  if (!st.ok()) {
    s.prefetched.reset();
    return st.WithContext("pulling \"" + s.var.name + "\"" + ShardsOf(s));
  }
  pf->arrived = true;
  return Status::Ok();
}

Status SparseSync::CachePrefetched(Slot& s, int64_t step) {
  Prefetched* pf = s.prefetched.get();
  if (pf == nullptr || pf->clock != step || pf->arrived) return Status::Ok();
  PX_RETURN_IF_ERROR(AwaitPrefetched(s));
  NoteResets(s);  // before the fresh rows join
  s.cache->Insert(pf->ids, *pf->rows, step,
                  pf->versions ? std::span<const uint32_t>(*pf->versions) : std::span<const uint32_t>{});
  return Status::Ok();
}

Status SparseSync::LookupCached(Slot& s, std::span<const int64_t> ids, int64_t step,
                                std::vector<float>* rows) {
  PX_RETURN_IF_ERROR(CachePrefetched(s, step));
  const size_t dim = s.var.dim;
  rows->resize(ids.size() * dim);
  std::vector<size_t> unserved;
  s.cache->Read(ids, step, rows->data(), &unserved);
  if (unserved.empty()) return Status::Ok();
  std::vector<int64_t> wanted(unserved.size());
  for (size_t k = 0; k < unserved.size(); ++k) wanted[k] = ids[unserved[k]];
  std::vector<uint32_t> first;
  const ps::Dedupe missing = ps::DedupeIdsFirstSeen(wanted, &first);
  const std::string what = "pulling \"" + s.var.name + "\"" + ShardsOf(s);
  std::vector<float> pulled;
  if (s.cache->check_versions()) {
    PX_RETURN_IF_ERROR(PullCheckedIntoCache(s, missing.unique, step, &pulled).WithContext(what));
  } else {
    auto buf = std::make_unique<std::vector<float>>();
    StatusOr<ps::Ticket> t = ps_->Pull(s.var.id, missing.unique, step, buf.get());
    if (!t.ok()) return t.status().WithContext(what);
    PX_RETURN_IF_ERROR(AwaitPull(*t, std::move(buf), &pulled).WithContext(what));
    NoteResets(s);
    s.cache->Insert(missing.unique, pulled, step);
  }
  for (size_t k = 0; k < unserved.size(); ++k) {
    std::memcpy(rows->data() + unserved[k] * dim,
                pulled.data() + size_t{missing.index_of[k]} * dim, dim * sizeof(float));
  }
  return Status::Ok();
}

Status SparseSync::PullCheckedIntoCache(Slot& s, const std::vector<int64_t>& ids, int64_t step,
                                        std::vector<float>* rows) {
  std::vector<uint32_t> held;
  s.cache->Held(ids, &held);
  VersionBuffer versions = std::make_unique<std::vector<uint32_t>>();
  auto buf = std::make_unique<std::vector<float>>();
  PX_ASSIGN_OR_RETURN(
      ps::Ticket t,
      ps_->PullChecked(s.var.id, ids, ps::RowVersionCheck{held, options_.cache_staleness, versions.get()},
                       step, buf.get()));
  PX_RETURN_IF_ERROR(AwaitPull(t, std::move(buf), rows, &versions));
  NoteResets(s);
  s.cache->Insert(ids, *rows, step, *versions);
  // The rows found fresh come from the cache; one dropped since the pull
  // (its partition reset) is pulled again, whole.
  std::vector<size_t> unserved;
  s.cache->Read(ids, step, rows->data(), &unserved);
  std::vector<size_t> again;  // (a row sent is in *rows already, held or not)
  for (size_t k : unserved)
    if ((*versions)[k] == ps_wire::kRowFresh) again.push_back(k);
  if (again.empty()) return Status::Ok();
  std::vector<int64_t> lost(again.size());
  for (size_t k = 0; k < again.size(); ++k) lost[k] = ids[again[k]];
  auto buf2 = std::make_unique<std::vector<float>>();
  PX_ASSIGN_OR_RETURN(ps::Ticket t2, ps_->Pull(s.var.id, lost, step, buf2.get()));
  std::vector<float> lost_rows;
  PX_RETURN_IF_ERROR(AwaitPull(t2, std::move(buf2), &lost_rows));
  const size_t dim = s.var.dim;
  for (size_t k = 0; k < again.size(); ++k)
    std::memcpy(rows->data() + again[k] * dim, lost_rows.data() + k * dim, dim * sizeof(float));
  NoteResets(s);
  s.cache->Insert(lost, lost_rows, step);
  return Status::Ok();
}

void SparseSync::CacheGradients(Slot& s, int64_t step, bool flush) {
  ps::RowsToPush push;
  s.cache->AddGradients(s.pending_ids, s.pending_grads, step, &push);
  // The next step is sync (or a checkpoint or the end comes): nothing waits.
  if (flush || !CacheAt(s, step + 1)) {
    s.cache->Clear(&push);
  } else {
    s.cache->TakeDue(step, &push);
  }
  s.pending_ids = std::move(push.ids);
  s.pending_grads = std::move(push.grads);
}

Status SparseSync::AdvancePrefetches() {
  for (Slot& s : slots_) {
    // A cached table's prefetch no lookup used still joins the cache.
    if (s.prefetched && !s.prefetched->arrived && CacheAt(s, s.prefetched->clock)) {
      PX_RETURN_IF_ERROR(CachePrefetched(s, s.prefetched->clock));
    }
    if (s.prefetched && !s.prefetched->arrived) {
      std::vector<float> unused;
      PX_RETURN_IF_ERROR(AwaitPrefetch(*s.prefetched, &unused)
                             .WithContext("unused prefetch of \"" + s.var.name + "\"" + ShardsOf(s)));
    }
    s.prefetched = std::move(s.prefetch);
  }
  return Status::Ok();
}

void SparseSync::AddRows(uint32_t id, std::span<const int64_t> ids, std::span<const float> rows) {
  Slot& s = At(id);
  s.pending_ids.insert(s.pending_ids.end(), ids.begin(), ids.end());
  s.pending_grads.insert(s.pending_grads.end(), rows.begin(), rows.end());
  s.grad_given = true;
}

void SparseSync::DenseGradient(uint32_t id, std::span<const float> grad) {
  Slot& s = At(id);
  std::copy(grad.begin(), grad.end(), s.grad.begin());
  s.grad_given = true;
}

bool SparseSync::HasGradient(uint32_t id) const { return At(id).grad_given; }

Status SparseSync::StartPushes(int64_t step, bool flush_caches) {
  pushes_.clear();
  bool hot = false;
  for (Slot& s : slots_) {
    if (s.presence) s.presence->AddStep(s.pending_ids);
    if (s.hot) {
      SplitHotGradients(s);
      hot = true;
    }
    if (CacheAt(s, step)) CacheGradients(s, step, flush_caches);
  }
  if (hot) metrics_->SetHotRows(hot_hits_, hot_misses_);
  if (ps_) {
    const ps::ConsistencyMode mode = ps_->ConsistencyAt(step);
    if (pushed_mode_ && *pushed_mode_ != mode) {
      PX_LOG(INFO) << "rank " << options_.rank << ": consistency "
                   << ps::FormatConsistencyMode(mode) << " from step " << step;
    }
    pushed_mode_ = mode;
  }
  if (plan_->local_aggregation) {
    return PushHostAggregated(step).WithContext("local aggregation of PS gradients");
  }
  std::vector<ps::BatchCall> calls;
  std::vector<Slot*> called;
  std::vector<std::vector<int64_t>> all_rows;  // the ids of dense variables' calls
  all_rows.reserve(slots_.size());             // no reallocation: calls keep spans of them
  for (Slot& s : slots_) {
    if (s.var.path != VariablePath::kPs) continue;
    // A dense variable on the PS pushes every row and gets the updated
    // values back.
    if (s.var.sparse) {
      calls.push_back({ps::BatchCall::Kind::kPush, s.var.id, s.pending_ids, s.pending_grads, nullptr});
    } else {
      all_rows.push_back(AllRows(s.var.rows));
      calls.push_back({ps::BatchCall::Kind::kPushPull, s.var.id, all_rows.back(), s.grad, &s.pulled});
    }
    called.push_back(&s);
  }
  return SubmitPushes(calls, called, step);
}

// The step's pushes: one batch (a message per shard), or a call each.
Status SparseSync::SubmitPushes(std::span<const ps::BatchCall> calls, std::span<Slot* const> slots,
                                int64_t step) {
  if (calls.empty()) return Status::Ok();  // (and no PS client without PS variables)
  std::vector<ps::Ticket> tickets;
  const Status st = ps::SubmitCalls(ps_.get(), calls, step, options_.batch, &tickets);
  for (size_t i = 0; i < tickets.size(); ++i) pushes_.emplace_back(tickets[i], slots[i]);
  if (st.ok()) return st;
  if (options_.batch) return st.WithContext("pushing this step's PS variables");
  Slot* s = slots[tickets.size()];
  return st.WithContext("pushing \"" + s->var.name + "\"" + ShardsOf(*s));
}

// Local aggregation: the ranks of this host sum their rows of every PS
// variable (all sparse: the plan turns aggregation off otherwise) in
// local-rank order, and the host's first rank pushes the sums as the host's
// contribution. The others push nothing: in sync mode their next pull waits
// on the shard until the step has been applied.
Status SparseSync::PushHostAggregated(int64_t step) {
  std::vector<Slot*> vars;
  std::vector<ps::SparseRows> rows;
  std::vector<uint32_t> dims;
  for (Slot& s : slots_) {
    if (s.var.path != VariablePath::kPs) continue;
    PX_CHECK(s.var.sparse) << "local aggregation with dense \"" << s.var.name << "\" on PS";
    vars.push_back(&s);
    dims.push_back(s.var.dim);
    rows.push_back(ps::DedupeSum(s.pending_ids, s.pending_grads, s.var.dim));
  }
  if (host_) {
    WaitTimer timer(metrics_, /*dense=*/false, timeline_);
    PX_ASSIGN_OR_RETURN(rows, AllGatherSparse(host_.get(), rows, dims, comm::ReduceOp::kSum,
                                              Deadline(), /*merge_rank=*/0));
  }
  if (options_.local_rank != 0) return Status::Ok();
  std::vector<ps::BatchCall> calls;
  for (size_t t = 0; t < vars.size(); ++t) {
    calls.push_back({ps::BatchCall::Kind::kPush, vars[t]->var.id, rows[t].ids, rows[t].values, nullptr});
  }
  return SubmitPushes(calls, vars, step);
}

void SparseSync::SplitHotGradients(Slot& s) {
  Hot& hot = *s.hot;
  const size_t dim = s.var.dim;
  const size_t h = s.var.hot_rows.size();
  std::fill(hot.block.begin(), hot.block.end(), 0.0f);
  float* touched = hot.block.data() + h * dim;
  size_t kept = 0;  // cold rows, compacted in place
  for (size_t i = 0; i < s.pending_ids.size(); ++i) {
    const float* g = s.pending_grads.data() + i * dim;
    auto it = hot.index.find(s.pending_ids[i]);
    if (it == hot.index.end()) {
      if (kept != i) {
        s.pending_ids[kept] = s.pending_ids[i];
        std::memmove(s.pending_grads.data() + kept * dim, g, dim * sizeof(float));
      }
      ++kept;
      continue;
    }
    float* row = hot.block.data() + size_t{it->second} * dim;
    for (size_t j = 0; j < dim; ++j) row[j] += g[j];
    touched[it->second] = 1;  // the mean over ranks stays > 0 iff some rank touched it
  }
  s.pending_ids.resize(kept);
  s.pending_grads.resize(kept * dim);
  hot_hits_ += std::count_if(touched, touched + h, [](float t) { return t > 0; });
  std::vector<int64_t> cold(s.pending_ids);
  std::sort(cold.begin(), cold.end());
  hot_misses_ += std::unique(cold.begin(), cold.end()) - cold.begin();
}

std::vector<std::span<float>> SparseSync::HotBlocks() {
  std::vector<std::span<float>> blocks;
  for (Slot& s : slots_) {
    if (s.hot) blocks.emplace_back(s.hot->block);
  }
  return blocks;
}

Status SparseSync::ApplyHotRows() {
  // The shard's rule (its sync step): the sum over contributions, divided
  // by the workers under "mean"; the block arrives as the mean over ranks.
  const float scale = plan_->ps.sync_mean ? 1.0f : static_cast<float>(world_ ? world_->world_size() : 1);
  std::vector<int64_t> rows;
  std::vector<float> grads;
  for (Slot& s : slots_) {
    if (!s.hot) continue;
    const size_t dim = s.var.dim;
    const size_t h = s.var.hot_rows.size();
    const float* touched = s.hot->block.data() + h * dim;
    rows.clear();
    grads.clear();
    for (size_t r = 0; r < h; ++r) {
      if (touched[r] <= 0) continue;
      rows.push_back(static_cast<int64_t>(r));
      const float* g = s.hot->block.data() + r * dim;
      for (size_t j = 0; j < dim; ++j) grads.push_back(g[j] * scale);
    }
    PX_RETURN_IF_ERROR(s.hot->optimizer->Apply(rows, grads, s.hot->values)
                           .WithContext("applying the hot rows of \"" + s.var.name + "\""));
  }
  return Status::Ok();
}

Status SparseSync::PullHotRows(int64_t step) {
  std::vector<float> states;
  for (Slot& s : slots_) {
    if (!s.hot) continue;
    PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->PullState(s.var.id, s.var.hot_rows, step, &states));
    PX_RETURN_IF_ERROR(ps_->Wait(t, Deadline())
                           .WithContext("pulling the hot rows of \"" + s.var.name + "\" from PS" +
                                        ShardsOf(s)));
    // Each row's weights, optimizer slots and step become this rank's.
    optim::OptimizerState state = s.hot->optimizer->State();
    s.hot->values.resize(s.var.hot_rows.size() * s.var.dim);
    ps::UnpackRowStates(states, s.var.dim, s.var.optimizer.type, s.hot->values.data(), &state);
    PX_RETURN_IF_ERROR(s.hot->optimizer->Restore(std::move(state))
                           .WithContext("taking over the hot rows of \"" + s.var.name + "\""));
  }
  return Status::Ok();
}

Status SparseSync::WriteHotRows() {
  for (Slot& s : slots_) {
    if (!s.hot) continue;
    const std::vector<float> states =
        ps::PackRowStates(s.hot->values, s.hot->optimizer->State(), s.var.dim, s.var.optimizer.type);
    PX_RETURN_IF_ERROR(WriteRowStates(s.var, s.var.hot_rows, states,
                                      "writing the hot rows of \"" + s.var.name + "\" to PS" + ShardsOf(s)));
  }
  return Status::Ok();
}

Status SparseSync::WriteRowStates(const plan::PlannedVariable& var, std::span<const int64_t> ids,
                                  std::span<const float> states, const std::string& what) {
  const size_t width = ps_wire::RowStateWidth(var.dim, optim::StateSlots(var.optimizer.type));
  // In requests of at most 32 MiB of states, well under a shard's
  // --max-message-mb (256 by default), however many rows there are.
  const size_t chunk = std::max<size_t>(1, (size_t{32} << 20) / (width * sizeof(float)));
  std::vector<ps::Ticket> tickets;
  Status st;
  for (size_t first = 0; first < ids.size() && st.ok(); first += chunk) {
    const size_t n = std::min(chunk, ids.size() - first);
    StatusOr<ps::Ticket> t =
        ps_->WriteState(var.id, ids.subspan(first, n), states.subspan(first * width, n * width));
    if (t.ok()) tickets.push_back(*t);
    st = t.status();
  }
  for (ps::Ticket t : tickets) {  // every ticket is waited for, even after an error
    Status w = ps_->Wait(t, Deadline());
    if (st.ok()) st = w;
  }
  return st.WithContext(what);
}

std::optional<plan::MeasuredPresence> SparseSync::TakePresence(int attempt, int64_t step) {
  plan::MeasuredPresence m;
  m.attempt = attempt;
  m.step = step;
  m.first_step = step;
  for (Slot& s : slots_) {
    if (!s.presence) continue;
    m.first_step = step - s.presence->calls();  // every table sees every step
    m.tables[s.var.name] = s.presence->Take();
    s.presence->Reset();
  }
  if (m.tables.empty()) return std::nullopt;
  return m;
}

// Sums every rank's (ids, rows) of each all-gather table in rank order,
// averages over ranks and applies them to the local replicas: all such
// tables in two collectives (trainer/sparse_allgather.h).
Status SparseSync::ExchangeAllGather() {
  std::vector<Slot*> vars;
  std::vector<ps::SparseRows> mine;
  std::vector<uint32_t> dims;
  for (Slot& s : slots_) {
    if (s.var.path != VariablePath::kAllGather) continue;
    vars.push_back(&s);
    dims.push_back(s.var.dim);
    mine.push_back(ps::DedupeSumFirstSeen(s.pending_ids, s.pending_grads, s.var.dim));
  }
  if (vars.empty()) return Status::Ok();
  WaitTimer timer(metrics_, /*dense=*/false, timeline_);
  const auto started = std::chrono::steady_clock::now();
  std::vector<ps::SparseRows> merged;
  if (world_) {
    StatusOr<std::vector<ps::SparseRows>> all =
        AllGatherSparse(world_, mine, dims, comm::ReduceOp::kMean, Deadline());
    if (!all.ok()) return all.status().WithContext("all-gather of sparse rows");
    merged = std::move(all).value();
  } else {
    merged = std::move(mine);
  }
  timeline_->Record(Lane::kAllGather, started, std::chrono::steady_clock::now());
  for (size_t t = 0; t < vars.size(); ++t) {
    PX_RETURN_IF_ERROR(vars[t]->optimizer->Apply(merged[t].ids, merged[t].values, vars[t]->values)
                           .WithContext("applying \"" + vars[t]->var.name + "\""));
  }
  return Status::Ok();
}

Status SparseSync::FinishPushes(int64_t step) {
  // Under ssp every shard also learns that this rank finished the step,
  // whether or not it pushed there; so it does before a switch (the first
  // step of a sync or ssp period waits for every rank's clock).
  if (ps_ && (ps_->ConsistencyAt(step).consistency == Consistency::kSsp ||
              ps_->ConsistencyAt(step + 1) != ps_->ConsistencyAt(step))) {
    PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Clock(step));
    pushes_.emplace_back(t, nullptr);
  }
  for (auto& [ticket, s] : pushes_) {
    WaitTimer timer(metrics_, /*dense=*/false, timeline_);
    Status st = ps_->Wait(ticket, Deadline());
    if (!st.ok()) {
      return st.WithContext(s ? "PS update of \"" + s->var.name + "\"" + ShardsOf(*s)
                              : std::string("PS clock"));
    }
  }
  pushes_.clear();
  ps::RowCacheCounters cached;
  bool caches = false;
  for (Slot& s : slots_) {
    if (s.cache == nullptr) continue;
    caches = true;
    NoteResets(s);  // the push acks carry them too
    const ps::RowCacheCounters& c = s.cache->counters();
    cached.hits += c.hits;
    cached.misses += c.misses;
    cached.stale_refreshes += c.stale_refreshes;
    cached.bytes_saved += c.bytes_saved;
  }
  if (caches) metrics_->SetRowCache(cached.hits, cached.misses, cached.stale_refreshes, cached.bytes_saved);
  for (Slot& s : slots_) {
    if (s.var.path == VariablePath::kPs && !s.var.sparse) {
      std::copy(s.pulled.begin(), s.pulled.begin() + static_cast<std::ptrdiff_t>(s.var.size),
                s.values.begin());
      std::fill(s.grad.begin(), s.grad.end(), 0.0f);
    }
    s.pending_ids.clear();
    s.pending_grads.clear();
    s.grad_given = false;
  }
  return Status::Ok();
}

Status SparseSync::ReadSparse(uint32_t id, int64_t first_row, int64_t count, int64_t step,
                              std::vector<float>* out) {
  Slot& s = At(id);
  const size_t dim = s.var.dim;
  if (s.var.path != VariablePath::kPs) {
    out->assign(s.values.begin() + static_cast<std::ptrdiff_t>(first_row * dim),
                s.values.begin() + static_cast<std::ptrdiff_t>((first_row + count) * dim));
    return Status::Ok();
  }
  std::vector<int64_t> ids(static_cast<size_t>(count));
  std::iota(ids.begin(), ids.end(), first_row);
  auto buf = std::make_unique<std::vector<float>>();
  PX_ASSIGN_OR_RETURN(ps::Ticket t, ps_->Pull(s.var.id, ids, step, buf.get()));
  PX_RETURN_IF_ERROR(
      AwaitPull(t, std::move(buf), out).WithContext("reading \"" + s.var.name + "\"" + ShardsOf(s)));
  // The shards' copies of hot rows are stale: this rank's are current.
  if (s.hot) CopyHotRows(s, ids, out->data(), nullptr);
  return Status::Ok();
}

Status SparseSync::SetConsistency(int64_t from, const ps::ConsistencyMode& mode, int64_t now) {
  const std::string what = "switching the PS shards to consistency " +
                           ps::FormatConsistencyMode(mode) + " from step " + std::to_string(from);
  StatusOr<ps::Ticket> t = ps_->SetConsistency(from, mode);
  if (!t.ok()) return t.status().WithContext(what);
  PX_RETURN_IF_ERROR(ps_->Wait(*t, Deadline()).WithContext(what));
  PX_LOG(INFO) << "rank " << options_.rank << ": learned consistency "
               << ps::FormatConsistencyMode(mode) << " from step " << from << " before step " << now;
  return Status::Ok();
}

Status SparseSync::SetLearningRate(uint32_t id, double lr, int64_t step) {
  Slot& s = At(id);
  if (s.var.path != VariablePath::kPs) {
    s.optimizer->set_lr(static_cast<float>(lr));
    return Status::Ok();
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", lr);
  const std::string what = "setting the learning rate of \"" + s.var.name + "\"" + ShardsOf(s);
  StatusOr<ps::Ticket> t = ps_->Set(s.var.id, "lr", text, step);
  if (!t.ok()) return t.status().WithContext(what);
  PX_RETURN_IF_ERROR(ps_->Wait(*t, Deadline()).WithContext(what));
  if (s.hot) s.hot->optimizer->set_lr(static_cast<float>(lr));
  return Status::Ok();
}

std::span<const float> SparseSync::DenseValues(uint32_t id) const {
  const Slot& s = At(id);
  return std::span<const float>(s.values.data(), s.var.size);
}

void SparseSync::AppendHeld(std::vector<HeldVariable>* held) {
  for (Slot& s : slots_) {
    if (s.var.path != VariablePath::kAllGather) continue;
    held->push_back({s.var.id, s.var.name, &s.values, nullptr, s.optimizer.get()});
  }
}

}  // namespace parallax::trainer
