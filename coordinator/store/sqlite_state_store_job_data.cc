// The SQLite StateStore, part two: what a running job writes besides its
// state (plans, rendezvous key-value, metrics, checkpoints). Part one, with
// the transaction rules every method follows, is
// coordinator/store/sqlite_state_store.cc.
#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/store/sqlite_state_store_impl.h"
#include "coordinator/store/sqlite_util.h"

namespace parallax::coordinator::sqlite_internal {

// ---- Plans ----

Status SqliteStateStore::PutPlan(int64_t job_id, int attempt, const std::string& plan_json,
                                 int64_t now) {
  return Write([&](SqliteConnection* db) -> Status {
    PX_RETURN_IF_ERROR(CheckJob(db, job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement upsert,
        db->Prepare("INSERT INTO plans (job_id, attempt, plan_json, updated) "
                     "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (job_id, attempt) DO UPDATE SET "
                     "plan_json = excluded.plan_json, updated = excluded.updated"));
    upsert.BindInt64(1, job_id).BindInt64(2, attempt).BindText(3, plan_json).BindInt64(4, now);
    return upsert.Run();
  });
}

StatusOr<std::optional<std::string>> SqliteStateStore::GetPlan(int64_t job_id, int attempt) {
  return Read([&](SqliteConnection* db) -> StatusOr<std::optional<std::string>> {
    PX_RETURN_IF_ERROR(CheckJob(db, job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement stmt,
        db->Prepare("SELECT plan_json FROM plans WHERE job_id = ?1 AND attempt = ?2"));
    stmt.BindInt64(1, job_id).BindInt64(2, attempt);
    PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(stmt.ColumnText(0));
  });
}

// ---- Rendezvous key-value ----

Status SqliteStateStore::KvSet(const std::string& key, const std::string& value, int64_t now) {
  if (key.empty()) return InvalidArgument("key-value key is empty");
  return Write([&](SqliteConnection* db) -> Status {
    PX_ASSIGN_OR_RETURN(SqliteStatement upsert,
                        db->Prepare("INSERT INTO kv (key, value, updated) VALUES (?1, ?2, ?3) "
                                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
                                     "updated = excluded.updated"));
    upsert.BindText(1, key).BindBlob(2, value).BindInt64(3, now);
    return upsert.Run();
  });
}

StatusOr<std::optional<std::string>> SqliteStateStore::KvGet(const std::string& key) {
  return Read([&](SqliteConnection* db) -> StatusOr<std::optional<std::string>> {
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt, db->Prepare("SELECT value FROM kv WHERE key = ?1"));
    stmt.BindText(1, key);
    PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(stmt.ColumnBlob(0));
  });
}

StatusOr<int64_t> SqliteStateStore::KvCount(const std::string& prefix) {
  return Read([&](SqliteConnection* db) -> StatusOr<int64_t> {
    // A range on the primary key: [prefix, prefix with its last byte + 1).
    std::string end = prefix;
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
    if (!end.empty()) end.back() = static_cast<char>(end.back() + 1);
    PX_ASSIGN_OR_RETURN(SqliteStatement stmt,
                        db->Prepare(end.empty() ? "SELECT COUNT(*) FROM kv WHERE key >= ?1"
                                                 : "SELECT COUNT(*) FROM kv WHERE key >= ?1 AND "
                                                   "key < ?2"));
    stmt.BindText(1, prefix);
    if (!end.empty()) stmt.BindText(2, end);
    PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
    return row ? stmt.ColumnInt64(0) : int64_t{0};
  });
}

StatusOr<int64_t> SqliteStateStore::KvAdd(const std::string& key, int64_t delta, int64_t now) {
  if (key.empty()) return InvalidArgument("key-value key is empty");
  return Write([&](SqliteConnection* db) -> StatusOr<int64_t> {
    PX_ASSIGN_OR_RETURN(SqliteStatement find, db->Prepare("SELECT value FROM kv WHERE key = ?1"));
    find.BindText(1, key);
    PX_ASSIGN_OR_RETURN(bool row, find.Step());
    int64_t current = 0;
    if (row) {
      std::optional<int64_t> parsed = ParseInt64(find.ColumnBlob(0));
      if (!parsed) {
        return InvalidArgument("key " + Quote(key) +
                               " does not hold a decimal integer; KvAdd cannot add to it");
      }
      current = *parsed;
    }
    int64_t sum = 0;
    if (__builtin_add_overflow(current, delta, &sum)) {
      return InvalidArgument("key " + Quote(key) + ": " + std::to_string(current) + " + " +
                             std::to_string(delta) + " overflows a 64-bit integer");
    }
    PX_ASSIGN_OR_RETURN(SqliteStatement upsert,
                        db->Prepare("INSERT INTO kv (key, value, updated) VALUES (?1, ?2, ?3) "
                                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
                                     "updated = excluded.updated"));
    upsert.BindText(1, key).BindBlob(2, std::to_string(sum)).BindInt64(3, now);
    PX_RETURN_IF_ERROR(upsert.Run());
    return sum;
  });
}

// ---- Metrics ----

Status SqliteStateStore::RecordMetrics(const std::vector<MetricRecord>& points, int64_t now) {
  if (points.empty()) return Status::Ok();
  std::map<int64_t, int64_t> newest_step;  // job id -> highest step in `points`
  for (const MetricRecord& point : points) {
    auto [it, inserted] = newest_step.emplace(point.job_id, point.step);
    if (!inserted) it->second = std::max(it->second, point.step);
  }
  return Write([&](SqliteConnection* db) -> Status {
    for (const auto& [job_id, step] : newest_step) PX_RETURN_IF_ERROR(CheckJob(db, job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement insert,
        db->Prepare("INSERT INTO metrics (job_id, attempt, rank, step, loss, throughput, time, "
                     "metric_values) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
    for (const MetricRecord& point : points) {
      insert.BindInt64(1, point.job_id)
          .BindInt64(2, point.attempt)
          .BindInt64(3, point.rank)
          .BindInt64(4, point.step)
          .BindDouble(5, point.loss)
          .BindDouble(6, point.throughput)
          .BindInt64(7, now)
          .BindText(8, nlohmann::json(point.values).dump());
      PX_RETURN_IF_ERROR(insert.Run());
      insert.Reset();
    }
    PX_ASSIGN_OR_RETURN(SqliteStatement raise,
                        db->Prepare("UPDATE jobs SET step = ?1 WHERE id = ?2 AND step < ?1"));
    for (const auto& [job_id, step] : newest_step) {
      raise.BindInt64(1, step).BindInt64(2, job_id);
      PX_RETURN_IF_ERROR(raise.Run());
      raise.Reset();
    }
    return Status::Ok();
  });
}

StatusOr<std::vector<MetricRecord>> SqliteStateStore::ListMetrics(int64_t job_id,
                                                                  int64_t after_step, int limit) {
  PX_RETURN_IF_ERROR(CheckLimit(limit));
  return Read([&](SqliteConnection* db) -> StatusOr<std::vector<MetricRecord>> {
    PX_RETURN_IF_ERROR(CheckJob(db, job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement stmt,
        db->Prepare("SELECT attempt, rank, step, loss, throughput, time, metric_values FROM metrics "
                     "WHERE job_id = ?1 AND step > ?2 ORDER BY step, rank, attempt, id "
                     "LIMIT ?3"));
    stmt.BindInt64(1, job_id).BindInt64(2, after_step).BindInt64(3, SqlLimit(limit));
    std::vector<MetricRecord> points;
    while (true) {
      PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      MetricRecord point;
      point.job_id = job_id;
      point.attempt = static_cast<int>(stmt.ColumnInt64(0));
      point.rank = static_cast<int>(stmt.ColumnInt64(1));
      point.step = stmt.ColumnInt64(2);
      point.loss = stmt.ColumnDouble(3);
      point.throughput = stmt.ColumnDouble(4);
      point.time = stmt.ColumnInt64(5);
      // Written by RecordMetrics only; a malformed value reads as none.
      const nlohmann::json values = nlohmann::json::parse(stmt.ColumnText(6), nullptr, false);
      if (values.is_object()) {
        for (const auto& [name, value] : values.items()) {
          if (value.is_number()) point.values[name] = value.get<double>();
        }
      }
      points.push_back(point);
    }
    return points;
  });
}

// ---- Checkpoints ----

Status SqliteStateStore::CommitCheckpoint(const CheckpointRecord& checkpoint, int64_t now) {
  if (checkpoint.path.empty()) {
    return InvalidArgument("checkpoint of " + JobRef(checkpoint.job_id) + " has an empty path");
  }
  return Write([&](SqliteConnection* db) -> Status {
    PX_RETURN_IF_ERROR(CheckJob(db, checkpoint.job_id));
    // The same checkpoint committed again (CoordinatorClient retries
    // CommitCheckpoint when a reply is lost, so the first call may have been
    // applied) changes nothing: no second event, `created` kept.
    {
      PX_ASSIGN_OR_RETURN(
          SqliteStatement existing,
          db->Prepare("SELECT path, manifest_sha256 FROM checkpoints "
                       "WHERE job_id = ?1 AND attempt = ?2 AND step = ?3"));
      existing.BindInt64(1, checkpoint.job_id)
          .BindInt64(2, checkpoint.attempt)
          .BindInt64(3, checkpoint.step);
      PX_ASSIGN_OR_RETURN(bool found, existing.Step());
      if (found && existing.ColumnText(0) == checkpoint.path &&
          existing.ColumnText(1) == checkpoint.manifest_sha256) {
        return Status::Ok();
      }
    }
    // Another checkpoint of the same (attempt, step) replaces it.
    PX_ASSIGN_OR_RETURN(
        SqliteStatement upsert,
        db->Prepare("INSERT INTO checkpoints (job_id, attempt, step, path, manifest_sha256, "
                     "created) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
                     "ON CONFLICT (job_id, attempt, step) DO UPDATE SET path = excluded.path, "
                     "manifest_sha256 = excluded.manifest_sha256, created = excluded.created"));
    upsert.BindInt64(1, checkpoint.job_id)
        .BindInt64(2, checkpoint.attempt)
        .BindInt64(3, checkpoint.step)
        .BindText(4, checkpoint.path)
        .BindText(5, checkpoint.manifest_sha256)
        .BindInt64(6, now);
    PX_RETURN_IF_ERROR(upsert.Run());
    const std::string message = "step " + std::to_string(checkpoint.step) + " of attempt " +
                                std::to_string(checkpoint.attempt) + " checkpointed to '" +
                                checkpoint.path + "'";
    return InsertEvent(db, checkpoint.job_id, "checkpoint", message, now).status();
  });
}

StatusOr<std::vector<CheckpointRecord>> SqliteStateStore::ListCheckpoints(int64_t job_id) {
  return Read([&](SqliteConnection* db) -> StatusOr<std::vector<CheckpointRecord>> {
    PX_RETURN_IF_ERROR(CheckJob(db, job_id));
    PX_ASSIGN_OR_RETURN(
        SqliteStatement stmt,
        db->Prepare("SELECT attempt, step, path, manifest_sha256, created FROM checkpoints "
                     "WHERE job_id = ?1 ORDER BY step DESC, attempt DESC"));
    stmt.BindInt64(1, job_id);
    std::vector<CheckpointRecord> checkpoints;
    while (true) {
      PX_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      CheckpointRecord checkpoint;
      checkpoint.job_id = job_id;
      checkpoint.attempt = static_cast<int>(stmt.ColumnInt64(0));
      checkpoint.step = stmt.ColumnInt64(1);
      checkpoint.path = stmt.ColumnText(2);
      checkpoint.manifest_sha256 = stmt.ColumnText(3);
      checkpoint.created = stmt.ColumnInt64(4);
      checkpoints.push_back(std::move(checkpoint));
    }
    return checkpoints;
  });
}

}  // namespace parallax::coordinator::sqlite_internal
