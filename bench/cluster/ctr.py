#!/usr/bin/env python3
"""The built-in `ctr` model on the emulated cluster: bench/e2e/ctr_cache.py's variants (sync,
async, the row cache's cacheS / cacheSv, hot rows; each with any of -unbatched, -fp16 and
-planner) with every worker and every PS shard on its own network-namespace host, so that the
PS and all-reduce bytes cross shaped links and are counted at each host's veth.

    bench/cluster/ctr.py --bin build/bin [--hosts 2] [--ps-hosts 2] [--rates 100mbit,1gbit]
        [--variants sync,async,cache4,cache4v] [--seeds 1,2,3] [--steps 1000] [--per-run]

For each seed `parallax-data synthetic-ctr` writes the data (ctr_quality.py's generator
settings); then for each rate a cluster (bench/cluster/cluster.py: H worker hosts, one rank each,
and P PS hosts, one shard each, `[ps] hosts = "ps"`) runs each variant in turn, the job file
ctr_cache.py's (26 tables on the PS, the MLPs all-reduced). Per run:

- link figures over the window from step --skip to the last metric point before the end: bytes
  per worker host per step (sent + received at its veth: its rank's PS and all-reduce bytes),
  the PS hosts' likewise, and the links' utilisation (matrix.py's link_figures);
- samples/s: the window's samples (workers x batch x steps) over its seconds;
- from the ranks' metric points (ctr_cache.figures): pull and push bytes at the ranks' transport
  counters, PS messages per step, the cache's hit rate;
- rank 0's held-out log loss and AUC (`parallax logs JOB --task trainer/0`, its last `eval`).

Each job's `[plan] link_bytes_per_s` is the link's rate / 8, so that the planner's choices
(`hotauto`, `-planner`) know the link.

Prints one JSON line per run with --per-run, per variant, rate and metric the median over
seeds, and per variant and rate the medians of the paired ratios: link bytes, pull bytes and
samples/s against async's, log loss against sync's. Needs root (namespaces) and scripts/build.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench", "e2e"))
from cluster import Cluster, ClusterError  # noqa: E402
import ctr_cache  # noqa: E402  (the variants' job files and what the metric points say)
import ctr_quality  # noqa: E402  (the data generator and the eval line)
from matrix import cpu_figures, cpu_sample, link_figures, load1, rate_bits, sample  # noqa: E402

METRICS = (("samples_per_s", "samples/s"), ("link_bytes_per_step", "B/step"),
           ("ps_host_link_bytes_per_step", "B/step"), ("link_util_max", ""),
           ("pull_bytes", "B/step"), ("push_bytes", "B/step"), ("allreduce_bytes", "B/step"),
           ("ps_requests", "messages/step"), ("cache_hit_rate", ""), ("hot_share", ""),
           ("cpu_ms_per_step", "ms"), ("log_loss", "nats"), ("auc", ""))
# Paired ratios: metric -> the variant it is divided by.
RATIOS = (("samples_per_s", "async"), ("link_bytes_per_step", "async"), ("pull_bytes", "async"),
          ("log_loss", "sync"))


def run(args, cluster, data, variant, seed, rate, workdir):
    name = f"ctr-{variant}-{args.hosts}x{args.ps_hosts}-{rate}-{seed}"
    ps_keys = ['hosts = "ps"'] if args.ps_hosts else []
    text = ctr_cache.job_text(args, os.path.join(data, "train.tsv"), variant, seed, ps_keys)
    # The planner's link figure is the shaped rate (as matrix.py's jobs): what `hotauto` and
    # `-planner` choose by.
    text += f"\n[plan]\nlink_bytes_per_s = {rate_bits(rate) / 8:.6g}\n"
    path = os.path.join(workdir, f"{name}.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    job = cluster.submit(path)
    # The window: from the first point at or after --skip to the last point a step's metrics
    # interval before the end, clear of the evaluation and the shutdown.
    s0, b0, t0, cpu0 = sample(cluster, job, args.workers, args.skip)
    s1, b1, t1, cpu1 = sample(cluster, job, args.workers, args.steps - 1 - args.metrics_every)
    end = cluster.wait(job, timeout=args.timeout)
    if end["state"] != "SUCCEEDED":
        raise ClusterError(f"{name}: job {job} ended {end['state']}:\n{json.dumps(end)}\n"
                           + cluster.logs())
    out = ctr_cache.figures(cluster.status(job, points=True), args.skip, args.steps, name)
    out.update(link_figures(b0, b1, s1 - s0, t1 - t0, cluster.rate_bits_per_s, args.hosts))
    out.update(cpu_figures(cpu0, cpu1, s1 - s0))
    # The window's own rate (the points' throughput is each rank's, over its metric intervals).
    out["samples_per_s"] = args.workers * args.batch * (s1 - s0) / (t1 - t0)
    log = cluster.cli(["logs", job, "--task", "trainer/0"]).stdout
    evaluation = ctr_quality.last_eval(log)
    if evaluation is None:
        raise ClusterError(f"{name}: job {job}'s trainer/0 printed no `eval step` line with a "
                           f"log loss; its log ends with:\n{log[-1500:]}")
    out["auc"], out["log_loss"] = evaluation
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ctr_cache.add_options(p, "sync,async,cache4,cache4v", 1200)
    p.add_argument("--hosts", type=int, default=2, help="worker hosts, one rank each")
    p.add_argument("--ps-hosts", type=int, default=2,
                   help="PS hosts, one shard each (0: the shards on the worker hosts)")
    p.add_argument("--rates", default="100mbit,1gbit", help="each link's rate, per cluster")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("ctr.py: network namespaces need root")
    if args.hosts < 1 or args.ps_hosts < 0:
        sys.exit("ctr.py: --hosts must be at least 1 and --ps-hosts at least 0")
    if args.skip + args.metrics_every >= args.steps - 1:
        sys.exit(f"ctr.py: --steps {args.steps} leaves no window after --skip {args.skip} "
                 f"and a --metrics-every {args.metrics_every} interval")
    for v in args.variants.split(","):
        ctr_cache.check_variant("ctr.py", v)
    args.bin = os.path.abspath(args.bin)
    args.workers = args.hosts
    # The shards: one per PS host, or (without PS hosts) as many as the worker hosts.
    args.shards = args.ps_hosts or args.hosts
    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="ctr-cluster-"))
    os.makedirs(workdir, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.variants.split(",")
    rates = args.rates.split(",")
    for rate in rates:
        rate_bits(rate)  # raises on a rate it cannot read
    gen_args = argparse.Namespace(bin=args.bin, train=args.train, heldout=args.heldout,
                                  drift_shift=0.0, drift_new=0.0, zipf=1.2)
    data = {seed: ctr_quality.generate(gen_args, workdir, seed)[0] for seed in seeds}
    params = {"workers": args.workers, "hosts": args.hosts, "ps_hosts": args.ps_hosts,
              "shards": args.shards, "steps": args.steps, "skip": args.skip, "dim": args.dim,
              "batch": args.batch, "lr": args.lr, "train": args.train, "ids": args.ids,
              "arch": "hybrid, tables on ps", "shared_memory": False}
    results = {}  # (variant, rate) -> [run figures]
    for rate in rates:
        print(json.dumps({"bench": "ctr_cluster", "event": "cluster", "rate": rate,
                          "load1": load1(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}),
              flush=True)
        with Cluster(args.bin, args.hosts, rate=rate, ps_hosts=args.ps_hosts,
                     workdir=os.path.join(workdir, f"cluster-{rate}")) as cluster:
            for seed in seeds:
                for v in variants:  # in turn, so that the variants alternate
                    r = run(args, cluster, data[seed], v, seed, rate, workdir)
                    r["seed"] = seed
                    results.setdefault((v, rate), []).append(r)
                    if args.per_run:
                        print(json.dumps({"bench": "ctr_cluster", "impl": v, "stat": "run",
                                          "rate": rate, "load1": load1(), **r, **params}),
                              flush=True)
    for (v, rate), rs in results.items():
        for metric, unit in METRICS:
            values = [r.get(metric, 0.0) for r in rs]
            print(json.dumps({"bench": "ctr_cluster", "impl": v, "metric": metric, "unit": unit,
                              "stat": "median", "runs": len(rs), "value": statistics.median(values),
                              "values": values, "seeds": seeds, "rate": rate, **params}),
                  flush=True)
    for (v, rate), rs in results.items():
        for metric, base in RATIOS:
            if v == base or (base, rate) not in results:
                continue
            ratios = [c[metric] / b[metric] for c, b in zip(rs, results[(base, rate)])
                      if b[metric]]
            if ratios:
                print(json.dumps({"bench": "ctr_cluster", "impl": v, "metric": f"{metric}_ratio",
                                  "unit": f"x {base}", "stat": "median", "runs": len(ratios),
                                  "value": statistics.median(ratios), "values": ratios,
                                  "seeds": seeds, "rate": rate, **params}), flush=True)


if __name__ == "__main__":
    main()
