#!/usr/bin/python3
"""W3 end to end: Parallax (hybrid, allreduce, allgather, ps, ...) side by side with PyTorch DDP.

Run through bench/e2e/run.sh (it checks the data, the binaries and torch first):

  bench/e2e/run.sh [--runs 5] [--steps 310] [--warmup 10] [--variants LIST]

Each round runs every variant once, in order, so the variants alternate; --runs rounds. A
Parallax variant is examples/w3.toml with [job] arch changed (and, for the ones on the PS,
[ps] shards = 1 and local_aggregation; -unbatched, -hot, -hotauto and the async variant's
row caches -cacheS and -cacheSv, S = 1, 4, 16, add the [ps] keys of PS_KEYS), written into a
temporary directory with `[trainer] metrics_every = 1`, and run with `parallax run`. Its figures
come from the job's own metric points (`parallax status 1 --json --points`, from a
parallax-coordinator started on the run's state directory once it ended:
bench/e2e/job_status.py): per step, the rank's
samples/s and loss, and bytes sent and received per path counted by the trainer
(allreduce/allgather: the bytes on the collectives' sockets, none for an all-reduce through
shared memory; ps_push/ps_pull: bytes at the ZeroMQ transport). PyTorch variants run
bench/peers/w3_torch.py --runs 1 (bytes from `ss` socket counters). "parallax-torch-hybrid" is
the PyTorch side's model, data and loop on Parallax (bench/e2e/w3_parallax_torch.py, the same
batches file, parallax.torch in place of DDP), run with `parallax run` like the other Parallax
variants: with the same torch model on both sides, its ratio to torch-ddp-sparse is the
communication system's alone.

Same measure on both sides: warm-up = steps 0..warmup-1, timed = the next `steps - warmup`
steps; tokens/s = workers x batch x timed steps / (the slower rank's time over the timed steps);
loss = mean over the last 20 steps of the mean of the ranks' batch losses.

The torch-ddp-* variants draw Parallax's initial values and negatives (bench/peers/
parallax_draws.py, w3_torch.py's default), so they follow the parallax-* variants' trajectory;
parallax-torch-hybrid draws from torch's RNG (torch.manual_seed(seed), the W3 class), another
trajectory of the same model. W3's SGD at lr 0.5 is chaotic: from identical values, runs whose
arithmetic differs only in the order of float additions agree to 1e-6 for the first few dozen steps
and then part, so one run's loss is one draw. --seed-per-run runs round r with seed r + 1 on both
sides: the Parallax jobs' [model] seed (the lm model's initial values, negatives and data order),
the torch model's variants' seed (--seed of w3_torch.py, [user] seed of parallax-torch-hybrid), and
the batches file they read (the data order of Parallax's ranks at that seed: --batches itself when
it was written with that seed, else one of its shape written into the workdir with parallax-data
batches), so each round's Parallax run and its peer draw alike. The end adds the paired difference
parallax-torch-hybrid − torch-ddp-sparse per round and its mean (a line "loss_last20_gap"). Every
run line says the seed it ran with ("seed") and the seed of its data order ("data_seed").

--baseline-bin DIR also runs every Parallax variant with the binaries in DIR (another build, say
of the commit before a change), as "<variant>@baseline", right after the variant in every round,
and ends with the ratio of their tokens/s (its runs are read with --bin's `parallax` and
coordinator, as the others). --timeline records every Parallax run's step timeline and adds
"dense_wait_after_last_arrival_ms" (the mean over timed steps) and its median: per step, for
each fusion bucket, the time from the last rank handing it to its all-reduce until the last rank
has the result, summed over the step's buckets (what the collective itself costs, without the
wait for a slower rank).

Output: one JSON line per run ("stat": "run") and, at the end, per variant and metric the
median/min/max lines:
  {"bench":"e2e","impl":"parallax-hybrid","metric":"tokens_per_s","unit":"tokens/s",
   "stat":"median","runs":5,"value":...,"min":...,"max":...}
"""

import argparse
import json
import math
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import job_status  # noqa: E402  (what `parallax status JOB --json` says of a job)

PATHS = ("allreduce", "allgather", "ps_push", "ps_pull")
# Keys of a run's figures that say what it ran with, not what it measured (no median line).
SEED_KEYS = ("seed", "data_seed")
BATCHES_MAGIC = b"PXBAT001"  # docs/DATA.md, "Batches file"

# Variant -> (arch, consistency, staleness, per-variable overrides: a name goes to the PS, a
# (name, path) pair to that path). "hybrid-ps" is the hybrid plan with the three embedding
# tables forced onto the PS (the bytes-only planner put them on all-gather at 2 workers;
# docs/PERFORMANCE.md); "hybrid-ps-ar" also pins the dense MLP to all-reduce (what the
# time-based planner chooses for it anyway; calibrate.py uses the same overrides).
EMBEDDINGS = ("lm/input_embedding", "lm/output_embedding", "lm/output_bias")
DENSE_ON_ALLREDUCE = tuple((name, "allreduce") for name in (
    "lm/hidden/weights", "lm/hidden/bias", "lm/projection/weights", "lm/projection/bias"))
PARALLAX = {
    "parallax-hybrid": ("hybrid", "sync", None, ()),
    "parallax-allreduce": ("allreduce", "sync", None, ()),
    "parallax-allgather": ("allgather", "sync", None, ()),
    "parallax-ps": ("ps", "sync", None, ()),
    "parallax-hybrid-ps": ("hybrid", "sync", None, EMBEDDINGS),
    "parallax-hybrid-ps-ar": ("hybrid", "sync", None, EMBEDDINGS + DENSE_ON_ALLREDUCE),
    "parallax-hybrid-ps-async": ("hybrid", "async", None, EMBEDDINGS),
    "parallax-hybrid-ps-ssp": ("hybrid", "ssp", 4, EMBEDDINGS),
}
# "-shm": the same job with [ps] shared_memory = true (rows to and from the
# same-machine shard through shared memory, schemas/ps_wire.md).
for _name in ("parallax-hybrid", "parallax-ps", "parallax-hybrid-ps"):
    PARALLAX[_name + "-shm"] = PARALLAX[_name]
# More [ps] keys of a variant: "-unbatched" sends one message per variable and partition instead
# of one per shard; "-hot" keeps each PS table's 1,024 most frequent sampled rows on every worker,
# all-reduced with the dense gradients (the per-row hybrid forced), "-hotauto" as many as the
# planner's cost model chooses (schemas/job.md, [ps] batch and hot_rows).
PS_KEYS = {"parallax-hybrid-ps-unbatched": ("batch = false",),
           "parallax-hybrid-ps-ar-hot": ("hot_rows = 1024",),
           "parallax-hybrid-ps-ar-hotauto": ('hot_rows = "auto"',)}
# The row cache (for an async variant; bench/cluster/matrix.py's too): "cacheS" keeps pulled
# rows S steps (`[ps] cache_staleness`), "cacheSv" checks a held row's version past them
# (`cache_rule = "version"`).
ROW_CACHES = {f"cache{s}{rule}": (f"cache_staleness = {s}",) + keys
              for s in (1, 4, 16) for rule, keys in (("", ()), ("v", ('cache_rule = "version"',)))}
for _cache, _keys in ROW_CACHES.items():
    PS_KEYS[f"parallax-hybrid-ps-async-{_cache}"] = _keys
for _name, _keys in PS_KEYS.items():
    PARALLAX[_name] = PARALLAX[_name.rsplit("-", 1)[0]]
TORCH = {"torch-ddp-dense": False, "torch-ddp-sparse": True}
# Parallax running the PyTorch model (bench/e2e/w3_parallax_torch.py) -> arch.
PARALLAX_TORCH = {"parallax-torch-hybrid": "hybrid"}
# The trainer of parallax-torch-hybrid, and its job file (torch_job_text).
TORCH_TRAINER = os.path.join(ROOT, "bench", "e2e", "w3_parallax_torch.py")
TORCH_JOB = """[job]
name = "w3-torch"
workers = {workers}
arch = "{arch}"
consistency = "sync"

[trainer]
command = ["./{trainer}"]
steps = {steps}
batch_size = {batch}
metrics_every = 1

[optimizer.dense]
type = "sgd"
lr = 0.5

[optimizer.sparse]
type = "sgd"
lr = 0.5
{ps}
[user]
repo = "{root}"
batches = "{batches}"
vocab = "{vocab}"
seed = {seed}
"""
DEFAULT_VARIANTS = ["parallax-hybrid", "parallax-allreduce", "parallax-allgather", "parallax-ps",
                    "parallax-hybrid-ps", "torch-ddp-dense", "torch-ddp-sparse",
                    "parallax-torch-hybrid"]


def load1():
    return os.getloadavg()[0]


def job_text(base, arch, consistency, staleness, overrides, steps, workers, shm=False,
             ps_keys=()):
    """examples/w3.toml with the variant's settings (absolute data path); `ps_keys`: more lines
    of its [ps] table."""
    text = base
    text = re.sub(r'(?m)^arch = "[a-z]+"', f'arch = "{arch}"', text)
    text = re.sub(r'(?m)^consistency = "[a-z]+"', f'consistency = "{consistency}"'
                  + (f"\nstaleness = {staleness}" if staleness else ""), text)
    text = re.sub(r"(?m)^workers = \d+", f"workers = {workers}", text)
    text = re.sub(r"(?m)^steps = \d+", f"steps = {steps}\nmetrics_every = 1", text)
    text = re.sub(r'(?m)^data = ".*"', f'data = "{ROOT}/data/brown/train.tok"', text)
    text = re.sub(r"(?m)^eval_tokens = \d+", "eval_tokens = 1", text)
    # One shard, one partition per table: a fixed number skips the partition search.
    text += "\n[ps]\nshards = 1\npartitions = 1\n" + ("shared_memory = true\n" if shm else "")
    text += "".join(key + "\n" for key in ps_keys)
    for name in overrides:
        name, path = (name, "ps") if isinstance(name, str) else name
        text += f'\n[[variable]]\nname = "{name}"\npath = "{path}"\n'
    return text


def with_model_seed(text, seed):
    """Job `text` with [model] seed = `seed`: the table's seed line replaced, or one added as its
    first key."""
    head = re.search(r"(?m)^\[model\][ \t]*(#.*)?$", text)
    if not head:
        sys.exit("e2e: the job has no [model] table to set the seed of")
    after = re.compile(r"(?m)^[ \t]*\[").search(text, head.end())
    stop = after.start() if after else len(text)
    body, n = re.subn(r"(?m)^seed[ \t]*=.*$", f"seed = {seed}", text[head.end():stop])
    if n == 0:
        body = f"\nseed = {seed}" + body
    return text[:head.end()] + body + text[stop:]


def model_seed(text):
    """The [model] seed job `text` runs with (1, the models' default, when it sets none;
    schemas/job.md)."""
    return tomllib.loads(text).get("model", {}).get("seed", 1)


def w3_text(workers, arch, steps, batch, data, more=(), eval_tokens=1, metrics_every=1):
    """examples/w3.toml with `workers`, `arch`, `steps` (and `metrics_every`, 1 by default: a
    metric point every step), `batch_size`, the data under the directory `data` (absolute),
    `eval_tokens` (1 by default: the end's held-out evaluation all but skipped), and the
    (pattern, replacement) pairs of `more`; exits naming a pattern that matches no line of the
    file."""
    with open(os.path.join(ROOT, "examples", "w3.toml"), encoding="utf-8") as f:
        text = f.read()
    subs = [(r"(?m)^workers = \d+", f"workers = {workers}"),
            (r'(?m)^arch = "[a-z]+"', f'arch = "{arch}"'),
            (r"(?m)^steps = \d+.*$", f"steps = {steps}\nmetrics_every = {metrics_every}"),
            (r"(?m)^batch_size = \d+", f"batch_size = {batch}"),
            (r'(?m)^data = ".*"', f'data = "{data}/brown/train.tok"'),
            (r"(?m)^eval_tokens = \d+.*$", f"eval_tokens = {eval_tokens}")] + list(more)
    for pattern, value in subs:
        text, n = re.subn(pattern, value, text)
        if n != 1:
            sys.exit(f"e2e: examples/w3.toml has no line matching {pattern}")
    return text


EVAL_LINE = re.compile(r"^eval step (\d+) perplexity ([0-9.eE+-]+|inf|nan)", re.M)


def eval_loss_from_log(text):
    """The held-out loss (nats) of the last `eval step S perplexity P` line of an `lm` trainer's
    output (rank 0's; trainer/models/train_loop.cc): log P, or None when there is none."""
    found = EVAL_LINE.findall(text)
    return math.log(float(found[-1][1])) if found else None


def parallax_run(args, impl, workdir, run):
    name, _, baseline = impl.partition("@")
    arch, consistency, staleness, overrides = PARALLAX[name]
    with open(os.path.join(ROOT, "examples", "w3.toml"), encoding="utf-8") as f:
        base = f.read()
    text = job_text(base + plan_table(args), arch, consistency, staleness, overrides, args.steps,
                    2, shm=name.endswith("-shm"), ps_keys=PS_KEYS.get(name, ()))
    if args.seed_per_run:
        text = with_model_seed(text, round_seed(args, run))
    seed = model_seed(text)
    return run_job(args, impl, workdir, run, text, dict(seed=seed, data_seed=seed),
                   baseline=bool(baseline))


def parallax_torch_run(args, impl, workdir, run):
    """W3's PyTorch model on Parallax: w3_parallax_torch.py next to the job file in `workdir`
    (the agent runs programs under the job file's directory)."""
    shutil.copy(TORCH_TRAINER, workdir)
    batches = batches_for(args, workdir, run)
    text = torch_job_text(PARALLAX_TORCH[impl], args.steps, os.path.abspath(batches),
                          os.path.join(ROOT, "data", "brown", "vocab.tsv"), round_seed(args, run))
    return run_job(args, impl, workdir, run, text + plan_table(args),
                   dict(seed=round_seed(args, run), data_seed=batches_header(batches)[4]))


def torch_job_text(arch, steps, batches, vocab, seed, workers=2, batch=256,
                   ps=("shards = 1", "partitions = 1")):
    """The job file of the PyTorch model on Parallax: TORCH_TRAINER (run as "./" + its name, so
    a copy of it goes next to the job file) on `workers` ranks with `arch`, `steps` steps in
    all, `batch` per rank (the batches file's: absolute paths to it and to vocab.tsv), the
    model's `seed`, and `ps`'s keys as its [ps] table (none when empty: the defaults)."""
    table = "\n[ps]\n" + "\n".join(ps) + "\n" if ps else ""
    return TORCH_JOB.format(workers=workers, arch=arch, trainer=os.path.basename(TORCH_TRAINER),
                            steps=steps, batch=batch, ps=table, root=ROOT, batches=batches,
                            vocab=vocab, seed=seed)


def plan_table(args):
    """The machine's [plan] figures (bench/e2e/calibrate.sh) for the planner, or nothing."""
    if not args.plan:
        return ""
    with open(args.plan, encoding="utf-8") as f:
        return "\n" + f.read() + "\n"


def run_job(args, impl, workdir, run, text, seeds, baseline=False):
    """`parallax run` of job `text` in `workdir` (with --baseline-bin's binaries when
    `baseline`); its figures (job_metrics) and `seeds` (SEED_KEYS: what it ran with)."""
    job = os.path.join(workdir, f"{impl}-{run}.toml")
    with open(job, "w", encoding="utf-8") as f:
        f.write(text)
    state = job_status.fresh_state_dir(os.path.join(workdir, f"{impl}-{run}.state"))
    binary = os.path.join(args.baseline_bin if baseline else args.bin, "parallax")
    cmd = [binary, "run", "--state-dir", state]
    timeline = os.path.join(workdir, f"{impl}-{run}.timeline")
    if args.timeline:
        cmd += ["--timeline", timeline]
    proc = subprocess.run(cmd + [job], capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit(f"e2e: {impl} run {run} failed (exit {proc.returncode}); its state is in "
                 f"{state}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    # Read with this build's CLI and coordinator (a --baseline-bin build may predate --points).
    out = job_metrics(finished_status(args.bin, state), args.steps, args.warmup, batch=256)
    out.update(seeds)
    if args.timeline:
        per_step = dense_wait_after_last_arrival(timeline, args.steps, args.warmup)
        out["dense_wait_after_last_arrival_ms"] = statistics.mean(per_step)
        out["dense_wait_after_last_arrival_median_ms"] = statistics.median(per_step)
    return out


def finished_status(bin_dir, state):
    """Job 1 of the finished `parallax run --state-dir state`, with every metric point
    (job_status.finished); exits saying why when it cannot be read."""
    try:
        return job_status.finished(bin_dir, state)
    except job_status.StatusError as e:
        sys.exit(f"e2e: cannot read the job run in {state}: {e}")


def dense_wait_after_last_arrival(timeline, steps, warmup):
    """Per timed step: sum over buckets of (last rank's end - last rank's start), ms."""
    starts, ends = {}, {}  # (step, bucket) -> per-rank microseconds
    for name in sorted(os.listdir(timeline)):
        with open(os.path.join(timeline, name), encoding="utf-8") as f:
            events = json.load(f)["traceEvents"]
        for e in events:
            if e.get("cat") != "allreduce" or e.get("ph") != "X":
                continue
            key = (e["args"]["step"], e["args"]["bucket"])
            starts.setdefault(key, []).append(e["ts"])
            ends.setdefault(key, []).append(e["ts"] + e["dur"])
    per_step = {}
    for key, s in starts.items():
        if warmup <= key[0] < steps and len(s) > 1:
            per_step[key[0]] = per_step.get(key[0], 0.0) + (max(ends[key]) - max(s)) / 1000.0
    return list(per_step.values()) or [0.0]


def job_metrics(status, steps, warmup, batch):
    """Figures of one finished job from its metric points (`status`: its object of `parallax
    status JOB --json --points`, job_status.read or job_status.finished), over the timed steps
    warmup..steps-1. A point covers the `steps` steps since the rank's previous one
    (metrics_every), so the timed window must start right after a point (one at step
    warmup - 1, as every step has with metrics_every = 1) and the figures are weighted by each
    point's steps. `loss_last20` is the mean loss of the last 20 steps: each point's
    `loss_mean` (its steps' mean; `loss`, its last step's, from a build before loss_mean), so
    their points must start at steps - 20 too."""
    where = f"job {status['id']} ({status['name']}, attempt {status['attempt']})"
    # (point, its values, the steps it covers)
    timed = [(p, p["values"], int(p["values"].get("steps", 1)))
             for p in job_status.points_between(status, warmup, steps)]
    ranks = sorted({p["rank"] for p, _, _ in timed})
    if not ranks:
        sys.exit(f"e2e: {where} has no metric point of steps {warmup}..{steps - 1} (did it "
                 "run that many steps?)")
    seconds = {k: sum(batch * n / p["throughput"] for p, _, n in timed if p["rank"] == k)
               for k in ranks}
    timed_steps = steps - warmup
    counted = {k: sum(n for p, _, n in timed if p["rank"] == k) for k in ranks}
    if any(c != timed_steps for c in counted.values()):
        sys.exit(f"e2e: {where}: expected metric points covering {timed_steps} timed steps per "
                 f"rank, got {counted} (the warm-up must end on a point: warmup - 1 a multiple "
                 "of metrics_every)")
    losses = {}
    for p, v, n in timed:
        if p["step"] - n + 1 >= steps - 20:
            losses.setdefault(p["rank"], []).append((v.get("loss_mean", p["loss"]), n))
    if any(sum(n for _, n in x) != 20 for x in losses.values()):
        sys.exit(f"e2e: {where}: the last 20 steps do not start on a metric point "
                 "(metrics_every must divide 20 and the timed steps)")
    out = dict(tokens_per_s=len(ranks) * batch * timed_steps / max(seconds.values()),
               step_ms=1000.0 * max(seconds.values()) / timed_steps,
               loss_last20=statistics.mean(sum(x * n for x, n in p) / 20
                                           for p in losses.values()))
    total = sum(n for _, _, n in timed)

    def mean(key):  # per-step averages, weighted by the steps each point covers
        return sum(v.get(key, 0.0) * n for _, v, n in timed) / total

    for path in PATHS:
        for d in ("sent", "recv"):
            out[f"{path}_{d}_bytes_per_worker_per_step"] = mean(f"{path}_{d}_bytes")
    out["bytes_sent_per_worker_per_step"] = sum(out[f"{p}_sent_bytes_per_worker_per_step"]
                                                for p in PATHS)
    for key in ("compute_ms", "dense_wait_ms", "sparse_wait_ms"):
        out[key] = mean(key)
    out["ps_requests_per_worker_per_step"] = mean("ps_requests")
    out["row_cache_hit_rate"] = job_status.row_cache_hit_rate(mean)
    return out


def round_seed(args, run):
    """The seed of round `run`: the torch model's initial values and negatives, and with
    --seed-per-run the Parallax jobs' [model] seed and the data order too."""
    return run + 1 if args.seed_per_run else 1


def batches_header(path):
    """(workers, steps, batch, context, seed) of a parallax-data batches file."""
    with open(path, "rb") as f:
        head = f.read(32)
    if len(head) != 32 or head[:8] != BATCHES_MAGIC:
        sys.exit(f"e2e: '{path}' is not a batches file (no {BATCHES_MAGIC.decode()} header); "
                 "write it with parallax-data batches (bench/e2e/run.sh does)")
    return struct.unpack("<4IQ", head[8:32])


def batches_for(args, workdir, run):
    """The batches file the torch model's variants read in round `run`: --batches, or with
    --seed-per-run one in the data order of the round's seed (Parallax's ranks shuffle with
    [model] seed): --batches itself when written with that seed, else one of its shape written
    once into `workdir`."""
    if not args.seed_per_run:
        return args.batches
    seed = round_seed(args, run)
    workers, steps, batch, context, written_with = batches_header(args.batches)
    if written_with == seed:
        return args.batches
    return write_batches(args.bin, os.path.join(ROOT, "data", "brown", "train.tok"),
                         os.path.join(workdir, f"w3-batches-{seed}.bin"), context, batch,
                         workers, steps, seed, timeout=args.timeout)


def write_batches(bin_dir, train_tok, path, context, batch, workers, steps, seed, timeout=None):
    """`path`, a batches file of `train_tok` in the data order Parallax's ranks read at `seed`
    (`parallax-data batches`), written unless it exists; returns `path`."""
    if not os.path.exists(path):
        subprocess.run([os.path.join(bin_dir, "parallax-data"), "batches", train_tok,
                        "--context", str(context), "--batch", str(batch), "--workers",
                        str(workers), "--steps", str(steps), "--seed", str(seed), "--out", path],
                       check=True, stdout=subprocess.DEVNULL, timeout=timeout)
    return path


def torch_run(args, impl, workdir, run):
    batches = batches_for(args, workdir, run)
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "peers", "w3_torch.py"),
           "--batches", batches, "--vocab", os.path.join(ROOT, "data", "brown", "vocab.tsv"),
           "--runs", "1", "--warmup", str(args.warmup), "--steps", str(args.steps - args.warmup),
           "--seed", str(round_seed(args, run))]
    if TORCH[impl]:
        cmd.append("--sparse")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit(f"e2e: {impl} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        if r.get("stat") == "run":
            out = {k: r[k] for k in ("tokens_per_s", "step_ms", "loss_last20",
                                     "bytes_sent_per_worker_per_step",
                                     "bytes_received_per_worker_per_step")}
            return dict(out, seed=round_seed(args, run), data_seed=batches_header(batches)[4])
    sys.exit(f"e2e: {impl}: no run line in w3_torch.py's output")


UNITS = {"tokens_per_s": "tokens/s", "step_ms": "ms", "loss_last20": "nats",
         "compute_ms": "ms", "dense_wait_ms": "ms", "sparse_wait_ms": "ms",
         "dense_wait_after_last_arrival_ms": "ms", "dense_wait_after_last_arrival_median_ms": "ms",
         "tokens_per_s_vs_baseline": "x"}


def unit(metric):
    return UNITS.get(metric, "bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=310, help="steps in all, warm-up included")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help="comma-separated; also: " + ", ".join(
                        v for v in list(PARALLAX) + list(TORCH) + list(PARALLAX_TORCH)
                        if v not in DEFAULT_VARIANTS))
    ap.add_argument("--bin", required=True, help="directory of the parallax binaries")
    ap.add_argument("--batches", required=True, help="parallax-data batches file (PyTorch side)")
    ap.add_argument("--workdir", help="keep job files and state here (default: a temp dir)")
    ap.add_argument("--plan", help="a file with a [plan] table (bench/e2e/calibrate.sh's output) "
                    "added to every Parallax job")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    ap.add_argument("--baseline-bin", help="also run every Parallax variant with these binaries "
                    "(as <variant>@baseline, alternating)")
    ap.add_argument("--seed-per-run", action="store_true", help="round r runs every variant "
                    "with seed r + 1 instead of 1 (the Parallax jobs' [model] seed, the torch "
                    "model's seed, the data order of both), and reports the paired loss "
                    "differences of parallax-torch-hybrid and torch-ddp-sparse")
    ap.add_argument("--timeline", action="store_true", help="record Parallax runs' timelines "
                    "and report dense_wait_after_last_arrival_ms")
    args = ap.parse_args()
    variants = args.variants.split(",")
    known = list(PARALLAX) + list(TORCH) + list(PARALLAX_TORCH)
    for v in variants:
        if v not in known:
            sys.exit(f"e2e: unknown variant '{v}'; known: {', '.join(known)}")
    if args.steps - args.warmup < 20:
        sys.exit("e2e: --steps must exceed --warmup by at least 20 (the loss is over the last 20)")
    if args.baseline_bin:
        variants = [w for v in variants for w in ([v, v + "@baseline"] if v in PARALLAX else [v])]
    workdir = args.workdir or tempfile.mkdtemp(prefix="px-e2e-")
    os.makedirs(workdir, exist_ok=True)
    results = {v: [] for v in variants}
    for run in range(args.runs):
        for impl in variants:
            before, started = load1(), time.time()
            if impl in TORCH:
                r = torch_run(args, impl, workdir, run)
            elif impl in PARALLAX_TORCH:
                r = parallax_torch_run(args, impl, workdir, run)
            else:
                r = parallax_run(args, impl, workdir, run)
            if impl.endswith("@baseline"):
                ours = results[impl.partition("@")[0]][-1]
                ours["tokens_per_s_vs_baseline"] = ours["tokens_per_s"] / r["tokens_per_s"]
            results[impl].append(r)
            print(json.dumps(dict(bench="e2e", impl=impl, stat="run", run=run, workers=2,
                                  load1_before=round(before, 2), load1_after=round(load1(), 2),
                                  wall_s=round(time.time() - started, 1),
                                  **{k: round(v, 4) for k, v in r.items()})), flush=True)
    for impl in variants:
        for metric in results[impl][-1]:
            if metric in SEED_KEYS:
                continue
            values = [r[metric] for r in results[impl]]
            print(json.dumps(dict(bench="e2e", impl=impl, metric=metric, unit=unit(metric),
                                  stat="median", runs=len(values),
                                  value=round(statistics.median(values), 4),
                                  min=round(min(values), 4), max=round(max(values), 4))),
                  flush=True)
    print_loss_gap(results)


def print_loss_gap(results):
    """parallax-torch-hybrid's loss minus torch-ddp-sparse's, round by round (the same seed,
    so the same initial values), when both ran."""
    ours, theirs = results.get("parallax-torch-hybrid"), results.get("torch-ddp-sparse")
    if not ours or not theirs:
        return
    gaps = [a["loss_last20"] - b["loss_last20"] for a, b in zip(ours, theirs)]
    print(json.dumps(dict(bench="e2e", impl="parallax-torch-hybrid-minus-torch-ddp-sparse",
                          metric="loss_last20_gap", unit="nats", stat="mean", runs=len(gaps),
                          value=round(statistics.mean(gaps), 4),
                          median=round(statistics.median(gaps), 4),
                          each=[round(g, 4) for g in gaps])), flush=True)


if __name__ == "__main__":
    main()
