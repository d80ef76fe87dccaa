#!/usr/bin/python3
"""Scaling of communication: bytes per worker per step and communication time per step at 2, 4
and 8 workers (docs/PERFORMANCE.md, "Scaling of communication").

Run through bench/scaling/run.sh. The workload is W3 made compute-light so that 8 ranks fit on
2 cores (examples/w3.toml with a small batch, dim and hidden layer; V stays 50,000 so the tables
are as sparse per step as W3's). For each worker count and implementation:

- parallax-<arch> (hybrid, allreduce, allgather, ps): the job is written from examples/w3.toml
  with `workers = N`, `arch`, `metrics_every = 1`, `[ps] shards = 1, partitions = 1`, and run
  with `parallax run`. Bytes per worker per step come from two places: the job's metric points
  (the trainers' own counters: the Communicator's wire counters for all-reduce/all-gather, the
  PS client's frame bytes for the PS; sent + received, mean over ranks and the steps after the
  warm-up; `parallax status 1 --json --points` once the run ended, bench/e2e/job_status.py) and
  `ss -tinpH` read twice during the run for every trainer rank's TCP sockets to the other ranks
  and to the PS shard (coordinator traffic left out), divided by the steps the ranks finished in
  between (their newest metric points, `parallax status 1 --json` during the run). Communication
  time per step = dense wait + sparse wait of the metric points (the time the training thread
  was blocked on communication).
- torch-ddp-sparse: bench/peers/w3_torch.py --sparse on the same sizes, with the batches file
  written by `parallax-data batches --workers N`; bytes from `ss` (sent + received per worker
  per step). DDP runs its collectives inside backward(); there is no separate wait to read, so
  only its step time is reported.

Predicted: `parallax plan JOB --json --workers N` (the cost model's bytes per worker per step,
sent + received, on each variable's chosen path). For torch-ddp-sparse, the plan of arch =
allgather (DDP's sparse path all-gathers each embedding's rows and all-reduces the MLP).

Output: one JSON object per line and result.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from bytes_check import job_pids  # noqa: E402  (the same /proc scan)
import job_status  # noqa: E402  (what `parallax status JOB --json` says of a job)
from e2e import w3_text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COUNTER = re.compile(r"\b(bytes_sent|bytes_received):(\d+)")
PATHS = (("allreduce", ("allreduce",)), ("allgather", ("allgather",)),
         ("ps", ("ps_push", "ps_pull")))


def job_text(args, workers, arch, data):
    return w3_text(workers, arch, args.warmup + args.steps, args.batch, data,
                   more=[(r"(?m)^dim = \d+", f"dim = {args.dim}"),
                         (r"(?m)^hidden = \d+", f"hidden = {args.hidden}")]) + \
        "\n[ps]\nshards = 1\npartitions = 1\n"


def predicted(bin_dir, job, workers):
    out = subprocess.run([os.path.join(bin_dir, "parallax"), "plan", job, "--json", "--workers",
                          str(workers)], check=True, capture_output=True, text=True).stdout
    by_path = {}
    for v in json.loads(out)["variables"]:
        by_path[v["path"]] = by_path.get(v["path"], 0.0) + v["bytes_per_worker"][v["path"]]
    return by_path


def socket_bytes(pids, skip_port):
    """bytes_sent + bytes_received of the pids' TCP sockets, except those to `skip_port`."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True).stdout
    total = 0
    counting = False
    wanted = {f"pid={p}," for p in pids}
    for line in out.splitlines():
        if line and not line[0].isspace():
            counting = any(w in line for w in wanted)
            if counting and int(line.split()[4].rsplit(":", 1)[1]) == skip_port:
                counting = False
        elif counting:
            total += sum(int(v) for _, v in COUNTER.findall(line))
    return total


def min_step(bin_dir, state, workers):
    """The step every rank of the running `parallax run --state-dir state` has reached, from
    `parallax status 1 --json` against its embedded coordinator (-1 before all have a metric
    point, or before it serves)."""
    address = job_status.running_address(state)
    if address is None:
        return -1
    try:
        return job_status.min_step(job_status.read(bin_dir, address, 1), workers)
    except job_status.StatusError:
        return -1  # not listening yet, or already gone with the job


def run_parallax(args, workers, arch, workdir):
    name = f"{arch}-{workers}"
    job = os.path.join(workdir, f"{name}.toml")
    with open(job, "w", encoding="utf-8") as f:
        f.write(job_text(args, workers, arch, args.data))
    pred = predicted(args.bin, job, workers)
    state = job_status.fresh_state_dir(os.path.join(workdir, f"{name}.state"))
    load = os.getloadavg()[0]
    proc = subprocess.Popen([os.path.join(args.bin, "parallax"), "run", "--state-dir", state, job],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples = []  # (step before, step after, bytes)
    # The second read well before the end: a rank that finishes closes its sockets.
    marks = (args.warmup + 1, args.warmup + args.steps - 10)
    pace = job_status.Pace(first=0.02)  # a short job: its pace known after two looks
    while proc.poll() is None and len(samples) < 2:
        step = min_step(args.bin, state, workers)
        if step >= marks[len(samples)]:
            coord = int(job_status.running_address(state).rsplit(":", 1)[1])
            pids = job_pids(job, "trainer")
            counted = socket_bytes(pids, coord)  # after the look that saw `step`
            samples.append((step, min_step(args.bin, state, workers), counted, len(pids)))
        else:
            time.sleep(pace.wait(step, marks[len(samples)]))
    _, err = proc.communicate(timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit(f"scaling: {name} failed; state in {state}:\n{err[-2000:]}")
    try:
        status = job_status.finished(args.bin, state)
    except job_status.StatusError as e:
        sys.exit(f"scaling: cannot read the job run in {state}: {e}")
    rows = [p["values"] for p in job_status.points_between(status, args.warmup,
                                                           args.warmup + args.steps)]
    by_path = {}
    for path, keys in PATHS:
        by_path[path] = statistics.mean(
            sum(v.get(f"{k}_{d}_bytes", 0.0) for k in keys for d in ("sent", "recv")) for v in rows)
    measured = sum(by_path.values())
    sent = statistics.mean(sum(v.get(f"{k}_sent_bytes", 0.0) for _, ks in PATHS for k in ks)
                           for v in rows)
    ss = None
    if len(samples) == 2 and samples[0][3] == workers and samples[1][3] == workers:
        (a0, a1, c0, _), (b0, b1, c1, _) = samples
        steps = (b0 + b1) / 2 - (a0 + a1) / 2
        ss = (c1 - c0) / steps / workers if steps > 0 and c1 >= c0 else None
    pred_total = sum(pred.values())
    return dict(impl=f"parallax-{arch}", workers=workers, load1=round(load, 2),
                predicted=round(pred_total), measured=round(measured),
                ratio=round(measured / pred_total, 4) if pred_total else None,
                ss=round(ss) if ss is not None else None,
                ss_ratio=round(ss / pred_total, 4) if ss is not None and pred_total else None,
                measured_sent=round(sent),
                by_path={p: round(b) for p, b in by_path.items() if b > 0},
                predicted_by_path={p: round(b) for p, b in pred.items()},
                comm_ms=round(statistics.mean(v.get("dense_wait_ms", 0.0)
                                              + v.get("sparse_wait_ms", 0.0) for v in rows), 3),
                compute_ms=round(statistics.mean(v.get("compute_ms", 0.0) for v in rows), 3))


def run_torch(args, workers, workdir):
    batches = os.path.join(workdir, f"batches-{workers}.bin")
    subprocess.run([os.path.join(args.bin, "parallax-data"), "batches",
                    f"{args.data}/brown/train.tok", "--context", "4", "--batch", str(args.batch),
                    "--workers", str(workers), "--steps", str(args.warmup + args.steps),
                    "--seed", "1", "--out", batches], check=True, stdout=subprocess.DEVNULL)
    # The cost model's figure for the same path: all-gathered embeddings, all-reduced MLP.
    job = os.path.join(workdir, f"torch-{workers}.toml")
    with open(job, "w", encoding="utf-8") as f:
        f.write(job_text(args, workers, "allgather", args.data))
    pred = sum(predicted(args.bin, job, workers).values())
    load = os.getloadavg()[0]
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench/peers/w3_torch.py"),
                          "--batches", batches, "--vocab", f"{args.data}/brown/vocab.tsv",
                          "--sparse", "--runs", "1", "--warmup", str(args.warmup),
                          "--steps", str(args.steps), "--dim", str(args.dim),
                          "--hidden", str(args.hidden)],
                         check=True, capture_output=True, text=True, timeout=args.timeout).stdout
    run = next(json.loads(l) for l in out.splitlines() if '"stat": "run"' in l)
    ss = run["bytes_sent_per_worker_per_step"] + run["bytes_received_per_worker_per_step"]
    return dict(impl="torch-ddp-sparse", workers=workers, load1=round(load, 2),
                predicted=round(pred), measured=None, ratio=None, ss=round(ss),
                ss_ratio=round(ss / pred, 4), measured_sent=None,
                step_ms=round(run["step_ms"], 3), comm_ms=None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", default=os.path.join(ROOT, "data"))
    ap.add_argument("--workers", default="2,4,8")
    ap.add_argument("--impls", default="parallax-hybrid,parallax-allreduce,parallax-allgather,"
                    "parallax-ps,torch-ddp-sparse")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40, help="measured steps, after the warm-up")
    ap.add_argument("--workdir")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="px-scaling-")
    os.makedirs(workdir, exist_ok=True)
    common = dict(bench="scaling", batch=args.batch, dim=args.dim, hidden=args.hidden,
                  steps=args.steps, warmup=args.warmup,
                  unit="bytes/worker/step (sent+received)")
    for workers in (int(w) for w in args.workers.split(",")):
        for impl in args.impls.split(","):
            if impl == "torch-ddp-sparse":
                r = run_torch(args, workers, workdir)
            elif impl.startswith("parallax-"):
                r = run_parallax(args, workers, impl[len("parallax-"):], workdir)
            else:
                sys.exit(f"scaling: unknown implementation '{impl}'")
            print(json.dumps(dict(common, **r)), flush=True)


if __name__ == "__main__":
    main()
