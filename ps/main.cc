// parallax-ps: one PS shard server. See ps/README.md.
//
// Under an agent it reads PARALLAX_JOB_ID, PARALLAX_ATTEMPT, PARALLAX_SHARD,
// PARALLAX_COORDINATOR, PARALLAX_BIND_ADDR and PARALLAX_TOKEN, fetches the
// plan from the coordinator, binds port 0 on the bind address and publishes
// its endpoint under job/<id>/<attempt>/ps/<shard>. A shard started again
// alone after it was lost (PARALLAX_SHARD_GENERATION > 1) first loads its
// partitions from the job's newest committed checkpoint and publishes under
// its generation (schemas/ps_wire.md, "Fencing"). Flags override the
// environment; tests pass --plan FILE --shard N --listen EP --port-file F.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/base/daemon.h"
#include "core/base/heap_retention.h"
#include "core/base/logging.h"
#include "core/config/job_config.h"
#include "core/daemon/daemon_flags.h"
#include "core/plan/job_plan.h"
#include "core/ps/discovery.h"
#include "ps/shard_server.h"
#include "ps/stats_reporter.h"

namespace {

using namespace parallax;
using namespace parallax::ps;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// `dir`/updates-applied, or "" without a directory.
std::string InDir(const std::string& dir) { return dir.empty() ? "" : dir + "/updates-applied"; }

// Everything the command line sets besides the daemon flags; the defaults
// come from the environment an agent gives a shard.
struct Flags {
  std::string plan_file, listen, port_file;
  // The shard's count of updates applied (ps/updates_file.h), and a next
  // generation's predecessor's: in their task directories under an agent.
  std::string updates_file = InDir(Env("PARALLAX_TASK_DIR"));
  std::string previous_updates_file = InDir(Env("PARALLAX_SHARD_PREVIOUS_DIR"));
  std::string coordinator = Env("PARALLAX_COORDINATOR");
  std::string bind_addr = Env("PARALLAX_BIND_ADDR");
  int64_t job_id = 0, max_message_mb = 256, plan_timeout_ms = 300'000, prefault_mb = 256;
  int32_t attempt = 0;
  uint32_t shard = 0, generation = 0;

  Flags() {
    if (!Env("PARALLAX_JOB_ID").empty()) job_id = std::atoll(Env("PARALLAX_JOB_ID").c_str());
    if (!Env("PARALLAX_ATTEMPT").empty()) attempt = std::atoi(Env("PARALLAX_ATTEMPT").c_str());
    if (!Env("PARALLAX_SHARD").empty()) {
      shard = static_cast<uint32_t>(std::atoi(Env("PARALLAX_SHARD").c_str()));
    }
    if (!Env("PARALLAX_SHARD_GENERATION").empty()) {
      generation = static_cast<uint32_t>(std::atoi(Env("PARALLAX_SHARD_GENERATION").c_str()));
    }
  }
};

void AddFlags(CLI::App* app, Flags* f) {
  app->add_option("--plan", f->plan_file,
                  "plan JSON file (instead of fetching it from the coordinator)");
  app->add_option("--shard", f->shard, "this shard's index (default: $PARALLAX_SHARD)");
  app->add_option("--listen", f->listen,
                  "ZeroMQ endpoint to bind (default: tcp://$PARALLAX_BIND_ADDR:0, port 0 = any)");
  app->add_option("--port-file", f->port_file,
                  "write the bound endpoint to this file once listening");
  app->add_option("--coordinator", f->coordinator,
                  "coordinator HOST:PORT (default: $PARALLAX_COORDINATOR)");
  app->add_option("--job", f->job_id, "job id (default: $PARALLAX_JOB_ID)");
  app->add_option("--attempt", f->attempt, "job attempt (default: $PARALLAX_ATTEMPT)");
  app->add_option("--generation", f->generation,
                  "this shard's generation in the attempt, for fencing; above 1: started again "
                  "after it was lost (default: $PARALLAX_SHARD_GENERATION; 0: not checked)");
  app->add_option("--updates-file", f->updates_file,
                  "keep the count of updates applied in this file, for a next generation "
                  "(default: $PARALLAX_TASK_DIR/updates-applied; \"\": none)");
  app->add_option("--previous-updates-file", f->previous_updates_file,
                  "a next generation: its predecessor's updates file, to count the updates lost "
                  "(default: $PARALLAX_SHARD_PREVIOUS_DIR/updates-applied)");
  app->add_option("--max-message-mb", f->max_message_mb, "largest accepted request")
      ->capture_default_str();
  app->add_option(
         "--prefault-mb", f->prefault_mb,
         "commit each table array (weights, an optimizer slot) of this shard's share up to "
         "this size at start, on huge pages, and of a dynamic table with max_rows its "
         "share of the budget (faster row access; 0: commit on first touch)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app->add_option("--plan-timeout-ms", f->plan_timeout_ms, "how long to wait for the plan")
      ->capture_default_str();
}

// The PS part of the job's plan (core/plan/job_plan.h's one reader), from
// --plan FILE or the coordinator, into `options`; 0, or the exit code after
// saying why not.
int LoadPlan(const Flags& f, CoordinatorClient* coord, ShardServerOptions* options) {
  std::string json;
  std::string from;
  if (!f.plan_file.empty()) {
    std::ifstream in(f.plan_file);
    if (!in) {
      std::cerr << "parallax-ps: cannot read plan file \"" << f.plan_file << "\"\n";
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    json = text.str();
    from = f.plan_file;
  } else if (coord == nullptr) {
    std::cerr << "parallax-ps: give --plan FILE or a coordinator (--coordinator / "
                 "$PARALLAX_COORDINATOR)\n";
    return 2;
  } else {
    // Retried across a coordinator restart (CoordinatorClient "Retries").
    StatusOr<std::string> fetched = coord->GetPlan(f.job_id, f.attempt, f.plan_timeout_ms);
    if (!fetched.ok()) {
      std::cerr << "parallax-ps: fetching the plan of job " << f.job_id << ": "
                << fetched.status().ToString() << "\n";
      return 1;
    }
    json = std::move(fetched).value();
    from = "the plan of job " + std::to_string(f.job_id);
  }
  StatusOr<plan::JobPlan> plan = plan::ParseJobPlan(json);
  if (!plan.ok()) {
    std::cerr << "parallax-ps: " << from << ": " << plan.status().ToString() << "\n";
    return f.plan_file.empty() ? 1 : 2;
  }
  options->shard.plan = std::move(plan->ps);
  return 0;
}

// A shard started again after it was lost: the job's newest committed
// checkpoint, whose partitions it loads before serving ("" when the job has
// none: the partitions start from their initializer). 0, or the exit code.
int FindCheckpoint(const Flags& f, CoordinatorClient* coord, std::string* dir, int64_t* step) {
  auto listed = coord->ListCheckpoints(f.job_id);
  if (!listed.ok()) {
    std::cerr << "parallax-ps: listing the checkpoints of job " << f.job_id << ": "
              << listed.status().ToString() << "\n";
    return 1;
  }
  const rpc::CheckpointInfo* newest = nullptr;
  for (const rpc::CheckpointInfo& c : *listed) {
    if (newest == nullptr || c.step > newest->step) newest = &c;
  }
  if (newest == nullptr) {
    PX_LOG(WARNING) << "PS shard \"" << f.shard << "\" generation " << f.generation
                    << ": the job has no checkpoint; its partitions start from the initializer "
                       "(every update since the job started is lost)";
    return 0;
  }
  *dir = newest->path;
  *step = newest->step;
  PX_LOG(INFO) << "PS shard \"" << f.shard << "\" generation " << f.generation
               << " loads the checkpoint of step " << newest->step << " from \"" << *dir << "\"";
  return 0;
}

// With a control-plane secret the data plane uses CURVE: only clients whose
// keys holders of the secret published for this job and attempt get in
// (core/ps/curve.h). The ZAP thread asks the coordinator on its own client
// (`zap_coord`). The job file may turn it off ([ps] curve = false), for
// trusted networks. 0, or the exit code after saying why not.
int SetUpCurve(const Flags& f, const std::string& token, CoordinatorClient* coord,
               std::unique_ptr<CoordinatorClient>* zap_coord, ShardServerOptions* options) {
  bool curve = !token.empty();
  if (curve && !Env("PARALLAX_JOB_FILE").empty()) {
    JobLoadOptions load;
    load.check_paths = false;
    auto job = LoadJobConfig(Env("PARALLAX_JOB_FILE"), load);
    if (!job.ok()) {
      std::cerr << "parallax-ps: " << job.status().message() << "\n";
      return 2;
    }
    curve = job->ps.curve;
  }
  if (token.empty() && options->listen.rfind("tcp://", 0) == 0) {
    // Without a secret the shard has no CURVE: anyone who reaches it may push.
    std::string host = options->listen.substr(6, options->listen.rfind(':') - 6);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    std::string exposed = ExposureWarning("parallax-ps", host, options->listen, false);
    if (!exposed.empty()) PX_LOG(WARNING) << exposed;
  }
  if (coord == nullptr || !curve) return 0;
  CoordinatorClientOptions zopts = coord->options();
  zopts.client_name += "-zap";
  auto c = CoordinatorClient::Connect(zopts);
  if (!c.ok()) {
    std::cerr << "parallax-ps: " << c.status().ToString() << "\n";
    return 1;
  }
  *zap_coord = std::move(c).value();
  options->curve.enabled = true;
  CoordinatorClient* z = zap_coord->get();
  const int64_t job_id = f.job_id;
  const int32_t attempt = f.attempt;
  options->curve.authorize = [z, job_id, attempt](const std::string& key) {
    return IsClientCurveKeyPublished(z, job_id, attempt, key, /*timeout_ms=*/0);
  };
  return 0;
}

// Publishes the shard's CURVE key and endpoint to the coordinator and to
// --port-file; 0, or the exit code after saying why not.
int Publish(const Flags& f, CoordinatorClient* coord, ShardServer& server) {
  const std::string endpoint = server.endpoint();
  // A shard started again alone publishes under its generation only.
  const bool by_generation = coord != nullptr && f.generation > 1;
  if (by_generation) {
    Status st = PublishShardGeneration(coord, f.job_id, f.attempt, f.shard, f.generation, endpoint,
                                       server.curve_public_key());
    if (!st.ok()) {
      std::cerr << "parallax-ps: publishing generation " << f.generation << ": " << st.ToString()
                << "\n";
      return 1;
    }
  }
  if (coord && !by_generation && !server.curve_public_key().empty()) {
    Status st =
        PublishShardCurveKey(coord, f.job_id, f.attempt, f.shard, server.curve_public_key());
    if (!st.ok()) {
      std::cerr << "parallax-ps: publishing the CURVE key: " << st.ToString() << "\n";
      return 1;
    }
  }
  if (coord && !by_generation) {
    Status st = PublishShardEndpoint(coord, f.job_id, f.attempt, f.shard, endpoint);
    if (!st.ok()) {
      std::cerr << "parallax-ps: publishing the endpoint: " << st.ToString() << "\n";
      return 1;
    }
  }
  if (!f.port_file.empty()) {
    if (Status s = WriteFileAtomically(f.port_file, endpoint + "\n"); !s.ok()) {
      std::cerr << "parallax-ps: --port-file: " << s.message() << "\n";
      return 1;
    }
  }
  return 0;
}

// Serves until a termination signal; the exit code.
int Serve(const Flags& f, const DaemonSettings& settings) {
  // Every step's frames reuse the last step's pages (core/base/heap_retention.h).
  if (Status st = RetainFreedHeapMemory(); !st.ok()) PX_LOG(WARNING) << st.ToString();
  const std::string& token = settings.secret;
  sigset_t signals = BlockTerminationSignals();

  std::unique_ptr<CoordinatorClient> coord;
  if (!f.coordinator.empty()) {
    CoordinatorClientOptions copts;
    copts.address = f.coordinator;
    copts.auth_token = token;
    copts.tls_ca_file = settings.tls_ca_file;
    copts.client_name = "ps-" + std::to_string(f.shard);
    auto c = CoordinatorClient::Connect(copts);
    if (!c.ok()) {
      std::cerr << "parallax-ps: " << c.status().ToString() << "\n";
      return 1;
    }
    coord = std::move(c).value();
  }
  ShardServerOptions options;
  if (int code = LoadPlan(f, coord.get(), &options); code != 0) return code;
  options.shard.shard = f.shard;
  options.shard.attempt = static_cast<uint32_t>(f.attempt);
  options.shard.generation = f.generation;
  if (f.generation > 1 && coord) {
    const int code = FindCheckpoint(f, coord.get(), &options.load_checkpoint, &options.load_step);
    if (code != 0) return code;
  }
  options.updates_file = f.updates_file;
  options.previous_updates_file = f.previous_updates_file;
  options.shard.limits.max_message_bytes = static_cast<size_t>(f.max_message_mb) << 20;
  options.shard.prefault_bytes = static_cast<size_t>(f.prefault_mb) << 20;
  options.listen =
      !f.listen.empty()
          ? f.listen
          : "tcp://" + (f.bind_addr.empty() ? std::string("127.0.0.1") : f.bind_addr) + ":0";
  std::unique_ptr<CoordinatorClient> zap_coord;
  if (int code = SetUpCurve(f, token, coord.get(), &zap_coord, &options); code != 0) return code;

  auto server = ShardServer::Start(std::move(options));
  if (!server.ok()) {
    std::cerr << "parallax-ps: " << server.status().ToString() << "\n";
    return 1;
  }
  if (int code = Publish(f, coord.get(), **server); code != 0) return code;
  PX_LOG(INFO) << "PS shard \"" << f.shard << "\" serving on \"" << (*server)->endpoint() << "\""
               << ((*server)->curve_public_key().empty() ? "" : " with CURVE");
  // The shard's counters go to the coordinator (its /metrics); `coord` is
  // the reporter's from here on.
  std::unique_ptr<StatsReporter> reporter;
  if (coord) {
    ShardServer* s = server->get();
    reporter = std::make_unique<StatsReporter>(
        StatsReporterOptions{f.job_id, f.attempt, static_cast<int32_t>(f.shard)},
        [s] { return s->Snapshot(); }, coord.get());
    reporter->Start();
  }
  int sig = 0;
  sigwait(&signals, &sig);
  PX_LOG(INFO) << "PS shard \"" << f.shard << "\" stopping on signal " << sig;
  if (reporter) reporter->Stop();
  (*server)->Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Parallax PS shard: holds partitions of sparse variables and applies their optimizer"};
  DaemonFlagsSpec spec;
  spec.program = "parallax-ps";
  spec.serves = false;
  spec.calls_coordinator = true;
  spec.secret_help_suffix =
      " (default: $PARALLAX_TOKEN, set by the agent); with it, the shard's socket takes CURVE "
      "clients only";
  DaemonFlags daemon_flags(spec);
  daemon_flags.AddTo(&app);
  Flags flags;
  AddFlags(&app, &flags);
  DaemonSettings settings;
  if (std::optional<int> code = daemon_flags.ParseCommandLine(&app, argc, argv, &settings)) {
    return *code;
  }
  return Serve(flags, settings);
}
