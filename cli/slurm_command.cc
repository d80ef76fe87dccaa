#include "cli/slurm_command.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <toml++/toml.h>

#include "cli/cli.h"
#include "cli/job_file.h"
#include "cli/job_watch.h"
#include "core/config/job_config.h"
#include "core/config/job_edit.h"
#include "core/rpc/coordinator_client.h"

namespace parallax::cli {
namespace {

namespace fs = std::filesystem;

constexpr char kCommand[] = "parallax slurm";
// The per-allocation secret, from `parallax slurm` to each node's
// `parallax slurm-agent` through srun's environment (never a command line).
constexpr char kSecretEnv[] = "PARALLAX_SLURM_SECRET";
// The name of the srun step of the agents.
constexpr char kAgentStep[] = "parallax-agents";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Runs argv (a program looked up in PATH) and returns its stdout; nullopt
// (with `why` set to its stderr or the error) unless it exited 0.
std::optional<std::string> Capture(const std::vector<std::string>& argv, std::string* why) {
  int out[2], errp[2];
  if (pipe(out) != 0 || pipe(errp) != 0) {
    *why = std::strerror(errno);
    return std::nullopt;
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(errp[1], 2);
    close(out[0]);
    close(errp[0]);
    std::vector<char*> ptrs;
    std::vector<std::string> args = argv;
    for (auto& a : args) ptrs.push_back(a.data());
    ptrs.push_back(nullptr);
    execvp(ptrs[0], ptrs.data());
    std::fprintf(stderr, "cannot execute %s: %s", ptrs[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(errp[1]);
  auto drain = [](int fd) {
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) text.append(buf, n);
    close(fd);
    return text;
  };
  std::string text = drain(out[0]);
  std::string errors = drain(errp[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *why = errors.empty() ? "exit status " + std::to_string(WEXITSTATUS(status)) : errors;
    while (!why->empty() && why->back() == '\n') why->pop_back();
    return std::nullopt;
  }
  return text;
}

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::vector<std::string> SplitComma(const std::string& text) {
  std::vector<std::string> parts;
  std::istringstream in(text);
  for (std::string p; std::getline(in, p, ',');) {
    if (!p.empty()) parts.push_back(p);
  }
  return parts;
}

std::string JoinComma(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : ",") + p;
  return s;
}

// A host's IPv4 address: `host` itself when it is one, else its first
// address by name; "" when it has none.
std::string Ipv4(const std::string& host) {
  in_addr a;
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return "";
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
  freeaddrinfo(res);
  return buf;
}

// A positive count from the start of a Slurm variable ("4(x3)" -> 4; "" or
// not a number -> 0).
int LeadingCount(const std::string& text) {
  int n = 0;
  size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    n = n * 10 + (text[i] - '0');
    if (n > 1'000'000) return 0;
  }
  return i == 0 ? 0 : n;
}

// What the allocation gives.
struct Allocation {
  std::string job_id;
  std::string batch_node;             // where this command runs ($SLURMD_NODENAME)
  std::vector<std::string> nodes;     // in the order scontrol lists them
  std::map<std::string, std::string> addr;  // node -> NodeAddr
  int tasks_per_node = 1;
  std::string tasks_per_node_from;    // for messages
};

// Reads the allocation; nullopt after saying what is wrong.
std::optional<Allocation> ReadAllocation(std::ostream& err) {
  Allocation a;
  a.job_id = Env("SLURM_JOB_ID");
  const std::string nodelist = Env("SLURM_JOB_NODELIST");
  if (a.job_id.empty() || nodelist.empty()) {
    err << kCommand
        << ": not inside a Slurm allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST are not set). "
           "Run it from a batch script (sbatch examples/slurm/train.sbatch: docs/OPERATIONS.md, "
           "\"Under Slurm\"), or in a shell on an allocated node: salloc --nodes=N, then "
           "srun --pty bash, then parallax slurm JOB.toml\n";
    return std::nullopt;
  }
  a.batch_node = Env("SLURMD_NODENAME");
  if (a.batch_node.empty()) {
    err << kCommand << ": SLURMD_NODENAME is not set: this shell is not on a node of allocation "
        << a.job_id << " (salloc's shell runs where salloc was started). Run it on an "
        << "allocated node: srun --pty bash within the allocation, or from a batch script\n";
    return std::nullopt;
  }
  std::string why;
  std::optional<std::string> names = Capture({"scontrol", "show", "hostnames", nodelist}, &why);
  if (!names) {
    err << kCommand << ": `scontrol show hostnames " << nodelist << "` failed: " << why
        << "; is Slurm's scontrol in PATH on this node?\n";
    return std::nullopt;
  }
  a.nodes = Words(*names);
  if (a.nodes.empty()) {
    err << kCommand << ": `scontrol show hostnames " << nodelist << "` listed no node\n";
    return std::nullopt;
  }
  // Each node's address as Slurm reaches it (NodeAddr).
  std::optional<std::string> shown = Capture({"scontrol", "-o", "show", "node", nodelist}, &why);
  if (!shown) {
    err << kCommand << ": `scontrol -o show node " << nodelist << "` failed: " << why << "\n";
    return std::nullopt;
  }
  std::istringstream lines(*shown);
  for (std::string line; std::getline(lines, line);) {
    std::string name, addr;
    for (const std::string& w : Words(line)) {
      if (w.rfind("NodeName=", 0) == 0) name = w.substr(9);
      if (w.rfind("NodeAddr=", 0) == 0) addr = w.substr(9);
    }
    if (!name.empty()) a.addr[name] = addr.empty() ? name : addr;
  }
  for (const std::string& n : a.nodes) {
    if (a.addr.count(n) == 0) a.addr[n] = n;
  }
  if (std::find(a.nodes.begin(), a.nodes.end(), a.batch_node) == a.nodes.end()) {
    err << kCommand << ": this node (" << a.batch_node << ") is not one of allocation "
        << a.job_id << "'s nodes (" << JoinComma(a.nodes) << ")\n";
    return std::nullopt;
  }
  // Ranks per node: --ntasks-per-node, else the node's GPUs, else 1.
  if (int n = LeadingCount(Env("SLURM_NTASKS_PER_NODE")); n > 0) {
    a.tasks_per_node = n;
    a.tasks_per_node_from = "SLURM_NTASKS_PER_NODE";
  } else if (int g = LeadingCount(Env("SLURM_GPUS_ON_NODE")); g > 0) {
    a.tasks_per_node = g;
    a.tasks_per_node_from = "SLURM_GPUS_ON_NODE";
  } else {
    a.tasks_per_node_from = "one per node: no --ntasks-per-node and no GPU";
  }
  return a;
}

// Whether the job file's text sets [job] workers itself.
bool SetsWorkers(const std::string& text) {
  try {
    toml::table t = toml::parse(text);
    return t["job"]["workers"].is_value();
  } catch (const toml::parse_error&) {
    return false;  // ParseJobConfig said so already
  }
}

std::string RandomSecret() {
  std::random_device rd;
  std::string s;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 48; ++i) s += hex[rd() % 16];
  return s;
}

bool WriteSecretFile(const std::string& path, const std::string& secret) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  fchmod(fd, 0600);
  bool ok = write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  return close(fd) == 0 && ok;
}

// The run's processes and files.
struct Run {
  Allocation alloc;
  std::string state_dir;  // shared (logs)
  std::string local_root; // node-local: DIR/<node> on each node
  std::string local;      // this node's node-local directory
  std::string db;
  std::string secret;     // the shared secret every daemon gets
  std::string secret_file;
  std::string address;    // the coordinator's HOST:PORT
  std::string coord_addr; // this node's address
  std::unique_ptr<Daemon> coordinator;
  std::unique_ptr<Daemon> srun;
  int coordinator_starts = 0;

  std::string Log(const std::string& name) const { return state_dir + "/" + name + ".log"; }
};

// Starts (or starts again, on the same database) the coordinator and waits
// for its port; false after saying why not.
bool StartCoordinator(const SlurmOptions& options, Run* r, std::ostream& err) {
  const std::string port_file =
      r->local + "/coordinator.port." + std::to_string(++r->coordinator_starts);
  std::vector<std::string> argv = {options.bin_dir + "/parallax-coordinator",
                                   "--listen",
                                   r->coord_addr + ":0",
                                   "--db",
                                   r->db,
                                   "--port-file",
                                   port_file,
                                   "--secret-file",
                                   r->secret_file};
  r->coordinator = std::make_unique<Daemon>(argv, r->Log("coordinator"));
  r->address.clear();
  for (int i = 0; i < 1200 && r->address.empty(); ++i) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      r->address = r->coord_addr + ":" + std::to_string(port);
    } else if (r->coordinator->Exited()) {
      break;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  if (r->address.empty()) {
    err << kCommand << ": the coordinator did not start on " << r->alloc.batch_node
        << "; its log (" << r->Log("coordinator") << ") ends with:\n"
        << LogTail(r->Log("coordinator")) << "\n";
    return false;
  }
  return true;
}

StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const Run& r) {
  CoordinatorClientOptions copts;
  copts.address = r.address;
  copts.auth_token = r.secret;
  copts.client_name = "slurm";
  return CoordinatorClient::Connect(copts);
}

// A resumed database lists the agents of the earlier allocation, which the
// coordinator counts as alive until its agent timeout (10 s) passed without
// a heartbeat; until then it refuses new agents of the same names. Waits for
// that (at most 60 s).
void WaitForOldAgents(CoordinatorClient& client, std::ostream& err) {
  bool said = false;
  for (int i = 0; i < 600; ++i) {
    StatusOr<std::vector<rpc::AgentInfo>> agents = client.ListAgents();
    if (!agents.ok()) break;
    bool alive = false;
    for (const rpc::AgentInfo& a : *agents) alive |= a.alive;
    if (!alive || StopSignal() != 0) break;
    if (!said) {
      err << kCommand << ": waiting for the agents of the earlier allocation to time out in the "
          << "resumed database (the coordinator's agent timeout, 10 s)\n";
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Waits until every node's agent registered; false after naming the nodes
// whose agent did not, with their logs.
bool WaitForAgents(const SlurmOptions& options, CoordinatorClient& client, const Run& r,
                   std::ostream& err) {
  std::set<std::string> missing(r.alloc.nodes.begin(), r.alloc.nodes.end());
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options.agent_timeout_s);
  while (!missing.empty() && std::chrono::steady_clock::now() < deadline && StopSignal() == 0) {
    if (StatusOr<std::vector<rpc::AgentInfo>> agents = client.ListAgents(); agents.ok()) {
      for (const auto& a : *agents) {
        if (a.alive) missing.erase(a.name);
      }
    }
    if (missing.empty() || r.srun->Exited()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (missing.empty()) return true;
  if (StopSignal() != 0) {
    err << kCommand << ": stopped by signal " << StopSignal() << " while the agents started\n";
    return false;
  }
  err << kCommand << (missing.size() == 1 ? ": the agent on node " : ": the agents on nodes ")
      << JoinComma({missing.begin(), missing.end()}) << " did not register with the coordinator "
      << (r.srun->Exited() ? "(the srun step of the agents ended)"
                           : "within " + std::to_string(options.agent_timeout_s) + " s")
      << "; nothing was run\n";
  for (const std::string& node : missing) {
    err << "--- " << r.state_dir << "/agent-" << node << ".log ends with:\n"
        << LogTail(r.state_dir + "/agent-" + node + ".log") << "\n";
  }
  err << "--- " << r.Log("srun") << " (the step's own output) ends with:\n"
      << LogTail(r.Log("srun")) << "\n";
  return false;
}

// Stops the agents: SIGTERM to the tasks of their step (scancel --signal),
// so that each stops its tasks and deregisters, and srun then ends. (A
// SIGTERM to srun itself kills the step's tasks with SIGKILL.)
void StopAgents(Run* r) {
  if (r->srun->Exited()) return;
  std::string why;
  std::optional<std::string> steps =
      Capture({"squeue", "-h", "-s", "-j", r->alloc.job_id, "-o", "%i %j"}, &why);
  std::istringstream lines(steps.value_or(""));
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> w = Words(line);
    if (w.size() == 2 && w[1] == kAgentStep) Capture({"scancel", "--signal=TERM", w[0]}, &why);
  }
  for (int i = 0; i < 600 && !r->srun->Exited(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  r->srun->Stop();
}

// Copies the database (after the coordinator stopped) into the state
// directory, where a later allocation finds it (--resume).
void SaveState(const Run& r, std::ostream& err) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    fs::remove(r.state_dir + "/state.db" + suffix, ec);
    if (!fs::exists(r.db + suffix)) continue;
    fs::copy_file(r.db + suffix, r.state_dir + "/state.db" + suffix,
                  fs::copy_options::overwrite_existing, ec);
    if (ec) {
      err << kCommand << ": cannot copy " << r.db << suffix << " to " << r.state_dir << ": "
          << ec.message() << "\n";
    }
  }
}

// After a signal: Slurm signals every process of the step at once, so the
// coordinator may be stopping already. It is started again on its database
// to record the cancel and its reason, then everything stops.
void CancelAfterSignal(const SlurmOptions& options, Run* r, int64_t id, std::ostream& err) {
  const int sig = StopSignal();
  const std::string reason =
      sig == SIGTERM ? "cancelled by Slurm: parallax slurm received SIGTERM (scancel, or the end "
                       "of allocation " + r->alloc.job_id + "'s time limit)"
                     : "interrupted: parallax slurm received signal " + std::to_string(sig);
  err << kCommand << ": " << (sig == SIGTERM ? "SIGTERM" : "a signal")
      << ": cancelling job " << id << " and stopping its agents\n";
  r->coordinator->Stop();
  if (StartCoordinator(options, r, err)) {
    StatusOr<std::unique_ptr<CoordinatorClient>> client = Connect(*r);
    StatusOr<rpc::JobInfo> j =
        client.ok() ? (*client)->CancelJob(id, reason) : StatusOr<rpc::JobInfo>(client.status());
    if (j.ok()) {
      err << kCommand << ": job " << id << " CANCELLED: " << reason << "\n";
    } else {
      err << kCommand << ": cancelling job " << id << ": " << j.status().message() << "\n";
    }
  }
  StopAgents(r);  // they had SIGTERM from Slurm too, and stop their tasks
  r->coordinator->Stop();
}

// Copies the database an earlier run left in its state directory `from` to
// `db` (node-local); false after saying why not.
bool CopyState(const std::string& from, const std::string& db, std::ostream& err) {
  if (!fs::exists(from + "/state.db")) {
    err << kCommand << ": --resume " << from << ": there is no state.db there. Give the state "
        << "directory of an earlier `parallax slurm` (./parallax-slurm-<its Slurm job id> unless "
        << "it had --state-dir), which holds a copy of its database once it ended\n";
    return false;
  }
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    fs::remove(db + suffix, ec);
    if (fs::exists(from + "/state.db" + suffix)) {
      fs::copy_file(from + "/state.db" + suffix, db + suffix, ec);
    }
    if (ec) {
      err << kCommand << ": cannot copy " << from << "/state.db" << suffix << " to " << db
          << suffix << ": " << ec.message() << "\n";
      return false;
    }
  }
  return true;
}

// Submits the job, or with --resume starts a new attempt of the newest job
// of the earlier run that did not succeed, with this allocation's job text
// (its worker count; the checkpoint is re-split when that changed).
StatusOr<rpc::JobInfo> SubmitOrResume(const SlurmOptions& options, CoordinatorClient& client,
                                      const std::string& text, std::ostream& err) {
  const std::string path = fs::absolute(options.job_file).lexically_normal().string();
  if (options.resume_dir.empty()) return client.SubmitJob(text, path);
  PX_ASSIGN_OR_RETURN(std::vector<rpc::JobInfo> jobs, client.ListJobs());
  const rpc::JobInfo* last = nullptr;
  for (const rpc::JobInfo& j : jobs) {
    if ((j.state == rpc::JobState::FAILED || j.state == rpc::JobState::CANCELLED) &&
        (last == nullptr || j.id > last->id)) {
      last = &j;
    }
  }
  if (last == nullptr) {
    return NotFound("--resume " + options.resume_dir + ": its database has no FAILED or " +
                    "CANCELLED job to resume");
  }
  rpc::ResumeOptions resume;
  resume.__set_job_text(text);
  resume.__set_job_path(path);
  rpc::JobInfo job;
  PX_RETURN_IF_ERROR(client.Call(
      [&](rpc::CoordinatorClient& c) { c.ResumeJob(job, client.Header(), last->id, resume); }));
  err << kCommand << ": resuming job " << job.id << " (attempt " << job.attempt << ") of "
      << options.resume_dir << " from its newest checkpoint\n";
  return job;
}

// The job text to submit: [job] workers from the allocation unless set;
// nullopt (after saying why) when the allocation cannot hold the job.
std::optional<std::string> JobText(const SlurmOptions& options, const std::string& text,
                                   const JobConfig& config, const Allocation& a,
                                   std::ostream& err) {
  const int nodes = static_cast<int>(a.nodes.size());
  if (options.ps_nodes > 0 && config.ps.hosts != PsHosts::kPs) {
    err << kCommand << ": --ps-nodes " << options.ps_nodes << " gives PS shards nodes of their "
        << "own, but " << options.job_file << " puts them on the workers' hosts; set [ps] hosts = "
        << "\"ps\" there (schemas/job.md), or leave out --ps-nodes\n";
    return std::nullopt;
  }
  if (options.ps_nodes == 0 && config.ps.hosts == PsHosts::kPs) {
    err << kCommand << ": " << options.job_file << " sets [ps] hosts = \"ps\": give its shards "
        << "nodes of their own with --ps-nodes K (K of the allocation's " << nodes << " nodes)\n";
    return std::nullopt;
  }
  const int worker_nodes = nodes - options.ps_nodes;
  if (worker_nodes < 1) {
    err << kCommand << ": --ps-nodes " << options.ps_nodes << " leaves no node for the workers: "
        << "allocation " << a.job_id << " has " << nodes << " nodes; ask for more (sbatch "
        << "--nodes) or fewer PS nodes\n";
    return std::nullopt;
  }
  const int slots = worker_nodes * a.tasks_per_node;
  if (SetsWorkers(text)) {
    const int need = (config.job.workers + a.tasks_per_node - 1) / a.tasks_per_node;
    if (config.job.workers > slots) {
      err << kCommand << ": " << options.job_file << " asks for " << config.job.workers
          << " workers ([job] workers), which need " << need << " worker nodes at "
          << a.tasks_per_node << " per node (" << a.tasks_per_node_from << "), but allocation "
          << a.job_id << " has " << worker_nodes << " worker nodes"
          << (options.ps_nodes > 0 ? " (" + std::to_string(nodes) + " less --ps-nodes " +
                                         std::to_string(options.ps_nodes) + ")"
                                   : "")
          << "; nothing was started. Ask for " << need + options.ps_nodes
          << " nodes (sbatch --nodes), or leave [job] workers out to take one per slot\n";
      return std::nullopt;
    }
    return text;
  }
  StatusOr<std::string> edited = SetInteger(text, options.job_file, "job", "workers", slots);
  if (!edited.ok()) {
    err << kCommand << ": " << edited.status().message() << "\n";
    return std::nullopt;
  }
  return *edited;
}

// The directories: logs in the (shared) state directory, the database and
// task directories on node-local disk (SQLite's locking breaks on NFS); the
// database of --resume; the secret. nullopt, or the exit code after saying
// why not.
std::optional<int> PrepareFiles(const SlurmOptions& options, Run* r, std::ostream& err) {
  const std::string tmp = Env("TMPDIR").empty() ? "/tmp" : Env("TMPDIR");
  r->state_dir = fs::absolute(options.state_dir.empty() ? "parallax-slurm-" + r->alloc.job_id
                                                        : options.state_dir)
                     .lexically_normal()
                     .string();
  r->local_root =
      options.local_dir.empty() ? tmp + "/parallax-slurm-" + r->alloc.job_id : options.local_dir;
  r->local = r->local_root + "/" + r->alloc.batch_node;
  std::error_code ec;
  for (const std::string& d : {r->state_dir, r->local}) {
    fs::create_directories(d, ec);
    if (ec) {
      err << kCommand << ": cannot create '" << d << "': " << ec.message() << "\n";
      return kExitFailed;
    }
  }
  r->db = r->local + "/state.db";
  if (!options.resume_dir.empty() && !CopyState(options.resume_dir, r->db, err)) {
    return kExitUsage;
  }
  // One secret for this allocation unless the user has one.
  r->secret = options.token.empty() ? RandomSecret() : options.token;
  r->secret_file = r->local + "/secret";
  if (!WriteSecretFile(r->secret_file, r->secret)) {
    err << kCommand << ": cannot write '" << r->secret_file << "': " << std::strerror(errno)
        << "\n";
    return kExitFailed;
  }
  return std::nullopt;
}

// The PS nodes: the last `k`, never this one (it runs the coordinator).
std::vector<std::string> PsNodes(const Allocation& a, int k) {
  std::vector<std::string> ps;
  for (auto it = a.nodes.rbegin(); it != a.nodes.rend() && static_cast<int>(ps.size()) < k;
       ++it) {
    if (*it != a.batch_node) ps.push_back(*it);
  }
  return ps;
}

// One srun step on every node, each task `parallax slurm-agent`, which
// execs the node's parallax-agent. The secret goes in its environment.
void StartAgentStep(const SlurmOptions& options, const JobConfig& config,
                    const std::vector<std::string>& ps_nodes, Run* r) {
  std::vector<std::string> node_addrs;
  for (const std::string& n : r->alloc.nodes) node_addrs.push_back(n + "=" + r->alloc.addr[n]);
  const std::string job_dir =
      fs::absolute(options.job_file).lexically_normal().parent_path().string();
  const std::string nodes = std::to_string(r->alloc.nodes.size());
  std::vector<std::string> argv = {
      "srun", "--overlap", "--nodes=" + nodes, "--ntasks=" + nodes, "--ntasks-per-node=1",
      "--whole", "--mem=0", "--cpu-bind=none", "--kill-on-bad-exit=0", "--export=ALL",
      std::string("--job-name=") + kAgentStep, options.bin_dir + "/parallax", "slurm-agent",
      "--nodes", JoinComma(node_addrs), "--local-dir", r->local_root, "--log-dir", r->state_dir};
  if (!ps_nodes.empty()) argv.insert(argv.end(), {"--ps-nodes", JoinComma(ps_nodes)});
  argv.insert(argv.end(), {"--", options.bin_dir + "/parallax-agent", "--coordinator",
                           r->address, "--slots", std::to_string(r->alloc.tasks_per_node),
                           "--grace-ms", "2000", "--stop-tasks-on-exit", "--no-report-on-stop",
                           "--allow-exec",
                           options.bin_dir, "--allow-exec", job_dir});
  for (const auto& [name, value] : config.trainer.env) {
    argv.insert(argv.end(), {"--allow-env", name});
  }
  r->srun = std::make_unique<Daemon>(
      argv, r->Log("srun"), std::vector<std::string>{std::string(kSecretEnv) + "=" + r->secret});
}

}  // namespace

int RunSlurm(const SlurmOptions& options, std::ostream& out, std::ostream& err) {
  StatusOr<std::string> file_text = ReadJobFile(options.job_file);
  if (!file_text.ok()) {
    err << kCommand << ": " << file_text.status().message() << "\n";
    return kExitUsage;
  }
  StatusOr<JobConfig> config = ParseJobConfig(*file_text, options.job_file);
  if (!config.ok()) {
    err << config.status().message() << "\n";
    err << kCommand << ": " << options.job_file << " is not a valid job file; nothing was run\n";
    return kExitUsage;
  }
  Run r;
  {
    std::optional<Allocation> alloc = ReadAllocation(err);
    if (!alloc) return kExitUsage;
    r.alloc = std::move(*alloc);
  }
  std::optional<std::string> text = JobText(options, *file_text, *config, r.alloc, err);
  if (!text) return kExitUsage;
  r.coord_addr = Ipv4(r.alloc.addr[r.alloc.batch_node]);
  if (r.coord_addr.empty()) {
    err << kCommand << ": this node's address (" << r.alloc.addr[r.alloc.batch_node]
        << ", its NodeAddr in Slurm) resolves to no IPv4 address\n";
    return kExitFailed;
  }

  if (std::optional<int> code = PrepareFiles(options, &r, err)) return *code;
  CatchStopSignals();
  if (!StartCoordinator(options, &r, err)) return kExitFailed;

  StatusOr<std::unique_ptr<CoordinatorClient>> connected = Connect(r);
  if (!connected.ok()) {
    err << kCommand << ": " << connected.status().message() << "\n";
    return kExitFailed;
  }
  CoordinatorClient& client = **connected;
  if (!options.resume_dir.empty()) WaitForOldAgents(client, err);

  const std::vector<std::string> ps_nodes = PsNodes(r.alloc, options.ps_nodes);
  StartAgentStep(options, *config, ps_nodes, &r);

  if (!WaitForAgents(options, client, r, err)) {
    StopAgents(&r);
    return StopSignal() != 0 ? 128 + StopSignal() : kExitFailed;
  }

  StatusOr<rpc::JobInfo> job = SubmitOrResume(options, client, *text, err);
  if (!job.ok()) {
    err << kCommand << ": " << job.status().message() << "\n";
    StopAgents(&r);
    return job.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  const int64_t id = job->id;
  err << kCommand << ": job " << id << " (" << job->name << ", " << job->workers
      << " workers) in allocation " << r.alloc.job_id << " on " << r.alloc.nodes.size() << " nodes ("
      << JoinComma(r.alloc.nodes) << (ps_nodes.empty() ? "" : "; PS nodes " + JoinComma(ps_nodes))
      << "), coordinator at " << r.address << "; logs in " << r.state_dir
      << ", database " << r.db << " (node-local)\n";

  std::vector<WatchedDaemon> daemons = {
      {"coordinator on " + r.alloc.batch_node, r.Log("coordinator"), r.coordinator.get()},
      {"srun step of the agents", r.Log("srun"), r.srun.get()}};
  const WatchResult watched = WatchJob(
      client, id, config->trainer.steps, daemons,
      {.progress_bar = options.progress_bar, .cancel_on_signal = false, .command = kCommand}, out,
      err);
  if (watched.end == WatchEnd::kSignalled) {
    CancelAfterSignal(options, &r, id, err);
    SaveState(r, err);
    return 128 + StopSignal();
  }
  StopAgents(&r);
  r.coordinator->Stop();
  SaveState(r, err);
  if (watched.end == WatchEnd::kDaemonExited) return kExitFailed;
  return watched.state == "SUCCEEDED" ? kExitOk : kExitFailed;
}

int RunSlurmAgent(const SlurmAgentOptions& options, std::ostream& err) {
  const std::string node = Env("SLURMD_NODENAME");
  if (node.empty()) {
    err << "parallax slurm-agent: SLURMD_NODENAME is not set; this runs only as the srun step "
           "that `parallax slurm` starts\n";
    return kExitUsage;
  }
  std::string addr;
  for (const std::string& entry : SplitComma(options.nodes)) {
    const size_t eq = entry.find('=');
    if (eq != std::string::npos && entry.substr(0, eq) == node) addr = entry.substr(eq + 1);
  }
  const std::vector<std::string> ps_nodes = SplitComma(options.ps_nodes);
  const bool ps = std::find(ps_nodes.begin(), ps_nodes.end(), node) != ps_nodes.end();
  const std::string local = options.local_dir + "/" + node;
  std::error_code ec;
  fs::create_directories(local, ec);
  if (ec) {
    err << "parallax slurm-agent on " << node << ": cannot create '" << local
        << "': " << ec.message() << "\n";
    return kExitFailed;
  }
  // Its log in the state directory, where `parallax slurm` reads it.
  const std::string log = options.log_dir + "/agent-" + node + ".log";
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  } else {
    err << "parallax slurm-agent on " << node << ": cannot open '" << log << "' ("
        << std::strerror(errno) << "): is the state directory shared by every node? Logging "
        << "to srun's output\n";
  }
  std::vector<std::string> argv = options.agent_argv;
  argv.insert(argv.end(), {"--name", node, "--workdir", local + "/agent"});
  const std::string ip = Ipv4(addr.empty() ? node : addr);
  if (!ip.empty()) {
    argv.insert(argv.end(), {"--listen", ip + ":0", "--advertise", ip, "--bind-addr", ip});
  } else {
    argv.insert(argv.end(), {"--listen", "0.0.0.0:0"});
  }
  if (ps) argv.insert(argv.end(), {"--role", "ps", "--calibrate", "false"});
  // The allocation's secret into a node-local file only its owner reads.
  if (const char* secret = std::getenv(kSecretEnv)) {
    const std::string file = local + "/secret";
    if (!WriteSecretFile(file, secret)) {
      err << "parallax slurm-agent on " << node << ": cannot write '" << file
          << "': " << std::strerror(errno) << "\n";
      return kExitFailed;
    }
    argv.insert(argv.end(), {"--secret-file", file});
    unsetenv(kSecretEnv);
  }
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  execv(ptrs[0], ptrs.data());
  std::fprintf(stderr, "parallax slurm-agent on %s: cannot execute %s: %s\n", node.c_str(),
               ptrs[0], std::strerror(errno));
  return kExitFailed;
}

}  // namespace parallax::cli
