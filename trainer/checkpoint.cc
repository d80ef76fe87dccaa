#include "trainer/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "core/base/durable_file.h"
#include "core/base/logging.h"
#include "core/plan/job_plan.h"
#include "core/ps/client.h"
#include "core/ps/dynamic_file.h"
#include "core/ps/initializer.h"
#include "core/ps/partition_file.h"
#include "core/rpc/coordinator_client.h"
#include "schemas/kv_keys.h"

namespace parallax::trainer {

Status StateRegistry::Register(const std::string& name, Save save, Restore restore) {
  if (!save || !restore) return InvalidArgument("state \"" + name + "\" needs save and restore");
  if (!hooks_.emplace(name, std::make_pair(std::move(save), std::move(restore))).second)
    return AlreadyExists("state \"" + name + "\" is registered twice");
  return Status::Ok();
}

std::map<std::string, std::string> StateRegistry::SaveAll() const {
  std::map<std::string, std::string> blobs;
  for (const auto& [name, hooks] : hooks_) blobs[name] = hooks.first();
  return blobs;
}

Status StateRegistry::RestoreAll(const std::map<std::string, std::string>& blobs) const {
  for (const auto& [name, hooks] : hooks_) {
    auto it = blobs.find(name);
    if (it == blobs.end()) return FailedPrecondition("no state \"" + name + "\" in it");
    PX_RETURN_IF_ERROR(hooks.second(it->second).WithContext("restoring state \"" + name + "\""));
  }
  return Status::Ok();
}

std::vector<DenseEntry> SnapshotHeld(const std::vector<HeldVariable>& vars) {
  std::vector<DenseEntry> out;
  for (const HeldVariable& v : vars) {
    DenseEntry e;
    e.id = v.id;
    e.name = v.name;
    e.values = *v.values;
    e.optimizer = v.dense_opt ? v.dense_opt->State() : v.sparse_opt->State();
    out.push_back(std::move(e));
  }
  return out;
}

Status RestoreHeld(const std::vector<DenseEntry>& entries, const std::vector<HeldVariable>& vars) {
  std::map<uint32_t, const DenseEntry*> by_id;
  for (const auto& e : entries) by_id[e.id] = &e;
  for (const HeldVariable& v : vars) {
    auto it = by_id.find(v.id);
    if (it == by_id.end() || it->second->name != v.name ||
        it->second->values.size() != v.values->size()) {
      return FailedPrecondition("it holds no variable \"" + v.name + "\" of " +
                                std::to_string(v.values->size()) +
                                " values (was it written by another model?)");
    }
    // The state in the form this rank's optimizer keeps: a variable the
    // checkpoint's plan held on the other worker path (all-reduce keeps a
    // DenseOptimizer, one step count; all-gather a SparseOptimizer, a step
    // per row under Adam, none otherwise) has the other form.
    optim::OptimizerState state = it->second->optimizer;
    const bool adam = !state.s2.empty();  // the only optimizer with two slots
    std::vector<int64_t>& steps = state.steps;
    const int64_t most = steps.empty() ? 0 : *std::max_element(steps.begin(), steps.end());
    if (v.dense_opt && steps.size() != 1) {
      steps = {most};
    } else if (v.sparse_opt) {
      const size_t want = adam ? static_cast<size_t>(v.sparse_opt->rows()) : 0;
      if (steps.size() != want) steps.assign(want, most);
    }
    Status st = v.dense_opt ? v.dense_opt->Restore(std::move(state))
                            : v.sparse_opt->Restore(std::move(state));
    if (!st.ok()) return st.WithContext("variable \"" + v.name + "\"");
    *v.values = it->second->values;
  }
  return Status::Ok();
}

namespace {

// The values a worker holds of `var`: a dense variable's size, a table's
// rows × dim.
size_t HeldSize(const plan::PlannedVariable& var) {
  return var.sparse ? static_cast<size_t>(var.rows) * var.dim : static_cast<size_t>(var.size);
}

}  // namespace

StatusOr<DenseEntry> ReadPsVariable(const std::string& dir, const plan::PlannedVariable& var,
                                    int64_t step) {
  const size_t dim = var.dim, rows = static_cast<size_t>(var.rows), padded = rows * dim;
  const int slots = optim::StateSlots(var.optimizer.type);
  const bool adam = var.optimizer.type == OptimizerType::kAdam;
  std::vector<float> weights(padded), s[2];
  for (int k = 0; k < slots; ++k) s[k].assign(padded, optim::InitialStateValue(var.optimizer, k));
  std::vector<int64_t> steps(adam ? rows : 0, 0);
  std::vector<char> seen(rows, 0);
  uint32_t partitions = 1;
  for (uint32_t p = 0; p < partitions; ++p) {
    const std::string path = dir + "/" + ps::PartitionFileName(var.id, p);
    PX_ASSIGN_OR_RETURN(auto reader, ps::PartitionFileReader::Open(path));
    const ps::PartitionFileHeader& h = reader->header();
    if (p == 0) partitions = std::max<uint32_t>(1, h.partitions);
    if (h.dim != var.dim || h.rows != var.rows ||
        h.optimizer != static_cast<uint32_t>(var.optimizer.type) || h.partitions != partitions) {
      return FailedPrecondition("PS checkpoint file \"" + path + "\" holds " + std::to_string(h.rows) +
                                " rows of dim " + std::to_string(h.dim) + " (partition " +
                                std::to_string(h.partition) + " of " + std::to_string(h.partitions) +
                                "), optimizer " + std::to_string(h.optimizer) + "; \"" + var.name +
                                "\" now has " + std::to_string(var.rows) + " of dim " +
                                std::to_string(var.dim) + ", optimizer " +
                                std::to_string(static_cast<uint32_t>(var.optimizer.type)));
    }
    std::vector<int64_t> ids, row_steps;
    std::vector<float> w, s1, s2;
    while (true) {
      PX_RETURN_IF_ERROR(reader->NextWithState(4096, &ids, &w, &s1, &s2, &row_steps));
      if (ids.empty()) break;
      for (size_t i = 0; i < ids.size(); ++i) {
        const size_t r = static_cast<size_t>(ids[i]);  // in [0, rows): checked by the reader
        seen[r] = 1;
        std::copy_n(w.begin() + i * dim, dim, weights.begin() + r * dim);
        if (slots >= 1) std::copy_n(s1.begin() + i * dim, dim, s[0].begin() + r * dim);
        if (slots >= 2) std::copy_n(s2.begin() + i * dim, dim, s[1].begin() + r * dim);
        if (adam) steps[r] = row_steps[i];
      }
    }
  }
  for (size_t r = 0; r < rows; ++r) {
    if (!seen[r]) ps::InitializeRow(var.init, var.id, static_cast<int64_t>(r), var.dim, &weights[r * dim]);
  }
  DenseEntry e;
  e.id = var.id;
  e.name = var.name;
  const size_t size = HeldSize(var);
  weights.resize(size);
  e.values = std::move(weights);
  if (slots >= 1) e.optimizer.s1.assign(s[0].begin(), s[0].begin() + static_cast<std::ptrdiff_t>(size));
  if (slots >= 2) e.optimizer.s2.assign(s[1].begin(), s[1].begin() + static_cast<std::ptrdiff_t>(size));
  // The holder's form: all-gather replicas keep a SparseOptimizer (a step
  // per row, Adam only), the all-reduce path a DenseOptimizer (one count).
  if (var.path == VariablePath::kAllGather) {
    e.optimizer.steps = std::move(steps);
  } else {
    e.optimizer.steps = {adam && !steps.empty() ? *std::max_element(steps.begin(), steps.end()) : step};
  }
  return e;
}

Status Checkpointer::Write(int64_t step, const std::string& plan_json,
                           const std::vector<DenseEntry>& dense,
                           const std::map<std::string, std::string>& rank_state, ps::PsClient* ps) {
  const std::string dir = StepCheckpointDir(options_.root, options_.job_id, step);
  const std::string where = "checkpoint of step " + std::to_string(step) + " in \"" + dir + "\"";
  PX_RETURN_IF_ERROR(MakeDirectories(dir).WithContext(where));
  const std::string state = EncodeRankState(rank_state);
  PX_RETURN_IF_ERROR(
      WriteFileDurably(dir + "/" + RankStateFile(options_.rank), state).WithContext(where));
  auto rank_key = [&](int rank) {
    return kv_keys::CheckpointRankPart(options_.job_id, options_.attempt, step, rank);
  };
  if (coord_ && options_.world_size > 1 && options_.rank != 0) {
    return coord_->KvSet(rank_key(options_.rank), Sha256Hex(state))
        .WithContext(where);
  }
  if (options_.rank != 0) return Status::Ok();

  Manifest m;
  m.job_id = options_.job_id;
  m.attempt = options_.attempt;
  m.step = step;
  m.world_size = options_.world_size;
  m.plan_json = plan_json;
  PX_RETURN_IF_ERROR(
      WriteFileDurably(dir + "/" + kDenseFile, EncodeDenseFile(dense)).WithContext(where));
  PX_ASSIGN_OR_RETURN(plan::JobPlan plan, plan::ParseJobPlan(plan_json));
  if (ps) {
    PX_ASSIGN_OR_RETURN(ps::Ticket t, ps->Save(dir, step));
    PX_RETURN_IF_ERROR(ps->Wait(t, ps::DeadlineIn(options_.timeout_ms))
                           .WithContext("PS shards writing the " + where));
  }
  std::vector<std::string> names = {kDenseFile};
  for (int r = 0; r < options_.world_size; ++r) names.push_back(RankStateFile(r));
  for (const ps::VariableSpec& v : plan.ps.variables) {
    if (v.dynamic) {
      for (std::string& name : ps::DynamicFileNames(v)) names.push_back(std::move(name));
      continue;
    }
    for (uint32_t p = 0; p < v.partitions; ++p) names.push_back(ps::PartitionFileName(v.id, p));
  }
  std::vector<std::string> announced;
  if (coord_ && options_.world_size > 1) {
    std::vector<std::string> keys;
    for (int r = 1; r < options_.world_size; ++r) keys.push_back(rank_key(r));
    auto got = coord_->KvGet(keys, options_.timeout_ms);
    if (!got.ok()) {
      return got.status().WithContext("rank 0 waiting for every rank's part of the " + where);
    }
    announced = std::move(got).value();
  }
  for (const std::string& name : names) {
    PX_ASSIGN_OR_RETURN(ManifestFile f, DescribeFile(dir, name));
    m.files.push_back(std::move(f));
  }
  for (size_t i = 0; i < announced.size(); ++i) {
    const ManifestFile& f = m.files[2 + i];  // rank-<i+1>.state
    if (f.sha256 != announced[i]) {
      return FailedPrecondition(where + ": \"" + f.name + "\" is not the file rank " +
                                std::to_string(i + 1) + " wrote (SHA-256 differs)");
    }
  }
  const std::string manifest = ManifestToJson(m);
  PX_RETURN_IF_ERROR(WriteFileDurably(dir + "/" + kManifestFile, manifest).WithContext(where));
  if (!coord_) return Status::Ok();
  rpc::CheckpointInfo info;
  info.job_id = options_.job_id;
  info.attempt = options_.attempt;
  info.step = step;
  info.path = dir;
  info.manifest_sha256 = Sha256Hex(manifest);
  PX_RETURN_IF_ERROR(coord_->CommitCheckpoint(info).WithContext("committing the " + where));
  PX_LOG(INFO) << "job " << options_.job_id << ": checkpoint of step " << step << " committed ("
               << dir << ")";
  auto committed = ListCommitted(coord_, options_.job_id);
  if (committed.ok()) {
    PruneCheckpoints(options_.root, options_.job_id, *committed, options_.keep);
  } else {
    PX_LOG(WARNING) << "not pruning checkpoints: " << committed.status().ToString();
  }
  return Status::Ok();
}

StatusOr<std::optional<Checkpointer::ResumePoint>> Checkpointer::FindResumePoint() {
  if (!coord_ || options_.root.empty()) return std::optional<ResumePoint>();
  const std::string key = kv_keys::ResumeStep(options_.job_id, options_.attempt);
  ResumePoint rp;
  bool found = false;
  if (options_.rank == 0) {
    PX_ASSIGN_OR_RETURN(auto usable, FindUsableCheckpoint(coord_, options_.job_id));
    if (usable) {
      found = true;
      rp.step = usable->first.step;
      rp.dir = usable->first.path;
      rp.from_world = usable->second.world_size;
    }
    if (options_.world_size > 1) {
      PX_RETURN_IF_ERROR(coord_->KvSet(
          key, found ? std::to_string(rp.step) + " " + std::to_string(rp.from_world) + " " + rp.dir
                     : std::string("none")));
    }
  } else {
    auto got = coord_->KvGet({key}, options_.timeout_ms);
    if (!got.ok()) {
      return got.status().WithContext(
          "rank " + std::to_string(options_.rank) +
          " waiting for rank 0 to choose the checkpoint to resume from");
    }
    const std::string& v = (*got)[0];
    if (v != "none") {
      // "<step> <world size> <dir>"
      const size_t space = v.find(' ');
      const size_t second = space == std::string::npos ? space : v.find(' ', space + 1);
      if (second == std::string::npos) return Internal("malformed resume key \"" + v + "\"");
      found = true;
      rp.step = std::stoll(v.substr(0, space));
      rp.from_world = std::stoi(v.substr(space + 1, second - space - 1));
      rp.dir = v.substr(second + 1);
    }
  }
  if (!found) return std::optional<ResumePoint>();
  const std::string dense_path = rp.dir + "/" + kDenseFile;
  PX_ASSIGN_OR_RETURN(rp.dense, ReadDenseFile(dense_path));
  // Written with another number of workers: rank r takes the state of the
  // checkpoint's rank r mod (its world size); data readers convert their
  // positions to the new shard count (docs/RELIABILITY.md, "Resuming with
  // another number of workers").
  const int from_rank = rp.from_world > 0 ? options_.rank % rp.from_world : options_.rank;
  if (rp.from_world != options_.world_size && options_.rank == 0) {
    PX_LOG(INFO) << "job " << options_.job_id << ": the checkpoint of step " << rp.step
                 << " was written by " << rp.from_world << " worker(s); resuming on "
                 << options_.world_size;
  }
  const std::string state_path = rp.dir + "/" + RankStateFile(from_rank);
  auto state = ReadWholeFile(state_path);
  if (!state.ok()) {
    return FailedPrecondition("rank " + std::to_string(options_.rank) +
                              " has no state in the checkpoint of step " + std::to_string(rp.step) +
                              " (" + state.status().message() + ")");
  }
  PX_ASSIGN_OR_RETURN(rp.rank_state, DecodeRankState(*state, state_path));
  return std::make_optional(std::move(rp));
}

}  // namespace parallax::trainer
