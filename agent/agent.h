// Agent: the logic of parallax-agent. Registers with the coordinator,
// heartbeats, long-polls for assignments, launches and stops tasks through a
// ProcessLauncher, reaps them, rotates their logs, reports every state change
// (retrying until the coordinator has it) and serves their logs.
//
// Tasks outlive the agent: they run in their own process groups with their
// output in files, and a restarted agent adopts those still alive (from the
// pid files in their directories) and re-sends final reports the coordinator
// had not taken yet (from their `result` files). Each task runs under a
// supervisor process (ProcessLauncher) that writes how it ended to
// `exit-status`, so an adopted task, or one that ended while no agent ran,
// is reported with its real exit code or signal and keeps its attempt. The agent never kills a task
// because the coordinator is away; only a `stop` from the coordinator does.
//
// Threads: Run() long-polls on the calling thread and starts a heartbeat
// thread and a supervisor thread (reaping, grace deadlines, rotation,
// reports). Tests call the steps (Register, HandlePoll, Tick, FlushReports)
// directly instead, with a FakeClock.
#ifndef PARALLAX_AGENT_AGENT_H_
#define PARALLAX_AGENT_AGENT_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent_service.h"
#include "agent/coordinator_link.h"
#include "agent/process_launcher.h"
#include "core/base/clock.h"
#include "parallax/status.h"
#include "schemas/coordinator_types.h"

namespace parallax::agent {

struct AgentOptions {
  std::string name;     // unique per cluster
  std::string workdir;  // holds tasks/<job>-<attempt>-<role>-<index>/
  // HOST:PORT of this agent's log service, as registered.
  std::string address;
  int slots = 1;
  int gpus = 0;
  // --role ps: registers as a PS host (AgentRole PS), which the coordinator
  // gives PS shards of [ps] hosts = "ps" jobs only; a trainer assigned to it
  // anyway (a coordinator older than the role) is refused unrun.
  bool ps_host = false;
  std::string hostname;
  std::string version = "0.1.0";
  // Where parallax-trainer and parallax-ps are.
  std::string bin_dir;
  // A task runs only if its executable's real path lies under one of these
  // (agent/exec_policy.h); otherwise it is reported EXITED with code 126 and
  // the refusal as its message, and nothing is executed. parallax-agent
  // fills in bin_dir when --allow-exec is not given; empty: no check.
  std::vector<std::string> allow_exec;
  // Names a job's [trainer.env] may set besides the safe set
  // (core/base/env_allow_list.h; shell-style patterns). A task whose job
  // sets any other name is reported EXITED with code 126 and a message
  // naming the names and --allow-env, and nothing is executed.
  std::vector<std::string> allow_env;
  // For the tasks' environment (schemas/task_env.md).
  std::string coordinator;  // PARALLAX_COORDINATOR
  std::string bind_addr;    // PARALLAX_BIND_ADDR
  std::string token;        // PARALLAX_TOKEN
  std::string tls_ca_file;  // PARALLAX_TLS_CA: absolute path, or empty (plaintext)
  // The agent's own environment ("NAME=value"), which tasks inherit: the
  // operator's to keep clean (docs/OPERATIONS.md, "Task environment").
  std::vector<std::string> inherited_env;
  // Python trainers (agent/task_env.h): the `parallax` package's directory,
  // first on every trainer's PYTHONPATH ("": none), and this host's CPU
  // cores, shared by the job's trainers here for their default compute
  // threads (0: no default).
  std::string python_path;
  int cpu_cores = 0;

  int64_t grace_ms = 5'000;          // SIGTERM → SIGKILL
  int64_t heartbeat_ms = 1'000;
  int64_t poll_timeout_ms = 10'000;  // long-poll wait
  int64_t tick_ms = 100;             // supervisor period (reaping, rotation, reports)
  int64_t max_backoff_ms = 5'000;    // retry delay cap while the coordinator is away
  int64_t max_log_bytes = 64ll << 20;
  int keep_logs = 3;                 // task.log.1 … task.log.<keep_logs>
  // For `parallax run`'s private agent: tasks die with the agent (SIGKILL
  // through PR_SET_PDEATHSIG), and when Run() ends it stops every task
  // (SIGTERM, SIGKILL after grace_ms) and reports them before returning.
  // Off for cluster agents, whose tasks survive agent restarts.
  bool stop_tasks_on_exit = false;
  // Off for `parallax slurm`'s agents: once Stop() was called (a signal),
  // the ends of tasks are not reported, only saved in their task
  // directories. Slurm signals the agents and the ranks of a cancelled
  // allocation at once: ranks killed that way are not the job failing, and
  // parallax slurm records the cancel itself (cli/slurm_command.cc). The
  // coordinator keeps the tasks of a deregistered agent for the agent
  // timeout, as for any agent that went away.
  bool report_on_stop = true;
};

class Agent : public LogSource {
 public:
  // `link`, `launcher` and `clock` must outlive the agent.
  Agent(AgentOptions options, CoordinatorLink* link, ProcessLauncher* launcher, Clock* clock);
  ~Agent() override;
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Makes the workdir (FAILED_PRECONDITION "workdir 'X' is not writable: …"
  // when it cannot be created or written, or is used by another agent),
  // reads or makes its id, and adopts live tasks left by a previous agent process. Call once, first.
  Status Init();

  // The HOST:PORT registered as this agent's log service (overrides
  // options.address; known only once the server listens). Call before Run().
  void set_address(const std::string& address) { address_ = address; }

  // Runs until Stop() (returns OK) or until the coordinator refuses the
  // registration (returns why: another agent has the name, wrong token or
  // protocol version). Leaves tasks running either way, unless
  // options.stop_tasks_on_exit. Tasks are launched on the calling thread.
  Status Run();
  // Makes Run() return soon. Thread-safe; callable from a signal thread.
  // Run() then deregisters the agent (a clean stop), unless the
  // coordinator refused it.
  void Stop();
  // The random id kept in <workdir>/agent.id (made by the first Init() of
  // the workdir), sent with every registration: a restarted agent of the
  // same workdir takes its name over at once.
  const std::string& workdir_id() const { return workdir_id_; }

  // ---- Steps of Run(), public for tests ----

  // Registers once. A refusal that retrying cannot fix is returned as is;
  // UNAVAILABLE means try again later.
  Status Register();
  // The long-poll request: every task running now.
  rpc::PollRequest MakePollRequest() const;
  // Starts each `start` not already running (or already ended), stops each
  // `stop`. Does not look at `known`.
  void HandlePoll(const rpc::PollResponse& response);
  // Reaps ended tasks, sends SIGKILL past the grace period, rotates logs,
  // then FlushReports().
  void Tick();
  // Sends the queued reports; keeps them queued when that fails.
  // Returns whether the queue is empty now.
  bool FlushReports();
  // What the poll loop calls before every Poll: sends the pending reports
  // now, backoff or not, and returns whether none is left. A poll lists the
  // tasks running here, and after a (re)registration the coordinator counts
  // a task it believes running but not listed as lost; an exit that
  // happened while it was away must reach it first.
  bool ReadyToPoll();

  std::vector<rpc::TaskKey> RunningTasks() const;
  size_t PendingReports() const;
  // The absolute directory of a task.
  std::string TaskDir(const rpc::TaskKey& key) const;
  // The task directory of the generation before `key`'s (a PS shard started
  // again alone), when it is on this host; "" otherwise.
  std::string PreviousGenerationDir(const rpc::TaskKey& key) const;

  // LogSource.
  StatusOr<rpc::LogChunk> ReadLog(const rpc::TaskKey& task, int64_t offset,
                                  int32_t max_bytes) override;

 private:
  struct Task {
    rpc::TaskKey key;
    std::string dir;
    int pid = -1;
    int64_t start_time = -1;
    bool adopted = false;  // not our child: its exit status is unknown
    bool stopping = false;
    bool killed = false;   // SIGKILL sent
    int64_t kill_at = 0;   // when stopping: SIGKILL time (clock millis)
  };

  void StartTask(const rpc::TaskAssignment& assignment);  // REQUIRES: mu_ held
  // Ends a task that will not be executed: EXITED 126 with `message` (in its
  // log and its report), like a program that could not run.
  void RefuseTask(const rpc::TaskKey& key, const std::string& dir,
                  const std::string& message);  // REQUIRES: mu_ held
  void StopTask(const rpc::TaskKey& key);                 // REQUIRES: mu_ held
  void QueueReport(rpc::TaskReport report);               // REQUIRES: mu_ held
  void Adopt();
  // Stops every task and waits (ticking) until all ended or grace_ms + 1 s.
  void StopAllTasks();
  // Why trainer assignment `a` cannot run on this host: the paths its job
  // names (data, checkpoint_dir's parent) that do not exist here, one per
  // line; "" when every one does.
  std::string MissingPaths(const rpc::TaskAssignment& a) const;
  // Reads <workdir>/agent.id into workdir_id_, making it when missing.
  Status LoadWorkdirId();
  void HeartbeatLoop();
  void SupervisorLoop();
  // Registers if needed (thread-safe). Returns a fatal error, else OK.
  Status EnsureRegistered();
  // Waits on cv_ up to `millis` or until stopping; returns false when stopping.
  bool WaitFor(int64_t millis);

  // Constant after construction (workdir_ after Init).
  const AgentOptions options_;
  CoordinatorLink* const link_;
  ProcessLauncher* const launcher_;
  Clock* const clock_;
  std::string workdir_;
  std::string workdir_id_;  // <workdir>/agent.id: who registered the name (AgentInfo.workdir_id)
  std::string address_;
  int lock_fd_ = -1;

  mutable std::mutex mu_;
  std::map<std::string, Task> tasks_;        // GUARDED_BY(mu_), by TaskDirName
  std::set<std::string> ended_;              // GUARDED_BY(mu_): tasks that ended in this process
  std::deque<rpc::TaskReport> reports_;      // GUARDED_BY(mu_): not yet accepted
  int64_t next_flush_at_ = 0;                // GUARDED_BY(mu_)
  int64_t flush_backoff_ms_ = 0;             // GUARDED_BY(mu_)

  std::mutex flush_mu_;     // one FlushReports at a time, so reports stay in order
  std::mutex log_mu_;       // rotation vs. reading
  std::mutex register_mu_;  // one registration at a time
  std::atomic<bool> registered_{false};

  std::mutex stop_mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // GUARDED_BY(stop_mu_)
  bool withheld_logged_ = false;  // GUARDED_BY(mu_): FlushReports said it withholds reports
  Status fatal_;           // GUARDED_BY(stop_mu_)
};

}  // namespace parallax::agent

#endif  // PARALLAX_AGENT_AGENT_H_
