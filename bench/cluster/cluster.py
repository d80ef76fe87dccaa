#!/usr/bin/python3
"""An emulated cluster on one machine: hosts in network namespaces with shaped links, a
coordinator on the bridge and one parallax-agent per host.

For scripts (bench/cluster/matrix.py, the cluster tests, anything that wants hosts):

    from cluster import Cluster
    with Cluster(bin_dir, hosts=4, rate="1gbit", slots=1, ps_hosts=0, allow_exec=()) as c:
        job = c.submit("job.toml")          # parallax submit against the cluster's coordinator
        c.wait_step(job, 4, 10)             # each of 4 ranks reported a metric point of step 10
        before = c.link_bytes()             # each host's veth counters, from the host's side
        end = c.wait(job)                   # the final `parallax status JOB --json` object
        s = c.status(job, points=True)      # ... with every metric point of its attempt
        c.reshape("10gbit")                 # every link, both directions
        p = c.popen_in_host(0, ["/usr/bin/python3", ...])   # any process inside a host

With ps_hosts = P > 0 there are P more hosts after the H worker hosts, whose agents run with
`--role ps`: they take the PS shards of jobs with `[ps] hosts = "ps"` and no trainer rank.
link_bytes() lists the worker hosts first, then the PS hosts.

A job with a custom trainer ([trainer] command) runs only from a directory in `allow_exec`
(every agent's `--allow-exec`; its bin dir is always allowed): the directory of the job file,
say, with the trainer next to it (`command = ["./train.py"]`).

The hosts come from `px-net-hosts` (bench/cluster/net_hosts_main.cc over tests/testing/net_hosts.h,
the same code the multi-host tests use): H namespaces, each with one veth to a bridge in the root
namespace, tbf on both ends of every veth, bursts held to the rate too (this kernel has no netem:
links get a rate, never latency). Names and the subnet are unique per run; everything goes away when
the `with` block ends, on SIGTERM/SIGINT, and (px-net-hosts and the agents die with this process)
when the driver is killed.

Run it alone to try it: `cluster.py --bin build/bin --hosts 2 --rate 1gbit` starts a cluster,
prints its coordinator's address and each host, and waits for Ctrl-C.
"""

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import job_status  # noqa: E402  (what `parallax status JOB --json` says of a job)

PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    """preexec_fn: SIGTERM when the driver dies (survives `ip netns exec`, which execs)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _rate_bits(rate):
    units = {"gbit": 10**9, "mbit": 10**6, "kbit": 10**3, "bit": 1}
    for suffix, scale in units.items():
        if rate.endswith(suffix):
            return int(float(rate[: -len(suffix)]) * scale)
    return int(rate)


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_table():
    """{pid: (ppid, name, cpu seconds)} from /proc (processes that vanish midway are skipped)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # The name may hold spaces and parentheses: the fields start after the last ')'.
        name = stat[stat.index("(") + 1: stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry)] = (int(fields[1]), name, (int(fields[11]) + int(fields[12])) / _TICK)
    return table


def cpu_by_role(roots):
    """{role: CPU seconds} of the processes under `roots` ({role: [pid]}). Below an agent, a
    process whose name is not the agent's own (its forks keep it until they exec) is a task's
    program: "ps" when it is parallax-ps, else "trainer" (parallax-trainer, or a custom trainer
    such as a Python script: `ip netns exec` and the agent exec, so names are the programs'),
    and its descendants count with it. Below the coordinator, parallax-trainer and parallax-ps
    count as "trainer" and "ps"; anything else counts as its root's role."""
    table = _proc_table()
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out = {}
    for role, pids in roots.items():
        todo = [(p, role) for p in pids if p in table]
        while todo:
            pid, mine = todo.pop()
            name = table[pid][1]
            if mine in ("agent", "coordinator") and pid not in pids:
                mine = _TASK_ROLES.get(name, "trainer" if mine == "agent" and
                                       name != "parallax-agent" else mine)
            out[mine] = out.get(mine, 0.0) + table[pid][2]
            todo.extend((c, mine) for c in children.get(pid, []))
    return out


# Task programs by their process name (at most 15 characters: parallax-trainer's is cut).
_TASK_ROLES = {"parallax-traine": "trainer", "parallax-trainer": "trainer", "parallax-ps": "ps"}


def machine_idle():
    """(idle, total) jiffies of every CPU since boot (/proc/stat's first line)."""
    with open("/proc/stat", encoding="utf-8") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return values[3] + values[4], sum(values[:8])


class ClusterError(RuntimeError):
    pass


class Cluster:
    """H hosts with shaped links, a coordinator and an agent per host (see the module doc).

    Not thread-safe. Every blocking call takes a timeout (seconds) and raises ClusterError with
    the coordinator's and agents' log tails when it passes.
    """

    def __init__(self, bin_dir, hosts, rate="1gbit", slots=1, workdir=None,
                 agent_timeout_ms=10000, start_timeout=60, ps_hosts=0, allow_exec=()):
        self.bin = os.path.abspath(bin_dir)
        self.hosts = hosts              # worker hosts: 0 .. hosts-1
        self.ps_hosts = ps_hosts        # PS hosts (--role ps): hosts .. hosts+ps_hosts-1
        self.rate = rate
        self.slots = slots
        self.allow_exec = [os.path.abspath(d) for d in allow_exec]  # custom trainers' dirs
        self.agent_timeout_ms = agent_timeout_ms
        self.start_timeout = start_timeout
        self._own_workdir = workdir is None
        self.workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="px-cluster-"))
        os.makedirs(self.workdir, exist_ok=True)
        self.net = None           # px-net-hosts' first line: bridge, coordinator_host, hosts
        self.address = None       # coordinator HOST:PORT
        self._net_proc = None
        self._coordinator = None
        self._agents = []
        self._logs = []           # log files of the daemons, closed in stop()
        self._old_handlers = {}

    # ---- lifetime

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        if os.path.exists(self._port_file):
            # Its coordinator's database too: its agents and jobs would come back with the new
            # ones' names.
            raise ClusterError(f"{self.workdir} holds an earlier cluster's coordinator "
                               "(coordinator.port); give each cluster a directory of its own")
        for sig in (signal.SIGTERM, signal.SIGHUP):
            # SIGTERM unwinds like Ctrl-C, so `with` blocks tear down.
            self._old_handlers[sig] = signal.signal(sig, _raise_interrupt)
        self._start_hosts()
        self._start_coordinator()
        for i in range(self.all_hosts):
            self._start_agent(i)
        self._wait_agents()

    def stop(self):
        """Stops agents (and their tasks), the coordinator, and removes the hosts. Idempotent."""
        for proc in self._agents:
            _terminate(proc, 15)
        self._agents = []
        if self._coordinator is not None:
            _terminate(self._coordinator, 10)
            self._coordinator = None
        if self._net_proc is not None:
            try:
                self._net_proc.stdin.write("quit\n")
                self._net_proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
            _terminate(self._net_proc, 20, first=None)
            self._net_proc.stdin.close()
            self._net_proc.stdout.close()
            self._net_proc = None
        for log in self._logs:
            log.close()
        self._logs = []
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers = {}

    # ---- hosts

    def _start_hosts(self):
        tool = os.path.join(self.bin, "px-net-hosts")
        if not os.access(tool, os.X_OK):
            raise ClusterError(f"{tool} not found; build it (cmake --build build --target "
                               "px-net-hosts) or point --bin at the build's bin/")
        self._net_proc = subprocess.Popen(
            [tool, "--hosts", str(self.all_hosts), "--rate", self.rate, "--sweep"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            preexec_fn=_die_with_parent)
        line = self._net_proc.stdout.readline()
        if not line:
            raise ClusterError("px-net-hosts exited without a word (root and iproute2 needed)")
        net = json.loads(line)
        if "error" in net:
            raise ClusterError(f"px-net-hosts: {net['error']}")
        self.net = net

    def _ask(self, command):
        self._net_proc.stdin.write(command + "\n")
        self._net_proc.stdin.flush()
        answer = json.loads(self._net_proc.stdout.readline() or '{"error": "px-net-hosts died"}')
        if "error" in answer:
            raise ClusterError(f"px-net-hosts {command}: {answer['error']}")
        return answer

    @property
    def all_hosts(self):
        return self.hosts + self.ps_hosts

    def link_bytes(self):
        """[(sent, received)] per host, worker hosts then PS hosts: its veth's kernel counters
        (frames, headers included)."""
        return [(b["sent"], b["received"]) for b in self._ask("bytes")["bytes"]]

    def reshape(self, rate):
        """Every host's link to `rate` ("1gbit", "10gbit", "0" for none), both directions."""
        for i in range(self.all_hosts):
            self._ask(f"shape {i} {rate}")
        self.rate = rate

    def cpu_seconds(self, extra_pids=()):
        """{role: CPU seconds (user + system)} of the cluster's processes alive now: the
        coordinator, the agents and every process below them (trainer, ps, other), and
        `extra_pids` with their descendants ("peer": e.g. DDP ranks started with
        popen_in_host). Threads count in their process; processes that already exited do not.
        Differences of two readings over a window give CPU per step."""
        roots = {"coordinator": [self._coordinator.pid] if self._coordinator else [],
                 "agent": [a.pid for a in self._agents], "peer": list(extra_pids)}
        return cpu_by_role(roots)

    def set_link(self, host, up):
        self._ask(f"link {host} {'up' if up else 'down'}")

    @property
    def rate_bits_per_s(self):
        return _rate_bits(self.rate)

    def host_address(self, i):
        return self.net["hosts"][i]["address"]

    def host_ifname(self, i):
        """The host's interface inside its namespace (GLOO_SOCKET_IFNAME for its processes)."""
        return self.net["hosts"][i]["ifname"]

    def in_host(self, i, argv):
        return ["/usr/sbin/ip", "netns", "exec", self.net["hosts"][i]["ns"]] + list(argv)

    def popen_in_host(self, i, argv, **kwargs):
        """A process inside host i; it dies with this process (PR_SET_PDEATHSIG)."""
        return subprocess.Popen(self.in_host(i, argv), preexec_fn=_die_with_parent, **kwargs)

    # ---- coordinator and agents

    @property
    def _port_file(self):
        return os.path.join(self.workdir, "coordinator.port")

    def _start_coordinator(self):
        log = open(os.path.join(self.workdir, "coordinator.log"), "ab")
        self._logs.append(log)
        # Its database is the coordinator's alone: the cluster reads jobs through the CLI.
        self._coordinator = subprocess.Popen(
            [os.path.join(self.bin, "parallax-coordinator"), "--listen",
             f"{self.net['coordinator_host']}:0",
             "--db", os.path.join(self.workdir, "state.db"),
             "--port-file", self._port_file, "--agent-timeout-ms", str(self.agent_timeout_ms)],
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        port = _wait_word(self._port_file, self.start_timeout, self._coordinator)
        if port is None:
            raise ClusterError("the coordinator did not start:\n" + self.logs())
        self.address = f"{self.net['coordinator_host']}:{port}"

    def agent_name(self, i):
        """h0, h1, ... for worker hosts; ps0, ps1, ... for PS hosts."""
        return f"h{i}" if i < self.hosts else f"ps{i - self.hosts}"

    def _start_agent(self, i):
        name = self.agent_name(i)
        host = self.host_address(i)
        log = open(os.path.join(self.workdir, f"agent-{name}.log"), "ab")
        self._logs.append(log)
        argv = [os.path.join(self.bin, "parallax-agent"), "--coordinator", self.address,
                "--name", name, "--workdir", os.path.join(self.workdir, f"agent-{name}"),
                "--slots", str(self.slots), "--listen", f"{host}:0", "--advertise", host,
                "--bind-addr", host, "--heartbeat-ms", "1000", "--grace-ms", "2000",
                "--stop-tasks-on-exit"]
        if i >= self.hosts:
            argv += ["--role", "ps"]
        for d in self.allow_exec:
            argv += ["--allow-exec", d]
        # GLOO_SOCKET_IFNAME for the tasks: Gloo binds the host's own interface.
        env = dict(os.environ, GLOO_SOCKET_IFNAME=self.host_ifname(i))
        self._agents.append(self.popen_in_host(i, argv, stdout=log, stderr=subprocess.STDOUT,
                                               env=env))

    def _wait_agents(self):
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            r = self.cli(["agents", "--json"], check=False)
            if r.returncode == 0:
                alive = [a for a in json.loads(r.stdout).get("agents", []) if a.get("alive")]
                if len(alive) >= self.all_hosts:
                    return
            time.sleep(0.2)
        raise ClusterError(f"{self.all_hosts} agents did not register in {self.start_timeout} s:\n"
                           + self.logs())

    def cli(self, args, check=True, timeout=60):
        """`parallax --coordinator ADDR args...`; CompletedProcess (text)."""
        r = subprocess.run([os.path.join(self.bin, "parallax"), "--coordinator", self.address]
                           + list(args), capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise ClusterError(f"parallax {' '.join(args)} failed ({r.returncode}):\n"
                               f"{r.stdout}{r.stderr}")
        return r

    def submit(self, job_file):
        """Submits a job file; returns its id."""
        out = self.cli(["submit", job_file]).stdout.strip().splitlines()
        return out[-1].strip()

    def status(self, job_id, points=False):
        """The job's object of `parallax status JOB --json` (with `points`, --points: every
        metric point of its current attempt too)."""
        args = ["status", str(job_id), "--json"] + (["--points"] if points else [])
        return json.loads(self.cli(args).stdout)["jobs"][0]

    def wait(self, job_id, timeout=1800):
        """The job's status object once it is SUCCEEDED, FAILED or CANCELLED."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.status(job_id)
            if s["state"] in job_status.TERMINAL:
                return s
            time.sleep(0.25)
        raise ClusterError(f"job {job_id} did not end in {timeout} s:\n" + self.logs())

    def min_step(self, job_id, ranks):
        """The newest step every one of `ranks` ranks has a metric point of (-1 before)."""
        return job_status.min_step(self.status(job_id), ranks)

    def wait_step(self, job_id, ranks, step, timeout=900):
        """Waits until every rank reported `step`; returns the step seen. Raises when the job
        ends first or the timeout passes. Each look is a `parallax status` process and a
        coordinator call, inside the timed window on the job's cores, so it looks often only
        close to the step (job_status.Pace)."""
        deadline = time.monotonic() + timeout
        pace = job_status.Pace(shortest=0.01)
        while time.monotonic() < deadline:
            s = self.status(job_id)
            seen = job_status.min_step(s, ranks)
            if seen >= step:
                return seen
            if s["state"] in job_status.TERMINAL:
                raise ClusterError(f"job {job_id} ended ({s['state']}) before step {step}:\n"
                                   + self.logs())
            time.sleep(pace.wait(seen, step))
        raise ClusterError(f"job {job_id}: step {step} not reached in {timeout} s")

    def logs(self, tail=3000):
        out = []
        for name in ["coordinator"] + [f"agent-{self.agent_name(i)}"
                                       for i in range(self.all_hosts)]:
            path = os.path.join(self.workdir, f"{name}.log")
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    out.append(f"---- {name}.log\n{f.read()[-tail:]}")
            except OSError:
                pass
        return "\n".join(out)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _terminate(proc, timeout, first=signal.SIGTERM):
    """Ends `proc` (SIGTERM, then SIGKILL after `timeout` s); `first`=None just waits."""
    if proc.poll() is None and first is not None:
        proc.send_signal(first)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_word(path, timeout, proc):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(path, encoding="utf-8") as f:
                word = f.read().split()
            if word:
                return word[0]
        except OSError:
            pass
        time.sleep(0.05)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="directory of the parallax binaries")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--ps-hosts", type=int, default=0,
                    help="more hosts whose agents run with --role ps (PS shards only)")
    args = ap.parse_args()
    with Cluster(args.bin, args.hosts, args.rate, args.slots, ps_hosts=args.ps_hosts) as c:
        print(json.dumps(dict(coordinator=c.address, workdir=c.workdir, rate=c.rate,
                              hosts=c.net["hosts"])), flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
