"""A job as its user sees it: `parallax status JOB --json`, the benches' one view of the
coordinator (no bench opens the coordinator's database: tests/layering/bench_reads_test.py).

    s = job_status.read(bin_dir, address, job_id)               # state, step, newest metric
                                                                 # point per rank, plan
    s = job_status.read(bin_dir, address, job_id, points=True)  # + "points": every metric point
                                                                 # of the job's current attempt
    job_status.min_step(s, ranks)                               # the step every rank reached
    job_status.points_between(s, first, end)                    # the points of steps first..end-1
    job_status.Pace().wait(step, target)                        # how long to sleep between looks

`parallax run` ends its embedded coordinator with the job, so a finished run is read through a
coordinator started on its state directory for the reading (as docs/PYTHON.md reads one):

    s = job_status.finished(bin_dir, state_dir)  # job 1 of the run, with its points

so a bench gives each run a state directory of its own, emptied first (fresh_state_dir): in a
reused --workdir, job 1 would be an earlier run's.

and a run still going through the address its coordinator wrote (running_address).
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


class StatusError(RuntimeError):
    """`parallax status` failed, or the coordinator serving a finished run did not start."""


def read(bin_dir, address, job_id, points=False, timeout=120):
    """The job's object of `parallax --coordinator ADDRESS status JOB --json` (with `points`,
    --points too); raises StatusError with the CLI's words when it fails."""
    argv = [os.path.join(bin_dir, "parallax"), "--coordinator", address, "status", str(job_id),
            "--json"] + (["--points"] if points else [])
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise StatusError(f"{' '.join(argv)} exited with {r.returncode}:\n{r.stdout}{r.stderr}")
    return json.loads(r.stdout)["jobs"][0]


def min_step(status, ranks):
    """The newest step every one of `ranks` ranks has a metric point of, from a status object's
    "metrics" (each rank's newest point of the current attempt); -1 before all have one."""
    metrics = status.get("metrics", [])
    return min(p["step"] for p in metrics) if len(metrics) == ranks else -1


def points_between(status, first, end):
    """The metric points of steps first..end-1 of a status object read with points=True."""
    if "points" not in status:
        raise StatusError("the status object has no \"points\": read it with points=True "
                          "(`parallax status JOB --json --points`)")
    return [p for p in status["points"] if first <= p["step"] < end]


class Pace:
    """How long to sleep before the next look at a job's progress: each look is a `parallax
    status` process and a coordinator call, on the cores the job runs on, so far from the step
    waited for it sleeps a quarter of the time the steps left take at the pace of the last
    steps seen (the first steps are slower: a mean since the start would sleep past a step
    near the end); close to it, `shortest`; until a step after the first seen, `first`."""

    def __init__(self, shortest=0.02, longest=1.0, first=0.1):
        self.shortest, self.longest, self.first = shortest, longest, first
        self._last = None              # (time, step) when the newest step was first seen
        self._seconds_per_step = None

    def wait(self, step, target):
        """Seconds to sleep after reading `step` (-1: none yet) while waiting for `target`."""
        now = time.monotonic()
        if step < 0:
            return self.first
        if self._last is not None and step > self._last[1]:
            self._seconds_per_step = (now - self._last[0]) / (step - self._last[1])
        if self._last is None or step != self._last[1]:
            self._last = (now, step)
        if self._seconds_per_step is None:
            return self.first
        return min(self.longest, max(self.shortest, self._seconds_per_step * (target - step) / 4))


def row_cache_hit_rate(mean):
    """The row cache's share of the distinct rows the steps looked up: hits over hits, misses and
    stale refreshes (the ranks' row_cache_* metric values), each read by `mean(name)`; 0 without
    a cache."""
    looked = sum(mean(f"row_cache_{k}") for k in ("hits", "misses", "stale_refreshes"))
    return mean("row_cache_hits") / looked if looked else 0.0


def running_address(state_dir):
    """HOST:PORT of the embedded coordinator of a `parallax run --state-dir state_dir` that is
    going on (from the port file it writes); None before it wrote one."""
    try:
        with open(os.path.join(state_dir, "coordinator.port"), encoding="utf-8") as f:
            words = f.read().split()
    except OSError:
        return None
    return f"127.0.0.1:{words[0]}" if words else None


@contextlib.contextmanager
def served(bin_dir, state_dir, timeout=60):
    """The address of a parallax-coordinator serving the state of a finished `parallax run
    --state-dir state_dir` on loopback, stopped when the block ends. Its log, and the port file
    it writes, are served-coordinator.{log,port} in `state_dir`."""
    port_file = os.path.join(state_dir, "served-coordinator.port")
    argv = [os.path.join(bin_dir, "parallax-coordinator"), "--listen", "127.0.0.1:0",
            "--db", os.path.join(state_dir, "state.db"), "--port-file", port_file]
    if not os.path.isfile(argv[argv.index("--db") + 1]):
        # The coordinator would start an empty state there.
        raise StatusError(f"{state_dir} holds no coordinator database: give the --state-dir of "
                          "a `parallax run` that ended (or a cluster's workdir)")
    if os.path.exists(port_file):
        os.remove(port_file)
    log_path = os.path.join(state_dir, "served-coordinator.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"127.0.0.1:{_wait_port(port_file, proc, log_path, timeout)}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fresh_state_dir(state_dir):
    """`state_dir`, emptied of an earlier run's state: `parallax run` then makes its job job 1,
    which finished() reads."""
    shutil.rmtree(state_dir, ignore_errors=True)
    return state_dir


def finished(bin_dir, state_dir, job_id=1, points=True):
    """Job `job_id`'s status object (with every metric point unless not `points`) of a finished
    `parallax run --state-dir state_dir`, read through a coordinator on its state (served)."""
    with served(bin_dir, state_dir) as address:
        return read(bin_dir, address, job_id, points=points)


def _wait_port(port_file, proc, log_path, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(port_file, encoding="utf-8") as f:
                words = f.read().split()
            if words:
                return words[0]
        except OSError:
            pass
        time.sleep(0.02)
    with open(log_path, encoding="utf-8", errors="replace") as f:
        tail = f.read()[-2000:]
    raise StatusError(f"parallax-coordinator on {os.path.dirname(port_file)} did not start "
                      f"within {timeout} s (exit {proc.poll()}); its log {log_path} ends:\n{tail}")
