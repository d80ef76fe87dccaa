#!/usr/bin/env python3
"""Quality at equal memory: the built-in `ctr` model on synthetic data with drift, its 26
categorical tables either dynamic (`ids = "hashed"`: one row per raw 64-bit value, under a
`max_rows` budget with eviction) or fixed tables the values are hashed into (`tables`: value mod
rows), the two given the same bytes of shard memory. A dynamic row costs its weights and
optimizer state and its id, bookkeeping and index entry (`ps::DynamicTable::BytesPerRow`,
core/ps/dynamic_table.cc); a fixed row its weights and optimizer state. So for each table the
fixed variant gets floor(max_rows * dynamic_bytes / fixed_bytes) rows.

    bench/e2e/ctr_quality.py --bin build/bin [--seeds 1,2,3] [--train 300000] [--budget 10000]
        [--passes 1] [--eviction lru|lfu] [--ttl-steps 0] [--distinct]

For each seed: `parallax-data synthetic-ctr` (with --drift-shift and --drift-new) writes the data
and its Bayes AUC (generator.json), then `parallax run` trains one pass over the training split
(1 worker, 1 PS shard, every table on the PS) once per variant. Each run's state is read back
through `parallax status JOB --json` (bench/e2e/job_status.py: it must have SUCCEEDED at the
last step), and its held-out AUC and log loss from rank 0's last `eval step S auc A bayes_auc B
log_loss L` line (trainer/models/train_loop.cc), in the run's output. Prints one JSON line per
variant, metric and statistic (median over seeds), and one per run with --per-run.
"""

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import job_status  # noqa: E402  (what `parallax status JOB --json` says of a job)

# The generator's default table sizes (core/data/synthetic_ctr.cc, DefaultCtrTableSizes).
TABLE_SIZES = [1000000, 1000000, 300000, 100000, 100000, 30000, 10000, 10000, 10000, 3000, 3000,
               1000, 1000, 1000, 300, 300, 100, 100, 100, 30, 30, 10, 10, 10, 4, 3]
EVAL_LINE = re.compile(r"^eval step (\d+) auc ([0-9.eE+-]+|nan)(?: bayes_auc ([0-9.eE+-]+))?"
                       r"(?: log_loss ([0-9.eE+-]+|nan|inf))?", re.M)
# Optimizer slots a row keeps beside its weights (core/optim: adagrad one accumulator).
STATE_SLOTS = {"sgd": 0, "adagrad": 1, "momentum": 1, "adam": 2}


def fixed_row_bytes(dim, optimizer):
    """A fixed table's row on a shard: its weights and optimizer state, 4 bytes each."""
    return (1 + STATE_SLOTS[optimizer]) * dim * 4


def dynamic_row_bytes(dim, optimizer):
    """ps::DynamicTable::BytesPerRow: the values, the row's bookkeeping (id, last step, the two
    links of the recency list, touches, 40 bytes), Adam's step count, and its index entry (an
    (id, slot) pair and a control byte at Abseil's load of at most 7/8)."""
    values = (1 + STATE_SLOTS[optimizer]) * dim * 4
    meta = 8 + 8 + 8 + 8 + 4 + 4
    index = (16 + 1) * 8 // 7
    return values + meta + (8 if optimizer == "adam" else 0) + index


def budgets(args):
    """Per table: (dynamic max_rows, fixed rows) of equal bytes. A table whose values fit gets
    room for them and two batches of new values (a step's new rows must fit in its budget); the
    others `--budget` rows."""
    d = dynamic_row_bytes(args.dim, "adagrad")
    f = fixed_row_bytes(args.dim, "adagrad")
    out = []
    for size in TABLE_SIZES:
        dyn = min(args.budget, size + 2 * args.batch)
        out.append((dyn, dyn * d // f))
    return out


def job_text(args, data, impl, steps, seed):
    sizes = budgets(args)
    lines = [
        "[job]", f'name = "ctr-quality-{impl}"', "workers = 1", 'arch = "hybrid"',
        'consistency = "sync"', "", "[ps]", "shards = 1", "", "[trainer]", 'model = "ctr"',
        f"steps = {steps}", f"batch_size = {args.batch}", "", "[model]", f'data = "{data}"',
        f"dim = {args.dim}", "bottom = [64]", "top = [64]", f"eval_examples = {args.heldout}",
        f"seed = {seed}",
    ]
    if impl == "dynamic":
        lines += ['ids = "hashed"', f"max_rows = {[m for m, _ in sizes]}",
                  f'eviction = "{args.eviction}"', f"admit_after = {args.admit_after}",
                  f"ttl_steps = {args.ttl_steps}"]
    else:
        lines += [f"tables = {[r for _, r in sizes]}"]
    lines += ["", "[optimizer.dense]", 'type = "adam"', "lr = 1e-3", "", "[optimizer.sparse]",
              'type = "adagrad"', f"lr = {args.lr}", ""]
    if impl == "hashed":
        # Every table on the PS, as the dynamic ones must be: the same shard memory to compare.
        for t in range(len(TABLE_SIZES)):
            lines += ["[[variable]]", f'name = "ctr/table{t}"', 'path = "ps"', ""]
    return "\n".join(lines)


def generate(args, workdir, seed):
    out = os.path.join(workdir, f"data-{seed}")
    argv = [os.path.join(args.bin, "parallax-data"), "synthetic-ctr", out, "--seed", str(seed),
            "--train", str(args.train), "--heldout", str(args.heldout),
            "--drift-shift", str(args.drift_shift), "--drift-new", str(args.drift_new),
            "--zipf", str(args.zipf)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"ctr_quality: {' '.join(argv)} failed:\n{r.stdout}{r.stderr}")
    with open(os.path.join(out, "generator.json"), encoding="utf-8") as f:
        return out, json.load(f)


def distinct_per_table(data):
    """Distinct raw values of each categorical column of the training split (its TSV: label, 13
    dense, 26 hex values; an empty field is a missing value): what a table would need to hold
    every value without collision or eviction."""
    seen = [set() for _ in TABLE_SIZES]
    with open(os.path.join(data, "train.tsv"), encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")[14:]
            for s, v in zip(seen, fields):
                if v:
                    s.add(v)
    return [len(s) for s in seen]


def train(bench, bin_dir, workdir, name, text, timeout, points=False):
    """`parallax run` of job `text` (written to WORKDIR/NAME.toml, its state in NAME.state) to
    its end: (its `parallax status --json` object, with the metric points when `points`; the
    run's seconds; rank 0's last evaluation (auc, log_loss)). Exits naming `bench` and `name`
    when the run fails, the job did not succeed, or rank 0's log has no evaluation."""
    job = os.path.join(workdir, f"{name}.toml")
    with open(job, "w", encoding="utf-8") as f:
        f.write(text)
    state = job_status.fresh_state_dir(os.path.join(workdir, f"{name}.state"))
    t0 = time.monotonic()
    proc = subprocess.run([os.path.join(bin_dir, "parallax"), "run", "--state-dir", state, job],
                          capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"{bench}: {name} failed (exit {proc.returncode}); its state is in {state}:\n"
                 f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    try:
        status = job_status.finished(bin_dir, state, points=points)
    except job_status.StatusError as e:
        sys.exit(f"{bench}: cannot read the job run in {state}: {e}")
    if status.get("state") != "SUCCEEDED":
        sys.exit(f"{bench}: {name}: the job is {status.get('state')} at step {status.get('step')}")
    # The agent of a `parallax run` is gone with it (so is `parallax logs`): rank 0's output is
    # the task log it left in the state directory.
    task_logs = sorted(glob.glob(os.path.join(state, "agent", "tasks", "*-trainer-0", "task.log")))
    logs = ""
    if task_logs:
        with open(task_logs[-1], encoding="utf-8", errors="replace") as f:
            logs = f.read()
    evaluation = last_eval(logs)
    if evaluation is None:
        sys.exit(f"{bench}: {name}: no `eval step S auc A ... log_loss L` line in trainer/0's "
                 f"log:\n{logs[-3000:]}")
    return status, seconds, evaluation


def last_eval(log):
    """(auc, log_loss) of the last `eval step S auc A ... log_loss L` line of a trainer's log;
    None when it has none (or none with a log loss)."""
    found = EVAL_LINE.findall(log)
    if not found or not found[-1][3]:
        return None
    _, auc, _, log_loss = found[-1]
    return float(auc), float(log_loss)


def run(args, workdir, data, impl, seed):
    steps = args.steps or args.passes * (args.train // args.batch)
    text = job_text(args, os.path.join(data, "train.tsv"), impl, steps, seed)
    status, seconds, (auc, log_loss) = train("ctr_quality", args.bin, workdir, f"{impl}-{seed}",
                                             text, args.timeout)
    if status.get("step", steps) < steps - 1:  # the last step's index
        sys.exit(f"ctr_quality: {impl} seed {seed}: the job stopped at step "
                 f"{status.get('step')} of {steps}")
    return {"auc": auc, "log_loss": log_loss, "seconds": seconds, "steps": steps}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default="build/bin")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--train", type=int, default=300000)
    p.add_argument("--heldout", type=int, default=50000)
    p.add_argument("--drift-shift", type=float, default=0.3)
    p.add_argument("--drift-new", type=float, default=0.1)
    p.add_argument("--zipf", type=float, default=1.2,
                   help="the generator's Zipf exponent: lower spreads the clicks' signal over "
                        "more values (the hot set that decides AUC grows)")
    p.add_argument("--budget", type=int, default=10000,
                   help="dynamic rows of each table too large to fit (max_rows)")
    p.add_argument("--eviction", default="lru", choices=["lru", "lfu"])
    p.add_argument("--admit-after", type=int, default=1)
    p.add_argument("--ttl-steps", type=int, default=0)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05, help="sparse Adagrad's")
    p.add_argument("--steps", type=int, default=0, help="0: --passes over the training split")
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--distinct", action="store_true",
                   help="count each table's distinct training values (printed with --per-run)")
    p.add_argument("--impls", default="dynamic,hashed")
    p.add_argument("--workdir", default="")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--per-run", action="store_true")
    args = p.parse_args()
    args.bin = os.path.abspath(args.bin)
    workdir = args.workdir or tempfile.mkdtemp(prefix="ctr-quality-")
    os.makedirs(workdir, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    impls = args.impls.split(",")
    sizes = budgets(args)
    bytes_of = {
        "dynamic": sum(m for m, _ in sizes) * dynamic_row_bytes(args.dim, "adagrad"),
        "hashed": sum(r for _, r in sizes) * fixed_row_bytes(args.dim, "adagrad"),
    }
    params = {"train": args.train, "heldout": args.heldout, "drift_shift": args.drift_shift,
              "drift_new": args.drift_new, "zipf": args.zipf, "budget": args.budget,
              "eviction": args.eviction, "admit_after": args.admit_after, "ttl_steps": args.ttl_steps, "dim": args.dim,
              "batch": args.batch, "passes": args.passes, "lr": args.lr, "workers": 1,
              "shards": 1}
    rows_of = {"dynamic": [m for m, _ in sizes], "hashed": [r for _, r in sizes]}
    results = {impl: [] for impl in impls}
    bayes = []
    for seed in seeds:
        data, gen = generate(args, workdir, seed)
        bayes.append(gen["bayes_auc"])
        distinct = distinct_per_table(data) if args.distinct else None
        for impl in impls:
            r = run(args, workdir, data, impl, seed)
            r.update(seed=seed, bayes_auc=gen["bayes_auc"], rows_per_table=rows_of[impl])
            if distinct:
                r["distinct_per_table"] = distinct
            results[impl].append(r)
            if args.per_run:
                print(json.dumps({"bench": "ctr_quality", "impl": impl, "stat": "run", **r,
                                  "bytes": bytes_of[impl], **params}), flush=True)
    for impl in impls:
        rs = results[impl]
        for metric, unit in (("auc", ""), ("log_loss", "nats"), ("seconds", "s")):
            print(json.dumps({"bench": "ctr_quality", "impl": impl, "metric": metric,
                              "unit": unit, "stat": "median", "runs": len(rs),
                              "value": statistics.median(r[metric] for r in rs),
                              "values": [r[metric] for r in rs], "seeds": seeds,
                              "bayes_auc": bayes, "bytes": bytes_of[impl], **params}), flush=True)
    if "dynamic" in results and "hashed" in results:
        gaps = [d["auc"] - h["auc"] for d, h in zip(results["dynamic"], results["hashed"])]
        print(json.dumps({"bench": "ctr_quality", "impl": "dynamic_minus_hashed", "metric": "auc",
                          "unit": "", "stat": "median", "runs": len(gaps),
                          "value": statistics.median(gaps), "values": gaps, "seeds": seeds,
                          **params}), flush=True)


if __name__ == "__main__":
    main()
