// The coordinator service: the one control-plane API that the CLI, agents,
// trainer ranks and PS shards speak (Apache Thrift, binary protocol, framed
// transport). Times are int64 milliseconds since the Unix epoch (UTC).
//
// Compatibility rules:
// - Every request starts with a RequestHeader: the caller's protocol version
//   and an auth token. The coordinator refuses a request whose
//   protocol_version differs from PROTOCOL_VERSION with
//   ErrorCode.VERSION_MISMATCH and a message naming both versions.
// - Fields are only ever added (optional, new ids); ids are never reused.
//   A change that old clients cannot ignore bumps PROTOCOL_VERSION.

namespace cpp parallax.rpc

const i32 PROTOCOL_VERSION = 1

// Largest job file (SubmitJobRequest.job_text) the coordinator accepts, in
// bytes. `parallax submit` reads at most this much plus one byte of a file.
const i32 MAX_JOB_TEXT_BYTES = 1048576

struct RequestHeader {
  1: required i32 protocol_version
  // Shared secret for the control plane. Empty when the coordinator runs
  // without one; required (and checked in constant time) when it was given
  // one (--secret-file, $PARALLAX_SECRET_FILE or --token).
  2: required string auth_token
  // Who is calling, for logs and events: "cli", "agent:host-a", "trainer:3".
  3: optional string client
}

enum ErrorCode {
  INVALID_ARGUMENT = 1     // the request is malformed; the message says which field
  NOT_FOUND = 2            // unknown job, agent or key
  ALREADY_EXISTS = 3
  FAILED_PRECONDITION = 4  // valid, but not in the current state (cancel a finished job)
  DEADLINE_EXCEEDED = 5    // a blocking call's deadline passed
  UNAVAILABLE = 6          // the coordinator cannot serve now (database locked, read-only)
  UNAUTHENTICATED = 7      // wrong or missing auth token
  VERSION_MISMATCH = 8     // client and coordinator protocol versions differ
  FENCED = 9               // the caller belongs to an older attempt of the job
  INTERNAL = 10
}

exception CoordinatorError {
  1: required ErrorCode code
  2: required string message
}

// ---- Handshake ----

struct HelloResponse {
  1: required i32 protocol_version
  2: required string server_version   // "0.1.0"
  3: required i64 server_time
}

// ---- Jobs ----

enum JobState {
  PENDING = 1     // stored, waiting for placement
  PLACING = 2     // tasks being placed on agents
  RUNNING = 3
  SUCCEEDED = 4
  FAILED = 5
  CANCELLED = 6
}

struct SubmitJobRequest {
  // The whole job.toml text, at most MAX_JOB_TEXT_BYTES. The coordinator
  // re-validates it; it never trusts the client's validation.
  1: required string job_text
  // Where the client read it from (for messages, and to resolve relative paths
  // on hosts that share the client's filesystem).
  2: optional string job_path
}

// What a resume changes in the stored job before its new attempt (each
// unset field keeps the job's own): the whole job file, then [job] workers
// and [ps] shards. The new attempt resumes from the newest committed
// checkpoint with the new counts (docs/RELIABILITY.md).
struct ResumeOptions {
  1: optional i32 workers
  2: optional i32 shards
  3: optional string job_text
  4: optional string job_path
}

struct JobInfo {
  1: required i64 id
  2: required string name
  3: required JobState state
  4: required i32 workers
  5: required i64 step            // newest step any rank reported; 0 before the first
  6: required i64 created
  7: required i64 updated
  8: required i32 attempt         // 0 until the first attempt starts
  9: optional string reason       // why the job is FAILED or CANCELLED
  10: optional string job_text    // only from GetJob
  11: optional string job_path
  12: optional string submitted_by
  // Why a PENDING job has not started yet ("needs 8 slots; 4 free on 2 agents").
  13: optional string waiting_for
  // Only from GetJob, for a job whose PS shards were started again alone
  // (async and ssp; docs/RELIABILITY.md, "A lost PS shard"), over all its
  // attempts: how many times, the updates the lost processes had applied
  // after the checkpoints their successors loaded (as the successors
  // reported them), and for how many restarts that count is unknown (the
  // successor could not read its predecessor's count).
  14: optional i32 shard_restarts
  15: optional i64 lost_updates
  16: optional i32 lost_updates_unknown
}

struct ListJobsRequest {
  // Empty: all jobs. Otherwise only jobs in these states.
  1: optional list<JobState> states
  // Newest first; 0 means no limit.
  2: optional i32 limit
}

struct Event {
  1: required i64 seq             // strictly increasing per coordinator database
  2: required i64 job_id          // 0 for events about no job (agents)
  3: required i64 time
  4: required string kind         // "submitted", "state", "cancel", "agent", "checkpoint", ...
  5: required string message
}

// ---- Agents and tasks ----

// What an agent takes: trainer ranks in its slots and, by default, the PS
// shards of the jobs whose ranks it runs (WORKER); or PS shards only, of
// jobs whose [ps] hosts = "ps" (PS: `parallax-agent --role ps`).
enum AgentRole {
  WORKER = 1
  PS = 2
}

struct AgentInfo {
  1: required string name         // unique per cluster
  2: required string address      // HOST:PORT of the agent's own service
  3: required i32 slots
  4: required i32 gpus
  5: optional string hostname
  6: optional string version
  // Filled in by the coordinator in ListAgents.
  7: optional i64 registered
  8: optional i64 last_seen
  9: optional bool alive
  10: optional bool draining
  // A random id the agent keeps in its workdir (agent.id). A registration
  // carrying the id the name was registered with comes from the agent that
  // holds that workdir's lock, so the process that registered it before is
  // gone: it takes the name over at once, from any address.
  11: optional string workdir_id
  // Where the agent's tasks bind (PARALLAX_BIND_ADDR).
  12: optional string bind_addr
  // Filled in by the coordinator in ListAgents: the agent deregistered on a
  // clean stop (and has not registered again).
  13: optional bool stopped
  // Filled in by the coordinator in ListAgents: what is wrong with the
  // registration (e.g. loopback addresses on a coordinator reached from
  // other hosts); empty when nothing is.
  14: optional string warning
  // Absent: WORKER (agents older than the role).
  15: optional AgentRole role
}

struct HeartbeatRequest {
  1: required string agent_name
}

struct HeartbeatResponse {
  // False when the coordinator does not know the agent (it lost its database
  // or the agent was never registered): the agent must register again.
  1: required bool known
  2: required i64 server_time
}

enum TaskRole {
  TRAINER = 1
  PS = 2
}

enum TaskState {
  ASSIGNED = 1
  RUNNING = 2
  EXITED = 3
  KILLED = 4
  LOST = 5
}

struct TaskInfo {
  1: required i64 job_id
  2: required i32 attempt
  3: required TaskRole role
  4: required i32 index           // rank for trainers, shard for PS
  5: required string agent_name
  6: required TaskState state
  7: optional i32 exit_code
  8: optional i32 signal
  9: required i64 updated
  // True for a PS shard the job's plan never needed: it was never started
  // (its state reads EXITED with code 0 so that the job can finish).
  10: optional bool not_launched
  // A PS shard's generation in its attempt (absent: 1): one more each time
  // it was started again alone after it was lost.
  11: optional i32 generation
}

// Identifies one task of one attempt of a job.
struct TaskKey {
  1: required i64 job_id
  2: required i32 attempt
  3: required TaskRole role
  4: required i32 index           // rank for trainers, shard for PS
  // A PS shard started again alone in its attempt: its generation, 2 or
  // more (absent: 1, the attempt's first process). Reports of an older
  // generation than the coordinator's are ignored; an agent that does not
  // know the field reads a restarted shard as its first process.
  5: optional i32 generation
}

// What an agent needs to launch a task; see schemas/task_env.md for the
// environment it builds from this.
struct TaskAssignment {
  1: required TaskKey key
  2: required i32 world_size       // trainer ranks in the job
  3: required i32 local_rank       // trainers: index among this job's trainers on this agent
  4: required i32 local_world_size // trainers of this job on this agent
  5: required i32 host_index       // index of this agent among the job's agents
  6: required i32 num_hosts
  7: required i32 num_shards       // PS shards of the job (0: none)
  // Trainers of a custom-trainer job: its argv (command[0] relative to the job
  // file's directory when it contains a '/'). Empty: the built-in binary for
  // the role (parallax-trainer or parallax-ps).
  8: required list<string> command
  9: required map<string, string> env  // the job's [trainer] env table
  10: required string job_text
  11: required string job_path
  12: optional string cuda_visible_devices
}

struct PollRequest {
  1: required string agent_name
  2: required i64 timeout_ms
  // Every task the agent is running now, so the coordinator can reconcile
  // after either side restarted.
  3: required list<TaskKey> running
}

struct PollResponse {
  // False: the coordinator does not know this agent; register again.
  1: required bool known
  2: required list<TaskAssignment> start
  // Tasks to stop: SIGTERM to the task's process group, SIGKILL after the grace period.
  3: required list<TaskKey> stop
}

struct TaskReport {
  1: required TaskKey key
  // RUNNING once launched; EXITED with exit_code; KILLED with signal; LOST when
  // it could not be launched or its fate is unknown.
  2: required TaskState state
  3: optional i32 exit_code
  4: optional i32 signal
  // A launch error, or the last lines of the task's log when it ended.
  5: optional string message
}

// ---- Plans ----

struct PutPlanRequest {
  1: required i64 job_id
  2: required i32 attempt
  // The plan as the planner writes it (JSON); the coordinator stores it as is.
  3: required string plan_json
}

// ---- Rendezvous key-value ----
// Keys are "job/<id>/<attempt>/..." so that a restarted job never reads a
// stale address. Values are opaque bytes.

struct KvSetRequest {
  1: required string key
  2: required binary value
}

struct KvGetRequest {
  1: required list<string> keys
  // How long to wait for every key to exist. 0: do not wait.
  2: required i64 timeout_ms
}

struct KvAddRequest {
  1: required string key
  2: required i64 delta
}

// ---- Metrics ----

struct MetricPoint {
  1: required i64 job_id
  2: required i32 attempt
  3: required i32 rank
  4: required i64 step
  5: required double loss
  6: required double throughput   // samples per second on this rank
  7: optional i64 time            // set by the coordinator
  // Per-step averages since the rank's previous point, counted at the
  // transport (docs/ARCHITECTURE.md, "Metrics"): allreduce_sent_bytes,
  // allreduce_recv_bytes, allgather_sent_bytes, allgather_recv_bytes,
  // ps_push_sent_bytes, ps_push_recv_bytes, ps_pull_sent_bytes,
  // ps_pull_recv_bytes, compute_ms, dense_wait_ms, sparse_wait_ms; steps
  // (how many steps the averages cover); and loss_mean (the mean loss of
  // those steps: `loss` is the last one's).
  8: optional map<string, double> values
}

struct GetMetricsRequest {
  1: required i64 job_id
  // Only points with step > after_step.
  2: optional i64 after_step
  3: optional i32 limit
}

// ---- PS shards ----

// One dynamic table's part on a shard (core/ps/dynamic_table.h): rows and
// bytes now, the other counters since the shard started.
struct DynamicTableReport {
  1: required string name
  2: required i64 rows
  3: required i64 admitted            // ids that became rows
  4: required i64 not_admitted_reads  // reads of ids that are not rows (the initializer's values)
  5: required i64 dropped_gradients   // gradients of ids not (yet) admitted
  6: required i64 evicted_ttl
  7: required i64 evicted_budget
  8: required i64 bytes               // rows, their bookkeeping, the index and the sketch
}

// What one PS shard served since it started (every counter only grows),
// sent by the shard every few seconds for the coordinator's /metrics.
struct ShardStatsReport {
  1: required i64 job_id
  2: required i32 attempt
  3: required i32 shard
  4: required i64 pulls
  5: required i64 pushes
  6: required i64 push_pulls
  7: required i64 clocks
  8: required i64 rows_pulled
  9: required i64 rows_pushed
  10: required i64 errors
  11: required i64 rows_held        // rows stored now, every variable together
  // Staleness τ (in steps) of the async/ssp pushes applied: bucket 0 counts
  // τ = 0, bucket b counts τ in [2^(b-1), 2^b); the last bucket everything
  // above. At most 64 buckets.
  12: required list<i64> staleness_buckets
  13: required i64 staleness_sum    // of τ over every push counted
  // The shard process's generation (absent: not fenced by generation).
  14: optional i32 generation
  // From a generation above 1 only: the updates its predecessor applied
  // after the checkpoint this process loaded; -1 when unknown (the
  // predecessor's count could not be read).
  15: optional i64 lost_updates
  // The shard's dynamic tables, if any.
  16: optional list<DynamicTableReport> dynamic_tables
}

// ---- Checkpoints ----

struct CheckpointInfo {
  1: required i64 job_id
  2: required i32 attempt
  3: required i64 step
  4: required string path         // directory of the complete checkpoint
  5: required string manifest_sha256
  6: optional i64 created
}

// ---- Consistency at run time ----

// A job's consistency mode (its PS variables) from step from_step on.
struct ConsistencySwitch {
  1: required i64 from_step
  2: required string consistency  // "sync", "async" or "ssp:K" (K = staleness)
}

// A trainer rank's promise: it runs no step >= lease_until before it asks again.
struct ConsistencyLeaseRequest {
  1: required i64 job_id
  2: required i32 attempt
  3: required i32 rank
  4: required i64 lease_until
}

service Coordinator {
  HelloResponse Hello(1: RequestHeader header) throws (1: CoordinatorError error)

  // Jobs
  JobInfo SubmitJob(1: RequestHeader header, 2: SubmitJobRequest request)
      throws (1: CoordinatorError error)
  JobInfo GetJob(1: RequestHeader header, 2: i64 job_id) throws (1: CoordinatorError error)
  list<JobInfo> ListJobs(1: RequestHeader header, 2: ListJobsRequest request)
      throws (1: CoordinatorError error)
  JobInfo CancelJob(1: RequestHeader header, 2: i64 job_id, 3: string reason)
      throws (1: CoordinatorError error)
  // Asks a running job to re-plan at its next committed checkpoint
  // (`parallax replan JOB`): the attempt stops there and a new attempt, not
  // a restart, resumes from it with a plan its rank 0 makes again (hot rows
  // from what it re-measured while training). An event `replan` records who
  // asked and why. FAILED_PRECONDITION for a job that is not RUNNING or
  // writes no checkpoints.
  JobInfo ReplanJob(1: RequestHeader header, 2: i64 job_id, 3: string reason)
      throws (1: CoordinatorError error)
  // Events of one job (job_id > 0) or of every job (job_id = 0) with seq > after_seq.
  list<Event> GetEvents(1: RequestHeader header, 2: i64 job_id, 3: i64 after_seq, 4: i32 limit)
      throws (1: CoordinatorError error)

  // Agents
  void RegisterAgent(1: RequestHeader header, 2: AgentInfo agent) throws (1: CoordinatorError error)
  HeartbeatResponse Heartbeat(1: RequestHeader header, 2: HeartbeatRequest request)
      throws (1: CoordinatorError error)
  list<AgentInfo> ListAgents(1: RequestHeader header) throws (1: CoordinatorError error)
  // A cleanly stopping agent gives up its name (its tasks keep running, and
  // keep their attempt while it is back within the agent timeout): the name
  // may be registered again at once, from any address. Ignored when
  // workdir_id is not the one the name was registered with.
  void DeregisterAgent(1: RequestHeader header, 2: string agent_name, 3: string workdir_id)
      throws (1: CoordinatorError error)
  // Long poll: returns as soon as the agent has tasks to start or stop, or
  // after timeout_ms with empty lists. Also counts as a heartbeat.
  PollResponse PollAssignments(1: RequestHeader header, 2: PollRequest request)
      throws (1: CoordinatorError error)
  // Task state changes seen by an agent. Reports about an older attempt than
  // the job's current one are recorded but change nothing.
  void ReportTasks(1: RequestHeader header, 2: string agent_name, 3: list<TaskReport> reports)
      throws (1: CoordinatorError error)
  // Stops (drain = true) or resumes placing new tasks on an agent.
  void DrainAgent(1: RequestHeader header, 2: string agent_name, 3: bool drain)
      throws (1: CoordinatorError error)
  // A new attempt of a FAILED or CANCELLED job, optionally with another job
  // file or worker / shard count (ResumeOptions).
  JobInfo ResumeJob(1: RequestHeader header, 2: i64 job_id, 3: ResumeOptions options)
      throws (1: CoordinatorError error)

  // Tasks of a job (every attempt), newest attempt first.
  list<TaskInfo> ListTasks(1: RequestHeader header, 2: i64 job_id)
      throws (1: CoordinatorError error)

  // Plans: one per job attempt.
  void PutPlan(1: RequestHeader header, 2: PutPlanRequest request)
      throws (1: CoordinatorError error)
  // Waits up to timeout_ms for the plan of (job, attempt) to exist.
  string GetPlan(1: RequestHeader header, 2: i64 job_id, 3: i32 attempt, 4: i64 timeout_ms)
      throws (1: CoordinatorError error)

  // Rendezvous key-value store (what Gloo and NCCL bootstrap through).
  void KvSet(1: RequestHeader header, 2: KvSetRequest request) throws (1: CoordinatorError error)
  // Returns the values of every key in order, waiting up to timeout_ms for all
  // to exist; DEADLINE_EXCEEDED names the keys still missing.
  list<binary> KvGet(1: RequestHeader header, 2: KvGetRequest request)
      throws (1: CoordinatorError error)
  // Atomically adds delta to the integer stored at key (0 if absent); returns the new value.
  i64 KvAdd(1: RequestHeader header, 2: KvAddRequest request) throws (1: CoordinatorError error)

  // Metrics
  void ReportMetrics(1: RequestHeader header, 2: list<MetricPoint> points)
      throws (1: CoordinatorError error)
  list<MetricPoint> GetMetrics(1: RequestHeader header, 2: GetMetricsRequest request)
      throws (1: CoordinatorError error)

  // A PS shard's counters; the newest report per shard of a live job is kept
  // in memory (not in the database). A report of an older attempt is FENCED.
  void ReportShardStats(1: RequestHeader header, 2: ShardStatsReport report)
      throws (1: CoordinatorError error)
  // The newest report of each PS shard of a live job, by shard (`parallax
  // status`); empty when no shard reported yet or the job ended.
  list<ShardStatsReport> GetShardStats(1: RequestHeader header, 2: i64 job_id)
      throws (1: CoordinatorError error)

  // Checkpoints: a checkpoint is committed once it is completely written.
  void CommitCheckpoint(1: RequestHeader header, 2: CheckpointInfo checkpoint)
      throws (1: CoordinatorError error)
  list<CheckpointInfo> ListCheckpoints(1: RequestHeader header, 2: i64 job_id)
      throws (1: CoordinatorError error)

  // Switches a running job's consistency from a step the coordinator picks:
  // past every rank's lease, so every rank learns it before it runs the step
  // before (`parallax set JOB consistency=...`). UNAVAILABLE while some rank
  // of the attempt has not taken a lease yet (try again).
  ConsistencySwitch SetConsistency(1: RequestHeader header, 2: i64 job_id, 3: string consistency)
      throws (1: CoordinatorError error)
  // Records a rank's lease and returns every switch of the job, oldest first.
  list<ConsistencySwitch> LeaseConsistency(1: RequestHeader header,
                                           2: ConsistencyLeaseRequest request)
      throws (1: CoordinatorError error)
}
