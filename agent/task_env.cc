#include "agent/task_env.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>

namespace parallax::agent {
namespace {

bool IsReserved(const std::string& name) { return name.rfind("PARALLAX_", 0) == 0; }

bool ParseInt(const std::string& text, int64_t* out) {
  if (text.empty() || text.size() > 18) return false;
  size_t start = text[0] == '-' ? 1 : 0;
  if (start == text.size() || text.find_first_not_of("0123456789", start) != std::string::npos) {
    return false;
  }
  *out = std::stoll(text);
  return true;
}

// The device a rank's slot index names: the index-th entry of the agent's
// own CUDA_VISIBLE_DEVICES when it has one (Slurm's GPUs of the step, say
// "2,3": slot 1 is device 3), else the index itself.
std::string DeviceOfSlot(const std::string& index, const std::string& agent_visible) {
  int64_t i = 0;
  if (agent_visible.empty() || !ParseInt(index, &i) || i < 0) return index;
  std::vector<std::string> devices;
  size_t start = 0;
  for (size_t comma; (comma = agent_visible.find(',', start)) != std::string::npos;
       start = comma + 1) {
    devices.push_back(agent_visible.substr(start, comma - start));
  }
  devices.push_back(agent_visible.substr(start));
  return i < static_cast<int64_t>(devices.size()) ? devices[i] : index;
}

}  // namespace

std::string RoleName(rpc::TaskRole::type role) {
  return role == rpc::TaskRole::PS ? "ps" : "trainer";
}

std::string TaskDirName(const rpc::TaskKey& key) {
  // A shard's next generation has a directory of its own (the dead
  // process's log stays): "-g<N>".
  const bool later = key.__isset.generation && key.generation > 1;
  return std::to_string(key.job_id) + "-" + std::to_string(key.attempt) + "-" +
         RoleName(key.role) + "-" + std::to_string(key.index) +
         (later ? "-g" + std::to_string(key.generation) : "");
}

std::optional<rpc::TaskKey> ParseTaskDirName(const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dash = name.find('-', start);
    parts.push_back(name.substr(start, dash - start));
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  if (parts.size() != 4 && parts.size() != 5) return std::nullopt;
  int64_t generation = 0;
  if (parts.size() == 5 &&
      (parts[4].size() < 2 || parts[4][0] != 'g' || !ParseInt(parts[4].substr(1), &generation) ||
       generation < 2 || generation > INT32_MAX)) {
    return std::nullopt;
  }
  int64_t job = 0, attempt = 0, index = 0;
  if (!ParseInt(parts[0], &job) || !ParseInt(parts[1], &attempt) || !ParseInt(parts[3], &index)) {
    return std::nullopt;
  }
  rpc::TaskKey key;
  key.job_id = job;
  key.attempt = static_cast<int32_t>(attempt);
  key.index = static_cast<int32_t>(index);
  if (parts[2] == "trainer") {
    key.role = rpc::TaskRole::TRAINER;
  } else if (parts[2] == "ps") {
    key.role = rpc::TaskRole::PS;
  } else {
    return std::nullopt;
  }
  if (generation > 1) key.__set_generation(static_cast<int32_t>(generation));
  if (TaskDirName(key) != name) return std::nullopt;  // e.g. leading zeros
  return key;
}

std::string DescribeTask(const rpc::TaskKey& key) {
  return "job " + std::to_string(key.job_id) + " attempt " + std::to_string(key.attempt) + " " +
         RoleName(key.role) + " " + std::to_string(key.index) +
         (key.__isset.generation && key.generation > 1
              ? " generation " + std::to_string(key.generation)
              : "");
}

std::vector<std::string> BuildTaskEnv(const rpc::TaskAssignment& a, const TaskEnvContext& context,
                                      const std::vector<std::string>& inherited,
                                      std::vector<std::string>* ignored) {
  std::map<std::string, std::string> env;
  for (const std::string& entry : inherited) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string name = entry.substr(0, eq);
    if (IsReserved(name)) continue;
    env[name] = entry.substr(eq + 1);
  }
  const bool trainer = a.key.role != rpc::TaskRole::PS;
  auto set = [&](const char* name, int64_t value) { env[name] = std::to_string(value); };
  set("PARALLAX_JOB_ID", a.key.job_id);
  set("PARALLAX_ATTEMPT", a.key.attempt);
  env["PARALLAX_ROLE"] = RoleName(a.key.role);
  set("PARALLAX_WORLD_SIZE", a.world_size);
  set("PARALLAX_HOST_INDEX", a.host_index);
  set("PARALLAX_NUM_HOSTS", a.num_hosts);
  set("PARALLAX_NUM_SHARDS", a.num_shards);
  if (trainer) {
    set("PARALLAX_RANK", a.key.index);
    set("PARALLAX_LOCAL_RANK", a.local_rank);
    set("PARALLAX_LOCAL_WORLD_SIZE", a.local_world_size);
  } else {
    set("PARALLAX_SHARD", a.key.index);
    if (a.key.__isset.generation && a.key.generation > 1) {
      set("PARALLAX_SHARD_GENERATION", a.key.generation);
      if (!context.previous_task_dir.empty()) {
        env["PARALLAX_SHARD_PREVIOUS_DIR"] = context.previous_task_dir;
      }
    }
  }
  env["PARALLAX_COORDINATOR"] = context.coordinator;
  env["PARALLAX_BIND_ADDR"] = context.bind_addr;
  env["PARALLAX_TOKEN"] = context.token;
  if (!context.tls_ca_file.empty()) env["PARALLAX_TLS_CA"] = context.tls_ca_file;
  env["PARALLAX_JOB_FILE"] = context.job_file;
  // Relative paths in the job file ([model] data, checkpoint_dir) resolve
  // against the submitted file's directory, not the task's copy.
  if (std::filesystem::path(a.job_path).is_absolute()) env["PARALLAX_JOB_SOURCE"] = a.job_path;
  env["PARALLAX_TASK_DIR"] = context.task_dir;
  if (a.__isset.cuda_visible_devices) {
    env["CUDA_VISIBLE_DEVICES"] = DeviceOfSlot(a.cuda_visible_devices, env["CUDA_VISIBLE_DEVICES"]);
  }
  if (trainer && context.cpu_cores > 0) {
    const int threads = std::max(1, context.cpu_cores / std::max(1, a.local_world_size));
    for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
      env.try_emplace(name, std::to_string(threads));
  }
  for (const auto& [name, value] : a.env) {
    if (name.empty() || name.find('=') != std::string::npos || IsReserved(name)) {
      if (ignored) ignored->push_back(name);
      continue;
    }
    env[name] = value;
  }
  if (trainer && !context.python_path.empty()) {
    auto it = env.find("PYTHONPATH");
    env["PYTHONPATH"] = context.python_path +
                        (it == env.end() || it->second.empty() ? "" : ":" + it->second);
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

std::vector<std::string> ResolveCommand(const rpc::TaskAssignment& a, const std::string& bin_dir) {
  if (a.command.empty()) {
    std::string binary = a.key.role == rpc::TaskRole::PS ? "parallax-ps" : "parallax-trainer";
    return {(std::filesystem::path(bin_dir) / binary).string()};
  }
  std::vector<std::string> argv = a.command;
  const std::string& program = argv[0];
  if (!program.empty() && program[0] != '/' && program.find('/') != std::string::npos) {
    std::filesystem::path base = std::filesystem::path(a.job_path).parent_path();
    std::filesystem::path resolved = (base / program).lexically_normal();
    if (resolved.is_relative()) resolved = std::filesystem::absolute(resolved).lexically_normal();
    argv[0] = resolved.string();
  }
  return argv;
}

}  // namespace parallax::agent
