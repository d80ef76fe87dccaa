-- The coordinator's durable state (SQLite), as an ordered list of forward
-- migrations. coordinator/sqlite_state_store.cc compiles this file in.
--
-- Format: the file is split into sections, each starting with a line
--
--   -- migrate: N
--
-- with N = 1, 2, 3, ... in order and without gaps. Text before the first
-- section (this header) is ignored. On open the store reads the database's
-- `PRAGMA user_version` (0 for a new file) and applies, in one transaction
-- each, every section with N > user_version, setting user_version = N in the
-- same transaction. The newest N is the schema version of this build; a
-- database with a greater user_version was written by a newer Parallax and is
-- refused rather than touched.
--
-- Rules:
-- - Never edit a released migration, not even to fix a typo: databases in the
--   field have already applied it and will never run it again. Add a new
--   section (ALTER TABLE, CREATE TABLE ... / INSERT ... SELECT / DROP / RENAME
--   for changes ALTER cannot make) instead.
-- - A section must work on a database at exactly the previous version, inside
--   a transaction: no BEGIN/COMMIT, no VACUUM, no PRAGMA journal_mode here.
-- - Times are INTEGER milliseconds since the Unix epoch (UTC).
-- - "No job" is NULL in job_id columns (so foreign keys hold); the store maps
--   it to and from job id 0.

-- migrate: 1

CREATE TABLE jobs (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even after a delete
  name         TEXT    NOT NULL,
  state        TEXT    NOT NULL CHECK (state IN ('PENDING', 'PLACING', 'RUNNING',
                                                 'SUCCEEDED', 'FAILED', 'CANCELLED')),
  workers      INTEGER NOT NULL CHECK (workers >= 1),
  step         INTEGER NOT NULL DEFAULT 0 CHECK (step >= 0),  -- newest step any rank reported
  created      INTEGER NOT NULL,
  updated      INTEGER NOT NULL,
  attempt      INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),  -- 0 until the first attempt
  reason       TEXT    NOT NULL DEFAULT '',  -- why the job FAILED or was CANCELLED
  job_text     TEXT    NOT NULL,             -- the job.toml as submitted
  job_path     TEXT    NOT NULL DEFAULT '',
  submitted_by TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX jobs_by_state ON jobs (state, id);

CREATE TABLE events (
  seq     INTEGER PRIMARY KEY AUTOINCREMENT,  -- strictly increasing, never reused
  job_id  INTEGER REFERENCES jobs (id) ON DELETE CASCADE,  -- NULL: not about a job
  time    INTEGER NOT NULL,
  kind    TEXT    NOT NULL CHECK (kind <> ''),
  message TEXT    NOT NULL
);

CREATE TABLE agents (
  name       TEXT    PRIMARY KEY CHECK (name <> ''),
  address    TEXT    NOT NULL,  -- HOST:PORT of the agent's own service
  slots      INTEGER NOT NULL CHECK (slots >= 0),
  gpus       INTEGER NOT NULL CHECK (gpus >= 0),
  hostname   TEXT    NOT NULL DEFAULT '',
  version    TEXT    NOT NULL DEFAULT '',
  registered INTEGER NOT NULL,  -- first registration; kept when it registers again
  last_seen  INTEGER NOT NULL
);

-- One row per task of a job attempt: trainer ranks and PS shards.
CREATE TABLE tasks (
  job_id     INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  attempt    INTEGER NOT NULL CHECK (attempt >= 0),
  role       TEXT    NOT NULL CHECK (role IN ('TRAINER', 'PS')),
  task_index INTEGER NOT NULL CHECK (task_index >= 0),  -- rank for trainers, shard for PS
  agent_name TEXT    NOT NULL,  -- no foreign key: a task outlives its agent's record
  state      TEXT    NOT NULL CHECK (state IN ('ASSIGNED', 'RUNNING', 'EXITED',
                                                 'KILLED', 'LOST')),
  exit_code  INTEGER,  -- NULL until the process exits
  signal     INTEGER,  -- NULL unless a signal ended the process
  updated    INTEGER NOT NULL,
  PRIMARY KEY (job_id, attempt, role, task_index)
) WITHOUT ROWID;

-- Rendezvous key-value store. Values are opaque bytes.
CREATE TABLE kv (
  key     TEXT    PRIMARY KEY CHECK (key <> ''),
  value   BLOB    NOT NULL,
  updated INTEGER NOT NULL
);

CREATE TABLE metrics (
  id         INTEGER PRIMARY KEY,
  job_id     INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  attempt    INTEGER NOT NULL CHECK (attempt >= 0),
  rank       INTEGER NOT NULL CHECK (rank >= 0),
  step       INTEGER NOT NULL CHECK (step >= 0),
  loss       REAL    NOT NULL,
  throughput REAL    NOT NULL,  -- samples per second on this rank
  time       INTEGER NOT NULL   -- when the coordinator stored the point
);

-- migrate: 2

-- A draining agent keeps its running tasks but is given no new ones.
ALTER TABLE agents ADD COLUMN draining INTEGER NOT NULL DEFAULT 0 CHECK (draining IN (0, 1));

-- The variable plan of each job attempt (JSON, as the planner wrote it).
CREATE TABLE plans (
  job_id    INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  attempt   INTEGER NOT NULL CHECK (attempt >= 0),
  plan_json TEXT    NOT NULL,
  updated   INTEGER NOT NULL,
  PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;

-- Complete checkpoints only: a row is written once every part is on disk.
CREATE TABLE checkpoints (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id          INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  attempt         INTEGER NOT NULL CHECK (attempt >= 0),
  step            INTEGER NOT NULL CHECK (step >= 0),
  path            TEXT    NOT NULL CHECK (path <> ''),
  manifest_sha256 TEXT    NOT NULL,
  created         INTEGER NOT NULL,
  UNIQUE (job_id, attempt, step)
);
CREATE INDEX checkpoints_by_job_step ON checkpoints (job_id, step);

CREATE INDEX events_by_job_seq ON events (job_id, seq);
CREATE INDEX metrics_by_job_step ON metrics (job_id, step);
CREATE INDEX tasks_by_agent ON tasks (agent_name);

-- migrate: 3

-- Automatic restarts since the job was submitted or last resumed (compared
-- with the job file's max_restarts).
ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0 CHECK (restarts >= 0);
-- A launch error, or the last lines of the task's log when it ended.
ALTER TABLE tasks ADD COLUMN message TEXT NOT NULL DEFAULT '';
CREATE INDEX tasks_by_state ON tasks (state);

-- migrate: 4

-- Named per-step values of a metric point (bytes per path, step-time
-- breakdown) as a JSON object; '{}' when the rank sent none.
ALTER TABLE metrics ADD COLUMN metric_values TEXT NOT NULL DEFAULT '{}';

-- migrate: 5

-- A PS shard's generation in its attempt: 1 for the attempt's first
-- process, one more each time it is started again alone after it was lost
-- (async and ssp jobs). Reports of an older generation are ignored.
ALTER TABLE tasks ADD COLUMN generation INTEGER NOT NULL DEFAULT 1 CHECK (generation >= 1);
-- The updates lost with such shards, as their next generations reported
-- them (their sum), and how many reported that the count is unknown.
ALTER TABLE jobs ADD COLUMN lost_updates INTEGER NOT NULL DEFAULT 0 CHECK (lost_updates >= 0);
ALTER TABLE jobs ADD COLUMN lost_updates_unknown INTEGER NOT NULL DEFAULT 0
  CHECK (lost_updates_unknown >= 0);

-- migrate: 6

-- What an agent takes (AgentRole of schemas/coordinator.thrift): 1 a worker
-- (trainer ranks, and the shards of its jobs), 2 PS shards only (started
-- with --role ps). Agents registered before the role existed are workers.
ALTER TABLE agents ADD COLUMN role INTEGER NOT NULL DEFAULT 1 CHECK (role IN (1, 2));
