#!/usr/bin/python3
"""All-reduce with 2 ranks on one host: Parallax against Open MPI, side by side.

Run through bench/allreduce_compare.sh (it checks the binaries and mpirun first):

  bench/allreduce_compare.sh [--rounds 5] [--runs 5] [--ranks 2] [--sizes-mib 1,16,100]
                             [--latency-kib 64] [--impls parallax,parallax-tcp,openmpi-shm,openmpi-tcp]

Each round runs every implementation once, in that order, so they alternate: allreduce_bench
(--transport shm: Parallax's shared-memory path; tcp: Gloo over loopback; each with its fused
and unfused small tensors) and allreduce_bench_mpi under mpirun with Open MPI's shared-memory
(btl vader) or TCP (btl tcp over loopback) transport, both with pml ob1 so the transport is the
one named. Every invocation times --runs calls per size after a warm-up and reports its median;
this prints each round's figures ("stat": "round") and then, per implementation and size, the
median over the rounds with min and max, and the ratios the comparison is about:
  parallax_vs_openmpi-shm time_ratio  Parallax's time per call / Open MPI shared memory's
  (per size, from the round medians; below 1 is faster), and fused_vs_unfused speedup.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

IMPLS = ("parallax", "parallax-tcp", "openmpi-shm", "openmpi-tcp")
MPI_TRANSPORT = {"openmpi-shm": ["--mca", "btl", "self,vader"],
                 "openmpi-tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]}


def run_once(args, impl):
    """{(bench, impl, metric, bytes): value} of one invocation."""
    common = ["--runs", str(args.runs), "--sizes-mib", args.sizes_mib,
              "--latency-kib", args.latency_kib]
    if impl.startswith("parallax"):
        cmd = [os.path.join(args.bin, "allreduce_bench"), "--ranks", str(args.ranks),
               "--transport", "shm" if impl == "parallax" else "tcp", "--skip-raw"] + common
    else:
        cmd = (["mpirun", "--allow-run-as-root", "-np", str(args.ranks), "--mca", "pml", "ob1"]
               + MPI_TRANSPORT[impl]
               + [os.path.join(args.bin, "allreduce_bench_mpi"), "--impl", impl] + common)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit(f"allreduce_compare: {impl} failed (exit {proc.returncode}):\n"
                 f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    out = {}
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        out[(r["bench"], r["impl"], r["metric"], r["bytes"])] = r["value"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="directory of allreduce_bench(_mpi)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per size per invocation")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes-mib", default="1,16,100")
    ap.add_argument("--latency-kib", default="64")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--timeout", type=float, default=600, help="seconds per invocation")
    args = ap.parse_args()
    impls = args.impls.split(",")
    for impl in impls:
        if impl not in IMPLS:
            sys.exit(f"allreduce_compare: unknown implementation '{impl}'; known: {', '.join(IMPLS)}")
    rounds = []
    for i in range(args.rounds):
        figures = {}
        for impl in impls:
            load = os.getloadavg()[0]
            got = run_once(args, impl)
            figures.update(got)
            for (bench, name, metric, size), value in sorted(got.items()):
                if metric in ("time_ms", "speedup_vs_unfused"):
                    print(json.dumps(dict(bench=bench, impl=name, metric=metric, bytes=size,
                                          stat="round", round=i, value=value,
                                          load1_before=round(load, 2))), flush=True)
        rounds.append(figures)
    keys = sorted(set().union(*rounds))
    median = {}
    for key in keys:
        values = [r[key] for r in rounds if key in r]
        median[key] = statistics.median(values)
        bench, impl, metric, size = key
        print(json.dumps(dict(bench=bench, impl=impl, metric=metric, bytes=size, stat="median",
                              rounds=len(values), runs=args.runs, ranks=args.ranks,
                              value=round(median[key], 6), min=round(min(values), 6),
                              max=round(max(values), 6))), flush=True)
    for impl in ("parallax", "parallax-tcp"):
        for key in keys:
            bench, name, metric, size = key
            peer = (bench, "openmpi-shm", metric, size)
            if name == impl and metric == "time_ms" and peer in median:
                ratios = [r[key] / r[peer] for r in rounds if key in r and peer in r]
                print(json.dumps(dict(bench="allreduce", impl=f"{impl}_vs_openmpi-shm",
                                      metric="time_ratio", unit="x", bytes=size,
                                      stat="median", rounds=len(ratios),
                                      value=round(median[key] / median[peer], 4),
                                      min=round(min(ratios), 4), max=round(max(ratios), 4))),
                      flush=True)


if __name__ == "__main__":
    main()
