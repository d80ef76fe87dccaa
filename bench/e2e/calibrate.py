#!/usr/bin/python3
"""Measures the planner's machine figures and prints them as a job file's [plan] table.

  bench/e2e/calibrate.sh [--rounds 3] [--steps 60] [--warmup 10] [--workers 2]

The cost model (core/plan/cost_model.h) predicts a path's communication time per step as
link bytes / link_bytes_per_s + operations x a per-operation cost. The figures, measured here:

- link_bytes_per_s: iperf3 on 127.0.0.1 for 3 s (the host's link; loopback on one host);
  a Python socket pair when iperf3 is missing (slower: it is bound by the interpreter).
- collective_latency_us and ps_rtt_us: from short real runs of W3 (examples/w3.toml, 2
  workers, `parallax run`), alternating, --rounds of each:
    allgather: arch = "allgather" (the sparse tables all-gathered, the MLP all-reduced);
    ps:        arch = "hybrid" with the sparse tables on the PS and the MLP on all-reduce by
               [[variable]] (the MLP all-reduced as under allgather).
  Each run's mean sparse wait per step (the job's metric points, steps warmup..steps-1) minus
  what the link bytes of that path take at link_bytes_per_s (`parallax plan --json`), divided
  by the operations: S sparse tables x 3 collective calls x (N-1) ring steps for all-gather,
  S x 2 requests (pull, push) for PS. The median over rounds.

The per-operation cost measured this way is what an operation costs inside a training job on
this machine (competing with the ranks' compute for the cores), not on an idle one: that is
the cost the planner must weigh.

Output: one JSON line per run and a final line with the figures, then the [plan] table.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e  # noqa: E402  (job_text, job_metrics, ROOT)
import job_status  # noqa: E402  (fresh_state_dir)


def iperf3_bytes_per_s(seconds=3):
    port = 15201 + os.getpid() % 1000
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(3):
            time.sleep(0.5)  # the server's listen; a refused client retries
            out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t",
                                  str(seconds), "-J"], capture_output=True, text=True,
                                 timeout=seconds + 30)
            if out.returncode == 0:
                doc = json.loads(out.stdout)
                return doc["end"]["sum_received"]["bits_per_second"] / 8
        sys.exit(f"calibrate: iperf3 -c 127.0.0.1 -p {port} failed:\n{out.stdout[-1000:]}")
    finally:
        server.kill()
        server.wait()


def socket_bytes_per_s(total=256 << 20):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def drain():
        conn, _ = srv.accept()
        buf, got = bytearray(1 << 20), 0
        while got < total:
            got += conn.recv_into(buf)
        conn.close()

    t = threading.Thread(target=drain)
    t.start()
    s = socket.create_connection(srv.getsockname())
    chunk = b"x" * (1 << 20)
    started = time.time()
    for _ in range(total >> 20):
        s.sendall(chunk)
    s.close()
    t.join()
    return total / (time.time() - started)


def plan_json(binary, job):
    out = subprocess.run([binary, "plan", job, "--json"], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        sys.exit(f"calibrate: parallax plan {job} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="directory of the parallax binaries")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--workdir", help="keep job files and state here (default: a temp dir)")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="px-calibrate-")
    os.makedirs(workdir, exist_ok=True)
    n = args.workers

    if shutil.which("iperf3"):
        bw, how = iperf3_bytes_per_s(), "iperf3 -c 127.0.0.1 -t 3"
    else:
        bw, how = socket_bytes_per_s(), "python socket pair (iperf3 missing)"
    print(json.dumps(dict(bench="calibrate", metric="link_bytes_per_s", value=round(bw),
                          how=how, load1=round(os.getloadavg()[0], 2))), flush=True)

    with open(os.path.join(e2e.ROOT, "examples", "w3.toml"), encoding="utf-8") as f:
        base = f.read()
    # The dense MLP stays on all-reduce in both, so the sparse wait is the tables' alone.
    variants = {"allgather": ("allgather", ()),
                "ps": ("hybrid", e2e.EMBEDDINGS + e2e.DENSE_ON_ALLREDUCE)}
    jobs = {}
    for name, (arch, overrides) in variants.items():
        path = os.path.join(workdir, f"calibrate-{name}.toml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(e2e.job_text(base, arch, "sync", None, overrides, args.steps, n))
        jobs[name] = path

    # Link bytes per step of the sparse variables on each path (cost model, measured α).
    # (Each from the job that has the path: an allgather job has no shards.)
    plans = {name: plan_json(os.path.join(args.bin, "parallax"), jobs[name]) for name in jobs}
    sparse = {name: [v for v in plans[name]["variables"] if v["kind"] == "sparse"]
              for name in jobs}
    per_host = n  # one host
    ag_link = sum(per_host * v["bytes_per_worker"]["allgather"] / 2 for v in sparse["allgather"])
    ps_link = sum(per_host * v["bytes_per_worker"]["ps"] for v in sparse["ps"])
    sparse = sparse["ps"]
    ag_ops = len(sparse) * 3 * (n - 1)
    ps_ops = len(sparse) * 2

    waits = {name: [] for name in variants}
    for rnd in range(args.rounds):
        for name in variants:
            state = job_status.fresh_state_dir(
                os.path.join(workdir, f"calibrate-{name}-{rnd}.state"))
            before = os.getloadavg()[0]
            proc = subprocess.run([os.path.join(args.bin, "parallax"), "run", "--state-dir", state,
                                   jobs[name]], capture_output=True, text=True,
                                  timeout=args.timeout)
            if proc.returncode != 0:
                sys.exit(f"calibrate: {name} run {rnd} failed (exit {proc.returncode}); state in "
                         f"{state}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
            m = e2e.job_metrics(e2e.finished_status(args.bin, state), args.steps, args.warmup,
                                batch=256)
            waits[name].append(m["sparse_wait_ms"])
            print(json.dumps(dict(bench="calibrate", run=rnd, variant=name,
                                  load1_before=round(before, 2),
                                  sparse_wait_ms=round(m["sparse_wait_ms"], 3),
                                  step_ms=round(m["step_ms"], 3))), flush=True)

    ag_wait = statistics.median(waits["allgather"]) / 1e3
    ps_wait = statistics.median(waits["ps"]) / 1e3
    collective_us = max(0.0, (ag_wait - ag_link / bw) / ag_ops) * 1e6
    ps_rtt_us = max(0.0, (ps_wait - ps_link / bw) / ps_ops) * 1e6
    print(json.dumps(dict(bench="calibrate", workers=n, sparse_variables=len(sparse),
                          link_bytes_per_s=round(bw), collective_latency_us=round(collective_us),
                          ps_rtt_us=round(ps_rtt_us),
                          allgather_sparse_wait_ms=round(ag_wait * 1e3, 3),
                          ps_sparse_wait_ms=round(ps_wait * 1e3, 3),
                          allgather_link_bytes=round(ag_link), ps_link_bytes=round(ps_link),
                          allgather_ops=ag_ops, ps_ops=ps_ops,
                          load1=round(os.getloadavg()[0], 2))), flush=True)
    print("\n# bench/e2e/calibrate.sh, " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print("[plan]")
    print(f"link_bytes_per_s = {bw:.4g}")
    print(f"collective_latency_us = {collective_us:.0f}")
    print(f"ps_rtt_us = {ps_rtt_us:.0f}")


if __name__ == "__main__":
    main()
