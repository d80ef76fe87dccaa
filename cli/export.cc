#include "cli/export.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <vector>

#include "core/base/durable_file.h"
#include "core/ps/dynamic_file.h"
#include "core/ps/initializer.h"
#include "core/ps/partition_file.h"
#include "trainer/checkpoint_files.h"
#include "core/plan/job_plan.h"

namespace parallax::cli {
namespace {

using plan::PlannedVariable;

// NumPy format 1.0 header for a C-order array of `shape` (float32, or
// `descr` "<i8" for int64), padded so the data starts at a multiple of 64
// bytes.
std::string NpyHeader(const std::vector<int64_t>& shape, const std::string& descr = "<f4") {
  std::string dims;  // "3, 4" or "3," (a one-element tuple)
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string h = "\x93NUMPY";
  h += '\x01';
  h += '\x00';
  const uint16_t len = static_cast<uint16_t>(dict.size());
  h += static_cast<char>(len & 0xff);
  h += static_cast<char>(len >> 8);
  return h + dict;
}

// An output file written at offsets, created through a temp name and
// renamed into place once complete.
class OutFile {
 public:
  ~OutFile() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(tmp_.c_str());
    }
  }
  Status Open(const std::string& path) {
    path_ = path;
    tmp_ = path + ".tmp." + std::to_string(::getpid());
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return IoError("cannot create \"" + tmp_ + "\": " + std::strerror(errno));
    return Status::Ok();
  }
  Status WriteAt(uint64_t offset, const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return IoError("cannot write \"" + tmp_ + "\": " + std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }
  Status Finish() {
    Status st;
    if (::fsync(fd_) != 0) st = IoError("cannot fsync \"" + tmp_ + "\": " + std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
    if (st.ok() && ::rename(tmp_.c_str(), path_.c_str()) != 0)
      st = IoError("cannot rename \"" + tmp_ + "\": " + std::strerror(errno));
    if (!st.ok()) ::unlink(tmp_.c_str());
    return st;
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// A file name for `name`: unsafe characters become '_', and a name taken
// already gets the variable id appended.
std::string FileNameFor(const PlannedVariable& v, std::set<std::string>* taken) {
  std::string base;
  for (char c : v.name)
    base +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_';
  if (base.empty() || base[0] == '.') base = "var" + std::to_string(v.id);
  std::string name = base + ".npy";
  if (!taken->insert(name).second) {
    name = base + "-" + std::to_string(v.id) + ".npy";
    taken->insert(name);
  }
  return name;
}

// A PS table: initializer rows in chunks, then every partition's rows at
// their offsets, a chunk at a time.
Status WritePsTable(const std::string& ckpt_dir, const ps::VariableSpec& spec, size_t elements,
                    int64_t chunk_rows, uint64_t data_offset, OutFile* f) {
  const uint32_t dim = spec.dim;
  const uint64_t limit = elements;  // a dense variable on PS uses only its first `size` values
  std::vector<float> buf;
  for (int64_t r0 = 0; r0 < spec.rows; r0 += chunk_rows) {
    const int64_t n = std::min<int64_t>(chunk_rows, spec.rows - r0);
    buf.resize(static_cast<size_t>(n) * dim);
    for (int64_t r = 0; r < n; ++r) {
      ps::InitializeRow(spec.init, spec.id, r0 + r, dim, buf.data() + static_cast<size_t>(r) * dim);
    }
    const uint64_t first = static_cast<uint64_t>(r0) * dim;
    if (first >= limit) break;
    const uint64_t count = std::min<uint64_t>(buf.size(), limit - first);
    PX_RETURN_IF_ERROR(f->WriteAt(data_offset + first * 4, buf.data(), count * 4));
  }
  std::vector<int64_t> ids;
  for (uint32_t p = 0; p < spec.partitions; ++p) {
    const std::string path = ckpt_dir + "/" + ps::PartitionFileName(spec.id, p);
    PX_ASSIGN_OR_RETURN(auto reader, ps::PartitionFileReader::Open(path, /*verify=*/false));
    if (reader->header().dim != dim || reader->header().rows != spec.rows) {
      return FailedPrecondition("\"" + path + "\" does not hold variable \"" + spec.name +
                                "\" of the checkpoint's plan");
    }
    while (true) {
      PX_RETURN_IF_ERROR(reader->Next(static_cast<size_t>(chunk_rows), &ids, &buf));
      if (ids.empty()) break;
      for (size_t i = 0; i < ids.size(); ++i) {
        const uint64_t first = static_cast<uint64_t>(ids[i]) * dim;
        if (first >= limit) continue;
        const uint64_t count = std::min<uint64_t>(dim, limit - first);
        PX_RETURN_IF_ERROR(f->WriteAt(data_offset + first * 4, buf.data() + i * dim, count * 4));
      }
    }
  }
  return Status::Ok();
}

// A dynamic table: the rows every shard's file holds, ordered by id as an
// int64, into <base>.ids.npy (the ids) and <base>.npy (their rows, in that
// order). An id absent was never admitted or was evicted. Returns the row
// count.
StatusOr<int64_t> WriteDynamicTable(const std::string& ckpt_dir, const ps::VariableSpec& spec,
                                    const std::string& ids_path, const std::string& rows_path) {
  PX_ASSIGN_OR_RETURN(std::vector<ps::DynamicFile> files, ps::ReadDynamicFiles(ckpt_dir, spec));
  const uint32_t dim = spec.dim;
  // (id, table, slot) of every row, then one pass in id order.
  std::vector<std::unique_ptr<ps::DynamicTable>> tables;
  std::vector<std::tuple<int64_t, size_t, int64_t>> rows;
  for (const ps::DynamicFile& file : files) {
    PX_ASSIGN_OR_RETURN(std::unique_ptr<ps::DynamicTable> t, ps::TableOfFile(file, spec));
    for (uint64_t id : t->Ids()) rows.emplace_back(static_cast<int64_t>(id), tables.size(), t->Find(id));
    tables.push_back(std::move(t));
  }
  std::sort(rows.begin(), rows.end());
  const int64_t n = static_cast<int64_t>(rows.size());
  OutFile ids_file, rows_file;
  PX_RETURN_IF_ERROR(ids_file.Open(ids_path));
  PX_RETURN_IF_ERROR(rows_file.Open(rows_path));
  const std::string ids_header = NpyHeader({n}, "<i8");
  const std::string rows_header = NpyHeader({n, static_cast<int64_t>(dim)});
  std::string ids_data = ids_header, rows_data = rows_header;
  ids_data.reserve(ids_header.size() + rows.size() * 8);
  rows_data.reserve(rows_header.size() + rows.size() * dim * 4);
  for (const auto& [id, t, slot] : rows) {
    ids_data.append(reinterpret_cast<const char*>(&id), 8);
    rows_data.append(reinterpret_cast<const char*>(tables[t]->weights(slot)), size_t{dim} * 4);
  }
  PX_RETURN_IF_ERROR(ids_file.WriteAt(0, ids_data.data(), ids_data.size()));
  PX_RETURN_IF_ERROR(rows_file.WriteAt(0, rows_data.data(), rows_data.size()));
  PX_RETURN_IF_ERROR(ids_file.Finish());
  PX_RETURN_IF_ERROR(rows_file.Finish());
  return n;
}

// Why job `job_id` has nothing to export: no checkpoint was committed, or
// none of the committed ones can be read here (the directory of the newest
// is named: checkpoint_dir is shared storage that this host may not mount).
Status NoUsableCheckpoint(CoordinatorClient* coord, int64_t job_id) {
  PX_ASSIGN_OR_RETURN(std::vector<trainer::CommittedCheckpoint> committed,
                      trainer::ListCommitted(coord, job_id));
  const std::string job = "job " + std::to_string(job_id);
  if (committed.empty()) {
    return NotFound(job +
                    " has no committed checkpoint (set trainer.checkpoint_every and "
                    "trainer.checkpoint_dir in its job file)");
  }
  const trainer::CommittedCheckpoint& newest = committed.front();
  Status why = trainer::VerifyCheckpoint(newest.path, newest.manifest_sha256).status();
  return FailedPrecondition(
      job + " has " + std::to_string(committed.size()) +
      " committed checkpoints, but none can be read on this host: the newest, of step " +
      std::to_string(newest.step) + ", is in directory \"" + newest.path + "\" (" +
      why.message() + "); run export on a host that mounts the job's checkpoint_dir at that path");
}

}  // namespace

Status ExportCheckpoint(CoordinatorClient* coord, const ExportOptions& options, std::ostream& out) {
  PX_ASSIGN_OR_RETURN(auto found,
                      trainer::FindUsableCheckpoint(coord, options.job_id, options.step));
  if (!found) return NoUsableCheckpoint(coord, options.job_id);
  const trainer::CommittedCheckpoint& ckpt = found->first;
  const trainer::Manifest& manifest = found->second;
  PX_ASSIGN_OR_RETURN(plan::JobPlan plan, plan::ParseJobPlan(manifest.plan_json));
  const std::string dense_path = ckpt.path + "/" + trainer::kDenseFile;
  PX_ASSIGN_OR_RETURN(auto dense, trainer::ReadDenseFile(dense_path));
  std::map<uint32_t, const trainer::DenseEntry*> dense_by_id;
  for (const auto& e : dense) dense_by_id[e.id] = &e;
  PX_RETURN_IF_ERROR(MakeDirectories(options.out_dir));

  nlohmann::json vars = nlohmann::json::array();
  std::set<std::string> taken = {"manifest.json"};
  for (const PlannedVariable& v : plan.variables) {
    if (v.dynamic) {
      const ps::VariableSpec* spec = plan.ps.FindVariable(v.id);
      if (!spec)
        return FailedPrecondition("the checkpoint's plan has no PS spec for \"" + v.name + "\"");
      const std::string file = FileNameFor(v, &taken);
      const std::string ids = file.substr(0, file.size() - 4) + ".ids.npy";
      taken.insert(ids);
      const std::string path = options.out_dir + "/" + file;
      const std::string ids_path = options.out_dir + "/" + ids;
      PX_ASSIGN_OR_RETURN(int64_t n, WriteDynamicTable(ckpt.path, *spec, ids_path, path));
      PX_ASSIGN_OR_RETURN(std::string sha, Sha256OfFile(path));
      PX_ASSIGN_OR_RETURN(std::string ids_sha, Sha256OfFile(ids_path));
      vars.push_back({{"name", v.name},
                      {"id", v.id},
                      {"kind", "dynamic"},
                      {"path", VariablePathName(v.path)},
                      {"shape", {n, v.dim}},
                      {"dtype", "float32"},
                      {"file", file},
                      {"sha256", sha},
                      {"ids_file", ids},
                      {"ids_dtype", "int64"},
                      {"ids_sha256", ids_sha}});
      out << v.name << " -> " << path << " (" << n << " rows; their ids in " << ids_path << ")\n";
      continue;
    }
    const std::vector<int64_t> shape =
        v.sparse ? std::vector<int64_t>{v.rows, static_cast<int64_t>(v.dim)}
                 : std::vector<int64_t>{static_cast<int64_t>(v.size)};
    const size_t elements = v.sparse ? static_cast<size_t>(v.rows) * v.dim : v.size;
    const std::string file = FileNameFor(v, &taken);
    const std::string path = options.out_dir + "/" + file;
    OutFile f;
    PX_RETURN_IF_ERROR(f.Open(path));
    const std::string header = NpyHeader(shape);
    PX_RETURN_IF_ERROR(f.WriteAt(0, header.data(), header.size()));
    if (v.path == VariablePath::kPs) {
      const ps::VariableSpec* spec = plan.ps.FindVariable(v.id);
      if (!spec)
        return FailedPrecondition("the checkpoint's plan has no PS spec for \"" + v.name + "\"");
      PX_RETURN_IF_ERROR(
          WritePsTable(ckpt.path, *spec, elements, options.chunk_rows, header.size(), &f));
    } else {
      auto it = dense_by_id.find(v.id);
      if (it == dense_by_id.end() || it->second->values.size() != elements) {
        return FailedPrecondition("\"" + dense_path + "\" holds no variable \"" + v.name +
                                  "\" of " + std::to_string(elements) + " values");
      }
      PX_RETURN_IF_ERROR(f.WriteAt(header.size(), it->second->values.data(), elements * 4));
    }
    PX_RETURN_IF_ERROR(f.Finish());
    PX_ASSIGN_OR_RETURN(std::string sha, Sha256OfFile(path));
    vars.push_back({{"name", v.name},
                    {"id", v.id},
                    {"kind", v.sparse ? "sparse" : "dense"},
                    {"path", VariablePathName(v.path)},
                    {"shape", shape},
                    {"dtype", "float32"},
                    {"file", file},
                    {"sha256", sha}});
    out << v.name << " -> " << path << "\n";
  }
  nlohmann::json m = {{"format", "parallax-export"},
                      {"version", 1},
                      {"job", options.job_id},
                      {"step", ckpt.step},
                      {"attempt", ckpt.attempt},
                      {"checkpoint", ckpt.path},
                      {"variables", vars}};
  PX_RETURN_IF_ERROR(WriteFileDurably(options.out_dir + "/manifest.json", m.dump(2) + "\n"));
  out << "exported job " << options.job_id << " step " << ckpt.step << " to " << options.out_dir
      << "\n";
  return Status::Ok();
}

}  // namespace parallax::cli
