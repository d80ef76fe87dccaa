// SessionOptions::FromEnvironment: the one place libparallax reads the
// environment (schemas/task_env.md) and the job file.
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/config/job_config.h"
#include "parallax/session.h"

namespace parallax {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Reads an integer variable; keeps *out when unset.
Status EnvInt(const char* name, int64_t min, int64_t* out) {
  const std::string v = Env(name);
  if (v.empty()) return Status::Ok();
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || x < min) {
    return InvalidArgument("environment variable " + std::string(name) + "=\"" + v +
                           "\" is not an integer >= " + std::to_string(min));
  }
  *out = x;
  return Status::Ok();
}

Status EnvInt(const char* name, int64_t min, int* out) {
  int64_t x = *out;
  PX_RETURN_IF_ERROR(EnvInt(name, min, &x));
  if (x > INT_MAX)
    return InvalidArgument("environment variable " + std::string(name) + " is too large");
  *out = static_cast<int>(x);
  return Status::Ok();
}

}  // namespace

StatusOr<SessionOptions> SessionOptions::FromEnvironment() {
  SessionOptions o;
  PX_RETURN_IF_ERROR(EnvInt("PARALLAX_JOB_ID", 0, &o.job_id));
  PX_RETURN_IF_ERROR(EnvInt("PARALLAX_ATTEMPT", 0, &o.attempt));
  PX_RETURN_IF_ERROR(EnvInt("PARALLAX_RANK", 0, &o.rank));
  PX_RETURN_IF_ERROR(EnvInt("PARALLAX_WORLD_SIZE", 1, &o.world_size));
  PX_RETURN_IF_ERROR(EnvInt("PARALLAX_LOCAL_RANK", 0, &o.local_rank));
  PX_RETURN_IF_ERROR(EnvInt("PARALLAX_LOCAL_WORLD_SIZE", 1, &o.local_world_size));
  PX_RETURN_IF_ERROR(EnvInt("PARALLAX_HOST_INDEX", 0, &o.host_index));
  PX_RETURN_IF_ERROR(EnvInt("PARALLAX_NUM_HOSTS", 1, &o.num_hosts));
  PX_RETURN_IF_ERROR(EnvInt("PARALLAX_NUM_SHARDS", 0, &o.num_shards));
  o.coordinator = Env("PARALLAX_COORDINATOR");
  if (!Env("PARALLAX_BIND_ADDR").empty()) o.bind_address = Env("PARALLAX_BIND_ADDR");
  o.token = Env("PARALLAX_TOKEN");
  o.tls_ca_file = Env("PARALLAX_TLS_CA");
  if (o.rank >= o.world_size) {
    return InvalidArgument("PARALLAX_RANK=" + std::to_string(o.rank) +
                           " is not below PARALLAX_WORLD_SIZE=" + std::to_string(o.world_size));
  }
  const std::string job_file = Env("PARALLAX_JOB_FILE");
  if (!job_file.empty()) {
    JobLoadOptions load;
    load.check_paths = false;  // paths are the model's business
    // The copy's text, with relative paths resolved against the directory
    // the job was submitted from (PARALLAX_JOB_SOURCE) when known.
    const std::string source = Env("PARALLAX_JOB_SOURCE");
    std::ifstream in(job_file);
    if (!in) {
      return IoError("cannot read the job file '" + job_file + "' (PARALLAX_JOB_FILE)");
    }
    std::stringstream text;
    text << in.rdbuf();
    PX_ASSIGN_OR_RETURN(o.config,
                        ParseJobConfig(text.str(), source.empty() ? job_file : source, load));
  }
  return o;
}

}  // namespace parallax
