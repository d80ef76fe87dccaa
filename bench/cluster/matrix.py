#!/usr/bin/python3
"""W3 on the emulated cluster: Parallax variants side by side with PyTorch DDP, at N workers on
H hosts with links shaped to a rate, time and bytes where they cross.

Run through bench/cluster/run.sh (it checks the binaries, data and torch, and takes
/work/bench.lock when it exists). Each shape N:H gets its own cluster (bench/cluster/cluster.py:
H network namespaces, N/H agent slots each); each rate reshapes its links; each round runs every
variant once, in order, so the variants alternate; --runs rounds.

A shape N:H+P adds P PS hosts: namespaces whose agents run with `--role ps`. The Parallax jobs
then have `[ps] hosts = "ps"` (shards "auto": one per PS host), so no worker host runs a shard;
DDP's ranks stay on the H worker hosts and the PS hosts idle. The link figures
(`link_bytes_per_step`, ...) are the worker hosts'; the PS hosts' are `ps_host_link_*`.

Workload: examples/w3.toml with its model dimensions unchanged; only [trainer] batch_size and
steps change, the same on both sides (--batch, --warmup + --steps), plus `metrics_every = 1`
(--metrics-every K: K, the job file's default being 10),
`eval_tokens = 1` (--eval-tokens N: N), and `[plan] link_bytes_per_s` = the shaped rate / 8 (the
planner's link figure; --plan FILE adds a measured [plan] table, bench/e2e/calibrate.sh).

Held-out loss (--eval-tokens N, off by default): both sides evaluate the trained model at the end,
off the clock, the same way (trainer/models/lm_model.cc's Evaluate, bench/peers/heldout_eval.py):
`eval_loss` in nats, Parallax's from rank 0's `eval step S perplexity P` line (`parallax logs`),
the peer's from its rank 0; per round, `eval_loss_vs_torch_ddp_sparse` is a variant's minus the
peer's. The training loss of the last 20 steps (`loss_last20`) is a noisy yardstick for "the
same loss" (W3 at lr 0.5 is chaotic; a 20-step mean is uncertain by ~0.13 nats). With
--seed-per-round [FIRST] each round is a fresh seed on both sides (FIRST + r), and
`loss_last20_vs_torch_ddp_sparse` is the mean of the rounds' paired differences with its
standard error (`sem`).

- parallax-<arch> (hybrid = the planner's choice, ps, allgather, allreduce; hybrid-noagg = the
  planner's choice with `[ps] local_aggregation = false`, hybrid-unbatched with `batch = false`,
  hybrid-hot with `hot_rows = 1024`, hybrid-hotauto with `hot_rows = "auto"`; hybrid-async with
  `consistency = "async"`, and hybrid-async-cacheS / -cacheSv, S = 1, 4, 16, the same with the row
  cache, `[ps] cache_staleness = S` and for -cacheSv `cache_rule = "version"`): the job is submitted
  to the cluster's coordinator; PS shards: one per host (`shards = "auto"`). Its figures come from
  the ranks' metric points (tokens/s from the slower rank's step times, loss, compute time,
  dense and sparse wait per step, from `parallax status JOB --json --points` once it ended;
  bench/e2e/e2e.py's job_metrics) and from the links.
- torch-ddp-sparse, torch-ddp-dense: bench/peers/w3_torch.py, one rank per process, rank r in
  host r // (N/H), Gloo over the host's interface, data from `parallax-data batches` (what
  Parallax rank r reads). torch-ddp-nosync: the same ranks with DDP's all-reduce skipped (the
  compute-only step time of N processes on these cores; its loss means nothing).
- parallax-torch-hybrid: the torch side's W3 model, data and loop trained through Parallax's
  PyTorch front-end (`parallax.torch`): bench/e2e/w3_parallax_torch.py with the job file
  bench/e2e/e2e.py writes for it (torch_job_text: N ranks, this batch and these steps, the
  round's seed, the `[ps]` keys and `[plan]` link figure of the parallax-* jobs), reading the
  batches file the DDP ranks read. A copy of the script goes next to the job file, in the
  workdir, which every agent may execute from (`--allow-exec`); the agents put the built
  `parallax` package first on its PYTHONPATH. Submitted and measured like the parallax-* jobs,
  except: `parallax plan` cannot plan a custom trainer (its variables are known only when rank 0
  registers them), so its prediction is the plan rank 0 made and stored ("plan" of `parallax
  status JOB --json`): the predicted communication and straggler wait, not the bytes; and no
  held-out loss (the script evaluates nothing). Its initial values and negatives are torch's
  RNG's (torch.manual_seed, torch.multinomial), the peer's Parallax's draws: the same model and
  maths on another trajectory.

Links: each host's veth counters, read when every rank has finished the warm-up and again near
the end (Parallax: when every rank's newest metric point in `parallax status JOB --json` shows
the step; DDP: the ranks wait on the driver there), divided by the steps in between. Link
utilisation = a direction's bytes per second over the rate / 8; the busiest host and direction
is `link_util_max`. A run whose utilisation is far below 1 was limited by something else (the 2
shared cores, usually).

CPU: the CPU time (user + system, /proc) of every process of the run — trainers, PS shards,
agents, coordinator; DDP's ranks as "peer" — over the same window, per step
(`cpu_ms_per_step` and by role), and the machine's idle share over it (`machine_idle_frac`): near
0, every core was busy and the CPU a step costs, not the link, set the tokens/s.

Predicted: `parallax plan JOB --json --workers N --hosts H --from-coordinator` for every Parallax
job but parallax-torch-hybrid (above), before it runs: the plan its rank 0 makes (the job
file's [plan] keys, the rest what the agents and earlier jobs' trainers measured), its
predicted communication seconds per step and bytes per host link (busier direction), against the
measured dense + sparse wait and the veth counters (`link_vs_plan_link`: measured bytes per
direction over the plan's link figure). `expected_link_bytes` carries the plan's bytes per worker
by path over this cluster's topology (link_bytes_from_plan) and `link_vs_plan_paths` compares
with it: where the first ratio is off and the second is not, the cost model's link figure, not
the bytes the plan predicts, is what misses. With --measured-figures the jobs have no [plan]
table: the figures are the cluster's own (agents at start, each job's trainers at rendezvous), the
prediction is `parallax plan --from-coordinator` after the run, and `figures` carries each figure
with its source. A sync step also waits for the slowest rank's compute, which no per-call figure
holds: the coordinator measures it over a sync job's steps (core/plan/straggler.h), so the
prediction takes it from before the run (an earlier run of the same workers and hosts; none in a
shape's first round): `predicted_straggler_ms`, `predicted_wait_ms` = communication + straggler,
and `predicted_wait_vs_wait` / `predicted_comm_vs_wait` over the measured wait.

Output (JSON lines): one per run ("stat": "run"); then per shape, rate, variant and metric the
median over rounds with min and max; and per shape and rate the ratio of each variant's tokens/s
to torch-ddp-sparse's, the median of the per-round ratios (side by side in one round).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench", "e2e"))
from cluster import Cluster, ClusterError, machine_idle  # noqa: E402
import job_status  # noqa: E402  (what `parallax status JOB --json` says of a job)
from e2e import (ROW_CACHES, TORCH_TRAINER, eval_loss_from_log, job_metrics,  # noqa: E402
                 torch_job_text, w3_text, write_batches)  # as the one-host bench

PARALLAX = {"parallax-hybrid": "hybrid", "parallax-ps": "ps", "parallax-allgather": "allgather",
            "parallax-allreduce": "allreduce", "parallax-hybrid-noagg": "hybrid",
            "parallax-hybrid-unbatched": "hybrid", "parallax-hybrid-hot": "hybrid",
            "parallax-hybrid-hotauto": "hybrid"}
# A [ps] table for a variant: the planner's choice with the ranks of a host pushing each their own
# sparse gradients (no local aggregation), to see what aggregating costs and saves; with one
# message per variable and partition instead of one per shard (-unbatched); with each PS table's
# 1,024 most frequent sampled rows on every worker, all-reduced (-hot: the per-row hybrid forced),
# or as many as the planner's cost model chooses (-hotauto; schemas/job.md, [ps] hot_rows).
PS_KEYS = {"parallax-hybrid-noagg": ["local_aggregation = false"],
           "parallax-hybrid-unbatched": ["batch = false"],
           "parallax-hybrid-hot": ["hot_rows = 1024"],
           "parallax-hybrid-hotauto": ['hot_rows = "auto"']}
# Asynchronous variants (consistency = "async"): the planner's choice, and with the row cache
# (-cacheS: `[ps] cache_staleness = S`; -cacheSv: with `cache_rule = "version"` too).
ASYNC = ["parallax-hybrid-async"] + [f"parallax-hybrid-async-{c}" for c in ROW_CACHES]
for _name in ASYNC:
    PARALLAX[_name] = "hybrid"
for _cache, _keys in ROW_CACHES.items():
    PS_KEYS[f"parallax-hybrid-async-{_cache}"] = list(_keys)
TORCH = {"torch-ddp-sparse": dict(sparse=True), "torch-ddp-dense": dict(sparse=False),
         "torch-ddp-nosync": dict(sparse=True, no_sync=True)}
# The PyTorch front-end (`parallax.torch`): the torch side's W3 model trained through Parallax
# (bench/e2e/w3_parallax_torch.py) -> arch.
FRONTEND = {"parallax-torch-hybrid": "hybrid"}

# Runs at the first rate only: it sends nothing.
RATE_INDEPENDENT = {"torch-ddp-nosync"}

FULL_VARIANTS = ([v for v in PARALLAX if v not in ASYNC] + list(FRONTEND)
                 + ["torch-ddp-sparse", "torch-ddp-nosync"])
SHORT_VARIANTS = ["parallax-hybrid", "torch-ddp-sparse"]
FULL_SHAPES = "2:2,4:4,8:8,8:2"
SHORT_SHAPES = "8:8"
METRICS = ("tokens_per_s", "step_ms", "loss_last20", "eval_loss", "compute_ms", "comm_wait_ms",
           "straggler_ms", "last_rank_wait_ms",
           "predicted_comm_ms", "predicted_straggler_ms", "predicted_wait_ms",
           "predicted_comm_vs_wait", "predicted_wait_vs_wait",
           "link_bytes_per_step", "predicted_link_bytes",
           "expected_link_bytes", "link_sent_bytes_per_step", "link_received_bytes_per_step",
           "link_vs_plan_link", "link_vs_plan_paths", "link_util_max", "link_util_mean",
           "cpu_ms_per_step", "cpu_ms_per_step_trainer", "cpu_ms_per_step_ps",
           "cpu_ms_per_step_agent", "cpu_ms_per_step_coordinator", "cpu_ms_per_step_peer",
           "machine_idle_frac", "ps_host_link_bytes_per_step", "ps_host_link_util_max",
           "pull_bytes_per_worker_per_step", "ps_requests_per_worker_per_step",
           "row_cache_hit_rate")


def load1():
    return round(os.getloadavg()[0], 2)


def rate_bits(rate):
    for suffix, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if rate.endswith(suffix):
            return int(float(rate[: -len(suffix)]) * scale)
    return int(rate)


# ---- Parallax


def round_seed(args, rnd):
    """[model] seed of round `rnd` (both sides: the Parallax job's, and the peer's batches file
    and draws): 1, or FIRST + rnd with --seed-per-round [FIRST]."""
    return args.seed_per_round + rnd if args.seed_per_round else 1


def job_text(args, workers, arch, rate, ps_keys=(), seed=1, consistency="sync"):
    """examples/w3.toml for this run: only workers, arch, consistency, steps, batch, the seed and
    bookkeeping change; [plan] link_bytes_per_s is the shaped rate (no [plan] at all with
    --measured-figures); `ps_keys`, when given, make a [ps] table."""
    more = [(r'(?m)^\[model\]$', f"[model]\nseed = {seed}")] if seed != 1 else []
    if consistency != "sync":
        more.append((r'(?m)^consistency = "sync"', f'consistency = "{consistency}"'))
    text = w3_text(workers, arch, args.warmup + args.steps, args.batch, args.data, more,
                   eval_tokens=args.eval_tokens or 1, metrics_every=args.metrics_every)
    ps = "\n[ps]\n" + "\n".join(ps_keys) + "\n" if ps_keys else ""
    return text + ps + plan_table(args, rate)


def frontend_job_text(args, workers, arch, rate, workdir, ps_keys=(), seed=1):
    """The job file bench/e2e/e2e.py writes for parallax-torch-hybrid, for this run: `workers`
    ranks, --batch, --warmup + --steps, the round's seed and the batches file the DDP ranks read
    (batches_file), `ps_keys` as its [ps] table and the [plan] table of job_text. Puts a copy of
    the trainer in `workdir`, next to the job file, where the agents may execute it."""
    shutil.copy(TORCH_TRAINER, workdir)
    batches = batches_file(args, workers, workdir, seed)
    text = torch_job_text(arch, args.warmup + args.steps, batches, f"{args.data}/brown/vocab.tsv",
                          seed, workers=workers, batch=args.batch, ps=ps_keys)
    return text + plan_table(args, rate)


def plan_table(args, rate):
    """[plan] link_bytes_per_s = the shaped rate / 8, with --plan's other keys; "" with
    --measured-figures."""
    if args.measured_figures:
        return ""
    plan = [f"link_bytes_per_s = {rate_bits(rate) / 8:.6g}"]
    if args.plan:
        with open(args.plan, encoding="utf-8") as f:
            plan += [l for l in f.read().splitlines()
                     if l.strip() and not l.startswith(("[", "#", "link_bytes_per_s"))]
    return "\n[plan]\n" + "\n".join(plan) + "\n"


def prediction(args, job, workers, hosts, coordinator=None, ps_hosts=0):
    """The cost model's figures for the job's plan (`parallax plan --json`); with `coordinator`,
    the figures measured on the cluster (`--from-coordinator`)."""
    argv = [os.path.join(args.bin, "parallax")]
    argv += ["--coordinator", coordinator] if coordinator else []
    argv += ["plan", job, "--json", "--workers", str(workers), "--hosts", str(hosts)]
    argv += ["--ps-hosts", str(ps_hosts)] if ps_hosts else []
    argv += ["--from-coordinator"] if coordinator else []
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"matrix: parallax plan {job} failed:\n{r.stderr[-2000:]}")
    plan = json.loads(r.stdout)
    try:
        by_path = plan["plan_bytes_per_worker_by_path"]
        straggler = plan["figures"].get("sync_straggler_s", {})
        return dict(predicted_comm_ms=1000.0 * plan["predicted_seconds_per_step"]["plan"],
                    predicted_straggler_ms=1000.0 * straggler.get("value", 0.0),
                    predicted_straggler_source=straggler.get("source", "not in this build"),
                    predicted_link_bytes=plan["total_bytes_per_host_link"]["plan"],
                    predicted_worker_bytes=plan["total_bytes_per_worker"]["plan"],
                    expected_link_bytes=link_bytes_from_plan(
                        by_path, workers, hosts, plan.get("allreduce_shared_memory", False),
                        ps_hosts),
                    predicted_paths={v["name"]: v["path"] for v in plan["variables"]},
                    figures={k: dict(value=v["value"], source=v["source"])
                             for k, v in plan["figures"].items()})
    except KeyError as e:
        sys.exit(f"matrix: `parallax plan --json` has no {e} (its format changed?)")


def link_bytes_from_plan(by_path, workers, hosts, allreduce_shared_memory=False, ps_hosts=0):
    """What the plan's bytes per worker (by path, sent + received) put on one direction of a
    host's link, given where they go on this cluster: ranks fill hosts in order (the
    coordinator's placement), so a ring collective (Gloo's all-reduce and all-gather) crosses
    each host's link once each way with one rank's half of its bytes; PS shards are one per
    host, so (H-1)/H of the L = N/H workers' PS bytes leave the host, and as much comes back
    from its shard's remote clients. With `allreduce_shared_memory` (`parallax plan --json`
    says so where a host runs several ranks) only a host's first rank all-reduces over the
    network, so the plan's all-reduce bytes per worker are that rank's divided by the L ranks
    of its host: the link carries L times half of them. With `ps_hosts` the shards run on hosts
    of their own: all of the L workers' PS bytes cross the worker host's link, half each way.
    Headers of TCP/IP and Ethernet not included."""
    per_host = workers // hosts
    if ps_hosts:
        collectives = 0.0
        if hosts >= 2:
            allreduce_ranks = per_host if allreduce_shared_memory else 1
            collectives = (allreduce_ranks * by_path.get("allreduce", 0.0) / 2
                           + by_path.get("allgather", 0.0) / 2)
        return collectives + per_host * by_path.get("ps", 0.0) / 2
    if hosts < 2:
        return 0.0
    allreduce_ranks = per_host if allreduce_shared_memory else 1
    return (allreduce_ranks * by_path.get("allreduce", 0.0) / 2
            + by_path.get("allgather", 0.0) / 2
            + per_host * (hosts - 1) / hosts * by_path.get("ps", 0.0))


def stored_plan(status):
    """The plan the job ran with (rank 0's planner, its last attempt): "plan" of its status
    object (`parallax status JOB --json`); None when it stored none."""
    return status.get("plan")


def stored_paths(plan):
    """The paths of a stored plan (stored_plan), by variable name; None for no plan."""
    if plan is None:
        return None
    return {v["name"]: v.get("path") for v in plan.get("variables", [])}


def stored_prediction(plan):
    """The communication seconds per step and the wait for the slowest rank that a stored plan
    (stored_plan) predicted (what `prediction` gives, less the bytes, which a stored plan does
    not carry as figures); {} for no plan."""
    if plan is None or "predicted_comm_s" not in plan:
        return {}
    return dict(predicted_comm_ms=1000.0 * plan["predicted_comm_s"],
                predicted_straggler_ms=1000.0 * plan.get("cost", {}).get("sync_straggler_s", 0.0),
                predicted_straggler_source=plan.get("figure_sources", {}).get(
                    "straggler", "not in this build"))


def straggler_figures(status, first, end):
    """What of the mean wait per step is waiting for the slowest rank's compute (sync: every
    rank's next pull waits for every rank's push): per step, the slowest rank's compute time
    less the mean over ranks (`straggler_ms`), and the wait of the rank that waited least, the
    one whose push came last (`last_rank_wait_ms`: communication with no straggler in it);
    means over steps first..end-1 of the metric points of `status` (the job's object of
    `parallax status JOB --json --points`)."""
    steps = {}
    for p in job_status.points_between(status, first, end):
        v = p["values"]
        steps.setdefault(p["step"], []).append(
            (v.get("compute_ms", 0.0), v.get("dense_wait_ms", 0.0) + v.get("sparse_wait_ms", 0.0)))
    if not steps:
        return {}
    return dict(straggler_ms=statistics.mean(max(c for c, _ in r) - statistics.mean(c for c, _ in r)
                                             for r in steps.values()),
                last_rank_wait_ms=statistics.mean(min(w for _, w in r) for r in steps.values()))


def sample(cluster, job_id, ranks, step):
    """(step, link bytes, time, CPU) once every rank reported `step`: the counters are read
    between two looks at the ranks' steps, and the step is the mean of the two."""
    before = cluster.wait_step(job_id, ranks, step)
    counters = cluster.link_bytes()
    now = time.monotonic()
    cpu = cpu_sample(cluster)
    return (before + cluster.min_step(job_id, ranks)) / 2, counters, now, cpu


def run_parallax(args, cluster, workers, hosts, impl, arch, rate, workdir, rnd, frontend=False):
    """One Parallax job on the cluster: W3's `lm` model, or with `frontend` the torch model
    through parallax.torch (frontend_job_text; the cluster's agents must be allowed to execute
    from `workdir`). Its figures; raises ClusterError unless it ends SUCCEEDED."""
    ps_hosts = cluster.ps_hosts
    name = f"{impl}-{workers}x{hosts}{f'+{ps_hosts}' if ps_hosts else ''}-{rate}-{rnd}"
    job = os.path.join(workdir, f"{name}.toml")
    ps_keys = list(PS_KEYS.get(impl, ())) + (['hosts = "ps"'] if ps_hosts else [])
    seed = round_seed(args, rnd)
    text = (frontend_job_text(args, workers, arch, rate, workdir, ps_keys, seed) if frontend
            else job_text(args, workers, arch, rate, ps_keys, seed,
                          "async" if impl in ASYNC else "sync"))
    with open(job, "w", encoding="utf-8") as f:
        f.write(text)
    # The plan the job's rank 0 makes, from the same figures (a plan from the defaults could
    # choose other paths: the agents' loopback and shared-memory figures are ~17x and ~7x the
    # defaults). With --measured-figures the prediction is made again once the job ran: with the
    # per-call figures its own trainers measured at rendezvous (the plan it ran with had the
    # previous job's). The wait for the slowest rank is measured over a sync job's steps, so it
    # is taken from the plan made before the job: an earlier job's of as many workers on as many
    # hosts (none in a shape's first run).
    before = prediction(args, job, workers, hosts, coordinator=cluster.address,
                        ps_hosts=ps_hosts) if not frontend else {}
    pred = before
    job_id = cluster.submit(job)
    total = args.warmup + args.steps
    # The warm-up steps are 0..warmup-1; stop 3 steps before the end, clear of the shutdown
    # (with a point every K steps: at the point K steps before the last).
    k = 1 if frontend else args.metrics_every
    s0, b0, t0, cpu0 = sample(cluster, job_id, workers, args.warmup - 1)
    s1, b1, t1, cpu1 = sample(cluster, job_id, workers, total - 3 if k == 1 else total - 1 - k)
    end = cluster.wait(job_id, timeout=args.timeout)
    if end["state"] != "SUCCEEDED":
        raise ClusterError(f"{name}: job {job_id} ended {end['state']}:\n{json.dumps(end)}\n"
                           + cluster.logs())
    status = cluster.status(job_id, points=True)  # its metric points and the plan it ran with
    plan = stored_plan(status)
    if frontend:  # `parallax plan` cannot plan it: the plan its rank 0 made and stored
        pred = stored_prediction(plan)
    elif args.measured_figures:
        pred = prediction(args, job, workers, hosts, coordinator=cluster.address,
                          ps_hosts=ps_hosts)
        pred["predicted_straggler_ms"] = before["predicted_straggler_ms"]
        pred["predicted_straggler_source"] = before["predicted_straggler_source"]
    if pred:
        pred["predicted_wait_ms"] = pred["predicted_comm_ms"] + pred["predicted_straggler_ms"]
    m = job_metrics(status, total, args.warmup, args.batch)
    out = dict(tokens_per_s=m["tokens_per_s"], step_ms=m["step_ms"],
               loss_last20=m["loss_last20"], compute_ms=m["compute_ms"],
               dense_wait_ms=m["dense_wait_ms"], sparse_wait_ms=m["sparse_wait_ms"],
               comm_wait_ms=m["dense_wait_ms"] + m["sparse_wait_ms"],
               **straggler_figures(status, args.warmup, total),
               worker_bytes_per_step=m["bytes_sent_per_worker_per_step"]
               + sum(m[f"{p}_recv_bytes_per_worker_per_step"]
                     for p in ("allreduce", "allgather", "ps_push", "ps_pull")),
               pull_bytes_per_worker_per_step=m["ps_pull_sent_bytes_per_worker_per_step"]
               + m["ps_pull_recv_bytes_per_worker_per_step"],
               ps_requests_per_worker_per_step=m["ps_requests_per_worker_per_step"],
               row_cache_hit_rate=m["row_cache_hit_rate"])
    out.update(link_figures(b0, b1, s1 - s0, t1 - t0, cluster.rate_bits_per_s, hosts))
    out.update(cpu_figures(cpu0, cpu1, s1 - s0))
    out.update({k: v for k, v in pred.items() if k not in ("predicted_paths", "figures")})
    if args.measured_figures and pred:
        out["figures"] = pred["figures"]
    if pred and out["comm_wait_ms"] > 0:
        out["predicted_comm_vs_wait"] = pred["predicted_comm_ms"] / out["comm_wait_ms"]
        out["predicted_wait_vs_wait"] = pred["predicted_wait_ms"] / out["comm_wait_ms"]
    if "predicted_link_bytes" in pred:
        # Measured per direction (mean over hosts and directions) over the plan's figures.
        measured = out["link_bytes_per_step"] / 2
        out["link_vs_plan_link"] = measured / pred["predicted_link_bytes"]
        # What the trainers' transports counted over what the plan says a worker moves.
        out["worker_vs_plan"] = out["worker_bytes_per_step"] / pred["predicted_worker_bytes"]
        if pred["expected_link_bytes"] > 0:
            out["link_vs_plan_paths"] = measured / pred["expected_link_bytes"]
    if args.eval_tokens and not frontend:
        out["eval_loss"] = parallax_eval_loss(cluster, name, job_id)
    paths = stored_paths(plan)
    out["paths"] = paths
    if "predicted_paths" in pred and paths and pred["predicted_paths"] != paths:
        out["plan_differs"] = pred["predicted_paths"]  # `parallax plan` chose otherwise
    return out


def parallax_eval_loss(cluster, name, job_id):
    """The held-out loss rank 0's trainer printed at the end of the job (`parallax logs`)."""
    log = cluster.cli(["logs", job_id, "--task", "trainer/0"]).stdout
    loss = eval_loss_from_log(log)
    if loss is None:
        raise ClusterError(f"{name}: job {job_id}'s trainer/0 printed no `eval step` line; its "
                           f"log ends with:\n{log[-1500:]}")
    return loss


# ---- PyTorch DDP


_torch_runs = 0


def batches_file(args, workers, workdir, seed=1):
    steps = args.warmup + args.steps
    path = os.path.join(workdir, f"batches-{workers}-{args.batch}-{steps}-{seed}.bin")
    return write_batches(args.bin, f"{args.data}/brown/train.tok", path, 4, args.batch, workers,
                         steps, seed)


def wait_files(paths, procs, timeout, poll=0.005):
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        dead = [p for p in procs if p.poll() not in (None, 0)]
        if dead:
            raise ClusterError(f"a DDP rank exited with {dead[0].returncode}")
        if time.monotonic() > deadline:
            raise ClusterError(f"DDP ranks: {len(paths)} files not there in {timeout} s")
        time.sleep(poll)


def write_flag(directory, name):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
        f.write("1")


def run_torch(args, cluster, workers, hosts, impl, workdir, rnd, sparse, no_sync=False):
    ps_hosts = f"+{cluster.ps_hosts}" if cluster.ps_hosts else ""
    name = f"{impl}-{workers}x{hosts}{ps_hosts}-{cluster.rate}-{rnd}"
    sync = os.path.join(workdir, name)
    os.makedirs(sync)
    seed = round_seed(args, rnd)
    batches = batches_file(args, workers, workdir, seed)
    # A fresh port for every run: the last run's store may still hold its port in TIME_WAIT.
    global _torch_runs
    _torch_runs += 1
    port = 20000 + (os.getpid() * 7 + _torch_runs * 131) % 30000
    init = f"tcp://{cluster.host_address(0)}:{port}"
    per_host = workers // hosts
    procs = []
    logs = []
    try:
        for r in range(workers):
            h = r // per_host
            argv = ["/usr/bin/python3", os.path.join(ROOT, "bench", "peers", "w3_torch.py"),
                    "--batches", batches, "--vocab", f"{args.data}/brown/vocab.tsv",
                    "--rank", str(r), "--init", init, "--sync-dir", sync,
                    "--warmup", str(args.warmup), "--steps", str(args.steps),
                    "--timeout", str(args.timeout), "--seed", str(seed)]
            argv += ["--sparse"] if sparse else []
            argv += ["--no-sync"] if no_sync else []
            argv += ["--eval-tokens", str(args.eval_tokens), "--heldout",
                     f"{args.data}/brown/heldout.tok"] if args.eval_tokens and not no_sync else []
            log = open(os.path.join(sync, f"rank-{r}.log"), "w", encoding="utf-8")
            logs.append(log)
            env = dict(os.environ, GLOO_SOCKET_IFNAME=cluster.host_ifname(h),
                       OPENBLAS_NUM_THREADS="1")
            procs.append(cluster.popen_in_host(h, argv, stdout=log, stderr=subprocess.STDOUT,
                                               env=env))
        wait_files([os.path.join(sync, f"ready-{r}") for r in range(workers)], procs,
                   args.timeout)
        b0, t0 = cluster.link_bytes(), time.monotonic()
        cpu0 = cpu_sample(cluster, procs)
        write_flag(sync, "go")
        done = [os.path.join(sync, f"done-{r}.json") for r in range(workers)]
        # The ranks time themselves; a slower poll only widens the link window a little and
        # leaves the cores to the ranks (as Parallax's wait_step does far from its step).
        wait_files(done, procs, args.timeout, poll=0.05)
        b1, t1 = cluster.link_bytes(), time.monotonic()
        cpu1 = cpu_sample(cluster, procs)
        write_flag(sync, "finish")
        for p in procs:  # rank 0 evaluates before it exits (--eval-tokens)
            if p.wait(timeout=args.timeout) != 0:
                raise ClusterError(f"{name}: a rank exited with {p.returncode}")
    except ClusterError as e:
        tails = "".join(open(os.path.join(sync, f"rank-{r}.log"), encoding="utf-8").read()[-1500:]
                        for r in range(min(2, workers)))
        raise ClusterError(f"{name}: {e}\n{tails}") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    results = []
    for path in done:
        with open(path, encoding="utf-8") as f:
            results.append(json.load(f))
    elapsed = max(r["elapsed"] for r in results)
    losses = [statistics.mean(step) for step in zip(*(r["losses"] for r in results))]
    out = dict(tokens_per_s=workers * args.batch * args.steps / elapsed,
               step_ms=1000.0 * elapsed / args.steps,
               loss_last20=statistics.mean(losses[-20:]) if not no_sync else None)
    if args.eval_tokens and not no_sync:
        with open(os.path.join(sync, "eval-0.json"), encoding="utf-8") as f:
            out["eval_loss"] = json.load(f)["eval_loss"]
    out.update(link_figures(b0, b1, args.steps, t1 - t0, cluster.rate_bits_per_s, hosts))
    out.update(cpu_figures(cpu0, cpu1, args.steps))
    return out


# ---- links


def link_figures(before, after, steps, seconds, rate_bits_per_s, hosts):
    """Per host per step (mean over the `hosts` worker hosts, the first) and utilisation of the
    window [before, after]; the PS hosts after them (if any) as ps_host_*."""
    sent = [(a[0] - b[0]) for a, b in zip(after, before)]
    received = [(a[1] - b[1]) for a, b in zip(after, before)]
    capacity = rate_bits_per_s / 8.0 * seconds
    out = {}
    if len(sent) > hosts:
        ps_sent, ps_received = sent[hosts:], received[hosts:]
        ps_utils = [x / capacity for x in ps_sent + ps_received] if capacity > 0 else [0.0]
        out = dict(ps_host_link_sent_bytes_by_host=[round(x / steps) for x in ps_sent],
                   ps_host_link_received_bytes_by_host=[round(x / steps) for x in ps_received],
                   ps_host_link_bytes_per_step=statistics.mean(
                       s + r for s, r in zip(ps_sent, ps_received)) / steps,
                   ps_host_link_util_max=max(ps_utils))
        sent, received = sent[:hosts], received[:hosts]
    utils = [x / capacity for x in sent + received] if capacity > 0 else [0.0]
    return dict(**out,link_sent_bytes_by_host=[round(x / steps) for x in sent],
                link_received_bytes_by_host=[round(x / steps) for x in received],
                link_sent_bytes_per_step=statistics.mean(sent) / steps,
                link_received_bytes_per_step=statistics.mean(received) / steps,
                link_bytes_per_step=statistics.mean(s + r for s, r in zip(sent, received)) / steps,
                link_bytes_max_host_per_step=max(s + r for s, r in zip(sent, received)) / steps,
                link_util_max=max(utils), link_util_mean=statistics.mean(utils),
                window_s=seconds, window_steps=steps)


# ---- CPU


def cpu_sample(cluster, peer_procs=()):
    """The cluster's CPU seconds by role and the machine's idle and total jiffies, now."""
    return cluster.cpu_seconds([p.pid for p in peer_procs]), machine_idle()


def cpu_figures(before, after, steps):
    """CPU milliseconds per step of the window by role (all hosts' processes together: trainer,
    ps, agent, coordinator; peer for DDP's ranks) and their sum, and the machine's idle share
    over the window (near 0: every core was busy, the run was CPU-bound)."""
    (cpu0, (idle0, total0)), (cpu1, (idle1, total1)) = before, after
    out = {f"cpu_ms_per_step_{role}": 1000.0 * (cpu1[role] - cpu0.get(role, 0.0)) / steps
           for role in cpu1}
    out["cpu_ms_per_step"] = sum(out.values())
    out["machine_idle_frac"] = (idle1 - idle0) / max(total1 - total0, 1)
    return out


# ---- the matrix


def run_one(args, cluster, workers, hosts, impl, rate, workdir, rnd):
    if impl in PARALLAX:
        return run_parallax(args, cluster, workers, hosts, impl, PARALLAX[impl], rate, workdir,
                            rnd)
    if impl in TORCH:
        return run_torch(args, cluster, workers, hosts, impl, workdir, rnd, **TORCH[impl])
    return run_parallax(args, cluster, workers, hosts, impl, FRONTEND[impl], rate, workdir, rnd,
                        frontend=True)


def summarize(rows, emit):
    shape = lambda r: (r["workers"], r["hosts"], r["ps_hosts"], r["rate"])  # noqa: E731
    keys = sorted({shape(r) + (r["impl"],) for r in rows},
                  key=lambda k: (k[0], -k[1], k[2], k[3], k[4]))
    for workers, hosts, ps_hosts, rate, impl in keys:
        mine = [r for r in rows if shape(r) + (r["impl"],) == (workers, hosts, ps_hosts, rate, impl)]
        for metric in METRICS:
            values = [r[metric] for r in mine if r.get(metric) is not None]
            if values:
                emit(dict(impl=impl, workers=workers, hosts=hosts, ps_hosts=ps_hosts, rate=rate,
                          metric=metric,
                          stat="median", runs=len(values), value=round(statistics.median(values), 4),
                          min=round(min(values), 4), max=round(max(values), 4)))
        ratios, eval_diffs, loss_diffs = [], [], []
        for r in mine:
            peer = [p for p in rows if p["impl"] == "torch-ddp-sparse" and p["round"] == r["round"]
                    and shape(p) == (workers, hosts, ps_hosts, rate)]
            if peer and impl != "torch-ddp-sparse":
                ratios.append(r["tokens_per_s"] / peer[0]["tokens_per_s"])
                if r.get("loss_last20") is not None and peer[0].get("loss_last20") is not None:
                    loss_diffs.append(r["loss_last20"] - peer[0]["loss_last20"])
                if r.get("eval_loss") is not None and peer[0].get("eval_loss") is not None:
                    eval_diffs.append(r["eval_loss"] - peer[0]["eval_loss"])
        if loss_diffs:
            # Paired by round (the same seed on both sides); the standard error says whether a
            # difference is more than the rounds' spread.
            sem = statistics.stdev(loss_diffs) / len(loss_diffs) ** 0.5 if len(loss_diffs) > 1 \
                else None
            emit(dict(impl=impl, workers=workers, hosts=hosts, ps_hosts=ps_hosts, rate=rate,
                      metric="loss_last20_vs_torch_ddp_sparse", unit="nats", stat="mean",
                      runs=len(loss_diffs), value=round(statistics.mean(loss_diffs), 4),
                      sem=round(sem, 4) if sem is not None else None,
                      min=round(min(loss_diffs), 4), max=round(max(loss_diffs), 4)))
        if eval_diffs:
            emit(dict(impl=impl, workers=workers, hosts=hosts, rate=rate,
                      metric="eval_loss_vs_torch_ddp_sparse", unit="nats", stat="median",
                      runs=len(eval_diffs), value=round(statistics.median(eval_diffs), 4),
                      min=round(min(eval_diffs), 4), max=round(max(eval_diffs), 4)))
        if ratios:
            emit(dict(impl=impl, workers=workers, hosts=hosts, ps_hosts=ps_hosts, rate=rate,
                      metric="tokens_per_s_vs_torch_ddp_sparse", unit="ratio", stat="median",
                      runs=len(ratios), value=round(statistics.median(ratios), 4),
                      min=round(min(ratios), 4), max=round(max(ratios), 4)))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="directory of the parallax binaries")
    ap.add_argument("--data", default=os.path.join(ROOT, "data"))
    ap.add_argument("--full", action="store_true",
                    help=f"the whole matrix: --shapes {FULL_SHAPES} --rates 1gbit,10gbit "
                    f"--variants {','.join(FULL_VARIANTS)} --runs 3 (each overridable)")
    ap.add_argument("--shapes", help=f"workers:hosts[+ps_hosts],... (default {SHORT_SHAPES}); "
                    "+P adds P hosts for PS shards only, and the Parallax jobs put their shards "
                    "there ([ps] hosts = \"ps\")")
    ap.add_argument("--rates", help="link rates, tc units (default 1gbit)")
    ap.add_argument("--variants", help="comma-separated (default " + ",".join(SHORT_VARIANTS)
                    + "); known: " + ",".join(list(PARALLAX) + list(TORCH) + list(FRONTEND)))
    ap.add_argument("--runs", type=int, help="rounds (default 1; 3 with --full)")
    ap.add_argument("--batch", type=int, default=256, help="per worker, both sides")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40, help="timed steps, after the warm-up")
    ap.add_argument("--plan", help="a file with a [plan] table for every Parallax job "
                    "(its link_bytes_per_s is replaced by the shaped rate)")
    ap.add_argument("--measured-figures", action="store_true",
                    help="no [plan] table in the jobs: the planner's figures are what the agents "
                    "and the trainers measured on the cluster, and the predicted time is made "
                    "after each run, with the figures its trainers measured (--from-coordinator), "
                    "and the wait for the slowest rank an earlier sync run of the shape measured")
    ap.add_argument("--eval-tokens", type=int, default=0,
                    help="held-out loss of the trained model over N positions on both sides "
                    "([model] eval_tokens; the peer's --eval-tokens), off the clock: eval_loss "
                    "(default 0: none)")
    ap.add_argument("--seed-per-round", type=int, nargs="?", const=1, metavar="FIRST",
                    help="round r runs both sides with seed FIRST + r (FIRST 1 by default; "
                         "[model] seed; the peer's batches file and draws), so the rounds' "
                         "losses are independent draws and the summary's "
                         "loss_last20_vs_torch_ddp_sparse is their paired difference; default: "
                         "seed 1 in every round")
    ap.add_argument("--metrics-every", type=int, default=1, metavar="K",
                    help="the Parallax jobs' [trainer] metrics_every (default 1: a metric point "
                    "every step, which the per-step figures need, at the cost of a coordinator "
                    "RPC per rank and step; the job file's own default is 10). K > 1 must divide "
                    "20 and --steps; the warm-up grows to the next step after a point (both "
                    "sides), and straggler_ms is then over points, not steps")
    ap.add_argument("--workdir", help="keep job files, logs and databases here")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per phase of a run")
    args = ap.parse_args()
    args.shapes = args.shapes or (FULL_SHAPES if args.full else SHORT_SHAPES)
    args.rates = args.rates or ("1gbit,10gbit" if args.full else "1gbit")
    args.variants = args.variants or ",".join(FULL_VARIANTS if args.full else SHORT_VARIANTS)
    args.runs = args.runs or (3 if args.full else 1)
    args.data = os.path.abspath(args.data)
    if args.measured_figures and args.plan:
        ap.error("--measured-figures and --plan exclude each other")
    if args.steps < 20:
        ap.error("--steps must be at least 20 (the loss is the mean of the last 20)")
    if args.warmup < 2:
        ap.error("--warmup must be at least 2")
    k = args.metrics_every
    if k < 1 or 20 % k or args.steps % k:
        ap.error(f"--metrics-every {k}: must be >= 1 and divide 20 and --steps ({args.steps})")
    # The timed steps start right after a metric point (a step that is a multiple of K).
    args.warmup = -(-(args.warmup - 1) // k) * k + 1
    if args.eval_tokens < 0:
        ap.error("--eval-tokens must be 0 (no evaluation) or more")
    shapes = []
    for s in args.shapes.split(","):
        n, _, rest = s.partition(":")
        h, plus, p = rest.partition("+")
        if not (n.isdigit() and h.isdigit()) or int(h) < 1 or int(n) % int(h) or \
                (plus and (not p.isdigit() or int(p) < 1)):
            ap.error(f"--shapes: '{s}' is not workers:hosts[+ps_hosts] with hosts dividing "
                     "workers and ps_hosts >= 1")
        shapes.append((int(n), int(h), int(p) if plus else 0))
    args.shapes = shapes
    for v in args.variants.split(","):
        if v not in PARALLAX and v not in TORCH and v not in FRONTEND:
            ap.error(f"unknown variant '{v}'")
    args.variants = args.variants.split(",")
    args.rates = args.rates.split(",")
    return args


def main():
    args = parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="px-cluster-matrix-")
    os.makedirs(workdir, exist_ok=True)

    def emit(obj):
        print(json.dumps(dict(bench="cluster", **obj)), flush=True)

    common = dict(batch=args.batch, warmup=args.warmup, steps=args.steps)
    rows = []
    started = time.monotonic()
    for workers, hosts, ps_hosts in args.shapes:
        cdir = tempfile.mkdtemp(prefix=f"cluster-{workers}x{hosts}+{ps_hosts}-", dir=workdir)
        # The agents may execute parallax-torch-hybrid's trainer, next to its job file.
        with Cluster(args.bin, hosts, args.rates[0], slots=workers // hosts, workdir=cdir,
                     ps_hosts=ps_hosts, allow_exec=[workdir]) as c:
            for rate in args.rates:
                c.reshape(rate)
                for rnd in range(args.runs):
                    for impl in args.variants:
                        if impl in RATE_INDEPENDENT and rate != args.rates[0]:
                            continue
                        before, t = load1(), time.monotonic()
                        r = run_one(args, c, workers, hosts, impl, rate, workdir, rnd)
                        row = dict(impl=impl, workers=workers, hosts=hosts, ps_hosts=ps_hosts,
                                   rate=rate,
                                   rate_bits_per_s=rate_bits(rate), round=rnd, **common,
                                   load1_before=before, load1_after=load1(),
                                   wall_s=round(time.monotonic() - t, 1), **r)
                        rows.append(row)
                        emit(dict(stat="run", **{k: round(v, 4) if isinstance(v, float) else v
                                                 for k, v in row.items()}))
    summarize(rows, emit)
    emit(dict(event="matrix", wall_s=round(time.monotonic() - started, 1), workdir=workdir))


if __name__ == "__main__":
    main()
