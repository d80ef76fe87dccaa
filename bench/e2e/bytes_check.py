#!/usr/bin/python3
"""Predicted vs measured bytes per worker per step, by path: the cost model's bytes against
the transport counters of real runs.

Run through bench/e2e/bytes_check.sh. For each model (lm = examples/w3.toml, ctr =
examples/ctr.toml) and worker count, it writes the job with `workers = N`, `metrics_every = 1`
and a short run, asks `parallax plan JOB --json --workers N` for the cost model's bytes per worker
per step on each variable's chosen path (sent + received, the cost model's `bytes`), runs the job
with `parallax run`, and averages the ranks' metric points over the steps after the warm-up:
`<path>_sent_bytes + <path>_recv_bytes` per step (ps = ps_push + ps_pull; the points from
`parallax status 1 --json --points` once the run ended: bench/e2e/job_status.py). While the job
runs it also reads `ss -tinpH` twice for trainer rank 0 (sockets by peer: the coordinator, the PS
shard, the other ranks = collectives) and divides the counters' growth by the steps rank 0
finished in between (its newest metric point, from `parallax status 1 --json` against the run's
coordinator): bytes on the wire, as the kernel counts them.

Output: one JSON line per (model, workers, path) with predicted, measured and ratio, and one per
run with the ss figures ("path": "ss:collective" etc.).
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import job_status  # noqa: E402  (what `parallax status JOB --json` says of a job)

MODELS = {
    "lm": ("w3.toml", "brown/train.tok", "eval_tokens", 1),
    "ctr": ("ctr.toml", "ctr/train.tsv", "eval_examples", 1),
}
COUNTER = re.compile(r"\b(bytes_sent|bytes_received):(\d+)")


def job_text(model, workers, steps, arch, plan=None):
    example, data, eval_key, eval_value = MODELS[model]
    with open(os.path.join(ROOT, "examples", example), encoding="utf-8") as f:
        text = f.read()
    if plan:
        # The machine's [plan] figures (bench/e2e/calibrate.sh), for the planner's choice.
        with open(plan, encoding="utf-8") as f:
            text += "\n" + f.read() + "\n"
    text = re.sub(r"(?m)^workers = \d+", f"workers = {workers}", text)
    text = re.sub(r'(?m)^arch = "[a-z]+"', f'arch = "{arch}"', text)
    text = re.sub(r"(?m)^steps = \d+.*$", f"steps = {steps}\nmetrics_every = 1", text)
    text = re.sub(r'(?m)^data = ".*"', f'data = "{ROOT}/data/{data}"', text)
    text = re.sub(rf"(?m)^{eval_key} = \d+", f"{eval_key} = {eval_value}", text)
    text = re.sub(r"(?m)^eval_every = \d+", "eval_every = 0", text)
    if eval_key not in text:
        text = text.replace("[model]\n", f"[model]\n{eval_key} = {eval_value}\n", 1)
    return text + "\n[ps]\nshards = 1\npartitions = 1\n"


def predicted(bin_dir, job, workers):
    out = subprocess.run([os.path.join(bin_dir, "parallax"), "plan", job, "--json", "--workers",
                          str(workers)], check=True, capture_output=True, text=True).stdout
    plan = json.loads(out)
    # The plan's bytes by path: its all-gathered tables share the step's calls, which the
    # per-variable figures each count in full.
    return {p: b for p, b in plan["plan_bytes_per_worker_by_path"].items() if b > 0}


def job_pids(job, role, rank=None):
    """pids of the job's tasks (our own processes), from PARALLAX_* in /proc/PID/environ."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if (env.get(b"PARALLAX_ROLE") == role.encode()
                and env.get(b"PARALLAX_JOB_SOURCE", b"").decode() == job
                and (rank is None or env.get(b"PARALLAX_RANK") == str(rank).encode())):
            pids.append(int(pid))
    return pids


def listening_ports(pid):
    out = subprocess.run(["ss", "-tlnpH"], capture_output=True, text=True).stdout
    return {int(l.split()[3].rsplit(":", 1)[1]) for l in out.splitlines() if f"pid={pid}," in l}


def socket_bytes(pid, coordinator_port, ps_ports):
    """bytes_sent/received of pid's TCP sockets, grouped by peer: coordinator, ps, collective."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True).stdout
    totals = {}
    group = None
    for line in out.splitlines():
        if line and not line[0].isspace():
            group = None
            if f"pid={pid}," in line:
                peer = int(line.split()[4].rsplit(":", 1)[1])
                group = ("control" if peer == coordinator_port
                         else "ps" if peer in ps_ports else "collective")
        elif group:
            for name, value in COUNTER.findall(line):
                key = (group, name)
                totals[key] = totals.get(key, 0) + int(value)
    return totals


def rank0_step(bin_dir, state):
    """The newest step rank 0 has a metric point of, from `parallax status 1 --json` against
    the running job's embedded coordinator; -1 before it has one (or serves)."""
    address = job_status.running_address(state)
    if address is None:
        return -1
    try:
        status = job_status.read(bin_dir, address, 1)
    except job_status.StatusError:
        return -1  # not listening yet, or already gone with the job
    return next((p["step"] for p in status.get("metrics", []) if p["rank"] == 0), -1)


def one(args, model, workers, arch, workdir):
    job = os.path.join(workdir, f"{model}-{workers}-{arch}.toml")
    with open(job, "w", encoding="utf-8") as f:
        f.write(job_text(model, workers, args.steps, arch, args.plan))
    pred = predicted(args.bin, job, workers)
    state = job_status.fresh_state_dir(
        os.path.join(workdir, f"{model}-{workers}-{arch}.state"))
    proc = subprocess.Popen([os.path.join(args.bin, "parallax"), "run", "--state-dir", state, job],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # ss samples of rank 0: the first after the warm-up, the second near the end.
    samples = []
    lo, hi = args.warmup + 2, args.steps - 5
    pace = job_status.Pace(shortest=0.05)
    while proc.poll() is None and len(samples) < 2:
        step = rank0_step(args.bin, state)
        if step >= (lo if not samples else hi):
            pid = next(iter(job_pids(job, "trainer", 0)), None)
            coord = int(job_status.running_address(state).rsplit(":", 1)[1])
            ports = set().union(*(listening_ports(p) for p in job_pids(job, "ps")))
            # Read after the look that saw `step`, before the next one.
            counters = socket_bytes(pid, coord, ports) if pid else {}
            samples.append((step, rank0_step(args.bin, state), counters))
        else:
            time.sleep(pace.wait(step, lo if not samples else hi))
    _, err = proc.communicate(timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit(f"bytes_check: {model} on {workers} workers failed; state in {state}:\n{err[-2000:]}")
    try:
        status = job_status.finished(args.bin, state)
    except job_status.StatusError as e:
        sys.exit(f"bytes_check: cannot read the job run in {state}: {e}")
    rows = [p["values"] for p in job_status.points_between(status, args.warmup, args.steps)]
    measured = {}
    for path, keys in (("allreduce", ("allreduce",)), ("allgather", ("allgather",)),
                       ("ps", ("ps_push", "ps_pull"))):
        per_step = [sum(v.get(f"{k}_{d}_bytes", 0.0) for k in keys for d in ("sent", "recv"))
                    for v in rows]
        sent = [sum(v.get(f"{k}_sent_bytes", 0.0) for k in keys) for v in rows]
        measured[path] = (statistics.mean(per_step), statistics.mean(sent))
    common = dict(bench="bytes_check", model=model, workers=workers, arch=arch,
                  steps=args.steps, warmup=args.warmup, load1=round(os.getloadavg()[0], 2))
    for path in sorted(set(pred) | {p for p, m in measured.items() if m[0] > 0}):
        p = pred.get(path, 0.0)
        m, s = measured[path]
        print(json.dumps(dict(common, path=path, unit="bytes/worker/step (sent+received)",
                              predicted=round(p), measured=round(m), measured_sent=round(s),
                              ratio=round(m / p, 4) if p else None)), flush=True)
    if len(samples) == 2 and samples[0][2]:
        (a0, a1, c0), (b0, b1, c1) = samples
        steps = (b0 + b1) / 2 - (a0 + a1) / 2
        for group in ("collective", "ps", "control"):
            sent = (c1.get((group, "bytes_sent"), 0) - c0.get((group, "bytes_sent"), 0)) / steps
            recv = (c1.get((group, "bytes_received"), 0)
                    - c0.get((group, "bytes_received"), 0)) / steps
            print(json.dumps(dict(common, path=f"ss:{group}", rank=0, ss_steps=steps,
                                  unit="bytes/step on rank 0's sockets", sent=round(sent),
                                  received=round(recv), total=round(sent + recv))), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", default="lm,ctr")
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--arch", default="hybrid", help="comma-separated archs to run")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--workdir")
    ap.add_argument("--plan", help="a file with a [plan] table added to every job")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="px-bytes-")
    os.makedirs(workdir, exist_ok=True)
    for model in args.models.split(","):
        if model not in MODELS:
            sys.exit(f"bytes_check: unknown model '{model}'; known: {', '.join(MODELS)}")
        for workers in (int(w) for w in args.workers.split(",")):
            for arch in args.arch.split(","):
                one(args, model, workers, arch, workdir)


if __name__ == "__main__":
    main()
