#include "trainer/checkpoint_files.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/base/durable_file.h"
#include "core/base/logging.h"
#include "core/rpc/coordinator_client.h"

namespace parallax::trainer {

namespace fs = std::filesystem;

std::string JobCheckpointDir(const std::string& root, int64_t job_id) {
  return root + "/job-" + std::to_string(job_id);
}

std::string StepCheckpointDir(const std::string& root, int64_t job_id, int64_t step) {
  return JobCheckpointDir(root, job_id) + "/step-" + std::to_string(step);
}

std::string RankStateFile(int rank) { return "rank-" + std::to_string(rank) + ".state"; }

std::string ManifestToJson(const Manifest& m) {
  nlohmann::json j;
  j["format"] = 1;
  j["job_id"] = m.job_id;
  j["attempt"] = m.attempt;
  j["step"] = m.step;
  j["world_size"] = m.world_size;
  j["plan"] = nlohmann::json::parse(m.plan_json);
  nlohmann::json files = nlohmann::json::array();
  for (const ManifestFile& f : m.files) {
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  }
  j["files"] = std::move(files);
  return j.dump(2) + "\n";
}

StatusOr<Manifest> ParseManifest(std::string_view json, const std::string& source) {
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    if (j.at("format").get<int>() != 1)
      return FailedPrecondition("\"" + source + "\" is a manifest of another format");
    Manifest m;
    m.job_id = j.at("job_id").get<int64_t>();
    m.attempt = j.at("attempt").get<int>();
    m.step = j.at("step").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.plan_json = j.at("plan").dump();
    for (const auto& f : j.at("files")) {
      ManifestFile mf;
      mf.name = f.at("name").get<std::string>();
      mf.bytes = f.at("bytes").get<uint64_t>();
      mf.sha256 = f.at("sha256").get<std::string>();
      if (mf.name.empty() || mf.name.find('/') != std::string::npos || mf.name[0] == '.') {
        return FailedPrecondition("\"" + source + "\" lists a file name \"" + mf.name +
                                  "\" outside its directory");
      }
      m.files.push_back(std::move(mf));
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    return FailedPrecondition("\"" + source + "\" is not a valid checkpoint manifest: " + e.what());
  }
}

StatusOr<ManifestFile> DescribeFile(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return IoError("checkpoint file \"" + path + "\" is missing: " + ec.message());
  PX_ASSIGN_OR_RETURN(std::string sha, Sha256OfFile(path));
  return ManifestFile{name, static_cast<uint64_t>(size), std::move(sha)};
}

StatusOr<Manifest> VerifyCheckpoint(const std::string& dir, const std::string& manifest_sha256) {
  const std::string path = dir + "/" + kManifestFile;
  auto text = ReadWholeFile(path);
  if (!text.ok()) {
    return FailedPrecondition("checkpoint \"" + dir + "\" has no readable manifest (" +
                              text.status().message() + ")");
  }
  if (!manifest_sha256.empty() && Sha256Hex(*text) != manifest_sha256) {
    return FailedPrecondition("manifest \"" + path +
                              "\" does not match the SHA-256 the coordinator recorded");
  }
  PX_ASSIGN_OR_RETURN(Manifest m, ParseManifest(*text, path));
  for (const ManifestFile& f : m.files) {
    auto got = DescribeFile(dir, f.name);
    if (!got.ok()) return FailedPrecondition(got.status().message());
    if (got->bytes != f.bytes || got->sha256 != f.sha256) {
      return FailedPrecondition("checkpoint file \"" + dir + "/" + f.name +
                                "\" differs from its manifest (size or SHA-256): it is corrupt");
    }
  }
  return m;
}

StatusOr<std::vector<CommittedCheckpoint>> ListCommitted(CoordinatorClient* coord, int64_t job_id) {
  StatusOr<std::vector<rpc::CheckpointInfo>> listed = coord->ListCheckpoints(job_id);
  if (!listed.ok()) {
    return listed.status().WithContext("listing the checkpoints of job " + std::to_string(job_id));
  }
  const std::vector<rpc::CheckpointInfo>& infos = *listed;
  std::vector<CommittedCheckpoint> out;
  for (const auto& i : infos) out.push_back({i.step, i.attempt, i.path, i.manifest_sha256});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

StatusOr<std::optional<std::pair<CommittedCheckpoint, Manifest>>> FindUsableCheckpoint(
    CoordinatorClient* coord, int64_t job_id, std::optional<int64_t> step) {
  PX_ASSIGN_OR_RETURN(std::vector<CommittedCheckpoint> committed, ListCommitted(coord, job_id));
  for (const CommittedCheckpoint& c : committed) {
    if (step && c.step != *step) continue;
    auto m = VerifyCheckpoint(c.path, c.manifest_sha256);
    if (m.ok() && (m->job_id != job_id || m->step != c.step)) {
      m = FailedPrecondition("manifest in \"" + c.path + "\" is of job " +
                             std::to_string(m->job_id) + " step " + std::to_string(m->step));
    }
    if (m.ok()) return std::make_optional(std::make_pair(c, std::move(m).value()));
    if (step) return m.status();
    PX_LOG(WARNING) << "job " << job_id << ": skipping checkpoint of step " << c.step << ": "
                    << m.status().ToString();
  }
  if (step) {
    return NotFound("job " + std::to_string(job_id) + " has no committed checkpoint of step " +
                    std::to_string(*step));
  }
  return std::optional<std::pair<CommittedCheckpoint, Manifest>>();
}

void PruneCheckpoints(const std::string& root, int64_t job_id,
                      const std::vector<CommittedCheckpoint>& committed, int keep) {
  if (committed.empty()) return;
  std::vector<int64_t> kept;
  for (const CommittedCheckpoint& c : committed) {
    if (static_cast<int>(kept.size()) < keep) kept.push_back(c.step);
  }
  const int64_t newest = committed.front().step;
  const std::string job_dir = JobCheckpointDir(root, job_id);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(job_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    int64_t step = -1;
    try {
      step = std::stoll(name.substr(5));
    } catch (...) {
      continue;
    }
    if (step >= newest || std::find(kept.begin(), kept.end(), step) != kept.end()) continue;
    std::error_code rm;
    fs::remove_all(entry.path(), rm);
    if (rm) {
      PX_LOG(WARNING) << "job " << job_id << ": cannot delete old checkpoint \""
                      << entry.path().string() << "\": " << rm.message();
    }
  }
}

}  // namespace parallax::trainer
