#!/usr/bin/env python3
"""The row cache on the built-in `ctr` model: pull bytes per step and held-out log loss of its
26 tables on the PS, sync against async without a cache and with `[ps] cache_staleness` S.

    bench/e2e/ctr_cache.py --bin build/bin [--seeds 1,2,3] [--variants sync,async,cache4]
        [--steps 1000] [--workers 2] [--shards 2] [--ids fixed|hashed] [--per-run]

A variant is `sync`, `async`, `cacheS` (async with cache_staleness = S), `cacheSv` (the same
with `cache_rule = "version"`), `cacheSacc` / `cacheSvacc` (either with cache_accumulate), `hotN` (sync with `[ps] hot_rows = N`: each table's N most frequent
sampled rows on every worker, all-reduced with the MLPs) or `hotauto` (`hot_rows = "auto"`, as
many as the planner's cost model chooses), and with the suffix
`-unbatched` the same with `[ps] batch = false` (one message per table and partition), with `-fp16`
with `[ps] value_encoding = "fp16"` (rows and gradients as halves on the wire), with `-planner`
with the MLPs' path left to the planner (otherwise pinned to all-reduce). For each seed,
`parallax-data synthetic-ctr` writes the data (bench/e2e/ctr_quality.py's generator settings),
then `parallax run` trains each variant for the same steps (every table on the PS, the MLPs
all-reduced).
The bytes are the ranks' transport counters (`ps_pull_sent_bytes` + `ps_pull_recv_bytes`, and
the push ones) from `parallax status --json --points`, averaged over the points after the first
--skip steps and over the ranks; the cache's counters likewise (hit rate: hits over hits,
misses and stale refreshes; hot share: of a step's distinct rows of the tables, those the hot rows
served, hot_row_hits over hits and misses). The log loss is rank 0's last `eval ... log_loss L` line. Prints
one JSON line per variant, metric and statistic (median over seeds), one per run with
--per-run, and per cache variant the median over seeds of its pull bytes against async's
(`pull_bytes_ratio`) and of its log loss against sync's (`log_loss_ratio`); per hot variant the
same against sync's. `allreduce_bytes` is what the ranks' all-reduce sockets carried (none when
the ranks' all-reduce goes through shared memory, as on one host).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctr_quality  # noqa: E402  (the generator and the eval line)
import job_status  # noqa: E402

METRICS = (("pull_bytes", "B/step"), ("push_bytes", "B/step"), ("allreduce_bytes", "B/step"),
           ("ps_requests", "messages/step"),
           ("cache_hit_rate", ""), ("hot_share", ""), ("log_loss", "nats"), ("auc", ""), ("samples_per_s", "samples/s"))


def cache_variant(variant):
    """`cacheS[v][acc]`: (S, the rule, accumulate); None when `variant` is not one."""
    spec = variant[len("cache"):]
    accumulate = spec.endswith("acc")
    spec = spec.removesuffix("acc")
    rule = "version" if spec.endswith("v") else "clock"
    spec = spec.removesuffix("v")
    if not spec.isdigit() or int(spec) < 1:
        return None
    return int(spec), rule, accumulate


# A suffix -> its line in the job's [ps] table; "-planner" has none: it leaves the MLPs' path to
# the planner where the other variants pin them to all-reduce.
SUFFIXES = {"-unbatched": "batch = false", "-fp16": 'value_encoding = "fp16"', "-planner": None}


def split_variant(variant):
    """(the variant without its suffixes, the set of its suffixes)."""
    suffixes = set()
    while True:
        for suffix in SUFFIXES:
            if variant.endswith(suffix):
                variant = variant.removesuffix(suffix)
                suffixes.add(suffix)
                break
        else:
            return variant, suffixes


def check_variant(bench, variant):
    """Exits naming `bench` unless `variant` is one job_text knows."""
    base, _ = split_variant(variant)
    if base not in ("sync", "async", "hotauto") and not (
            (base.startswith("cache") and cache_variant(base) is not None) or
            (base.startswith("hot") and base[3:].isdigit() and int(base[3:]) > 0)):
        sys.exit(f"{bench}: unknown variant {variant!r}: sync, async, cacheS, cacheSv or "
                 "cacheSacc, cacheSvacc (S ≥ 1), hotN (N ≥ 1) or hotauto, each with "
                 "any of -unbatched, -fp16 and -planner")


def job_text(args, data, variant, seed, ps_keys=()):
    """The job file of `variant`; `ps_keys` are more lines of its [ps] table."""
    variant, suffixes = split_variant(variant)
    hot = variant.startswith("hot")
    consistency = "sync" if variant == "sync" or hot else "async"
    # The MLPs all-reduced, every table on the PS: the PS bytes are the tables' alone (with
    # arch "ps" the MLPs' push-pull would be most of the pull bytes, and no cache's business).
    lines = ["[job]", f'name = "ctr-cache-{variant}"', f"workers = {args.workers}",
             'arch = "hybrid"', f'consistency = "{consistency}"', "", "[ps]",
             f"shards = {args.shards}", *ps_keys]
    if variant.startswith("cache"):
        staleness, rule, accumulate = cache_variant(variant)
        lines.append(f"cache_staleness = {staleness}")
        if args.cache_rows:
            lines.append(f"cache_rows = {args.cache_rows}")
        if rule == "version":
            lines.append('cache_rule = "version"')
        if accumulate:
            lines.append("cache_accumulate = true")
    if hot:
        count = variant[len("hot"):]
        lines.append(f'hot_rows = "{count}"' if count == "auto" else f"hot_rows = {int(count)}")
    lines += [SUFFIXES[s] for s in sorted(suffixes) if SUFFIXES[s]]
    lines += ["", "[trainer]", 'model = "ctr"', f"steps = {args.steps}",
              f"batch_size = {args.batch}", f"metrics_every = {args.metrics_every}", "",
              "[model]", f'data = "{data}"',
              *([f"tables = {ctr_quality.TABLE_SIZES}"] if args.ids == "fixed" else
                ['ids = "hashed"', f"max_rows = [{args.max_rows}]", 'eviction = "lfu"']),
              f"dim = {args.dim}", "bottom = [64]", "top = [64]", f"eval_every = {args.steps}",
              f"eval_examples = {args.heldout}", f"seed = {seed}", "", "[optimizer.dense]",
              'type = "adam"', "lr = 1e-3", "", "[optimizer.sparse]", 'type = "adagrad"',
              f"lr = {args.lr}", ""]
    for t in range(len(ctr_quality.TABLE_SIZES)):
        lines += ["[[variable]]", f'name = "ctr/table{t}"', 'path = "ps"', ""]
    # The MLPs' layers (bottom = [64], top = [64]: two each, trainer/models/ctr_model.cc), pinned
    # so that sync and async run the same plan (left to the planner, a sync job on hosts of
    # their own put them on the PS), unless -planner.
    for mlp in (() if "-planner" in suffixes else ("bottom", "top")):
        for layer in range(2):
            for part in ("weights", "bias"):
                lines += ["[[variable]]", f'name = "ctr/{mlp}/layer{layer}/{part}"',
                          'path = "allreduce"', ""]
    return "\n".join(lines)


def mean_over(points, name):
    return statistics.fmean(p["values"].get(name, 0.0) for p in points)


def run(args, workdir, data, variant, seed):
    text = job_text(args, os.path.join(data, "train.tsv"), variant, seed)
    status, seconds, (auc, log_loss) = ctr_quality.train(
        "ctr_cache", args.bin, workdir, f"{variant}-{seed}", text, args.timeout, points=True)
    return {**figures(status, args.skip, args.steps, f"{variant} seed {seed}"),
            "log_loss": log_loss, "auc": auc, "seconds": seconds}


def figures(status, skip, steps, name):
    """What the ranks' metric points of steps skip..steps say, averaged over the points and the
    ranks: bytes per step by path (transport counters), PS messages per step, the cache's hit
    rate, the hot rows' share and samples/s. `status` is read with points=True."""
    points = job_status.points_between(status, skip, steps + 1)
    if not points:
        sys.exit(f"ctr_cache: {name}: no metric points after step {skip}")
    hot_looked = sum(mean_over(points, n) for n in ("hot_row_hits", "hot_row_misses"))
    return {
        "pull_bytes": mean_over(points, "ps_pull_sent_bytes") + mean_over(points, "ps_pull_recv_bytes"),
        "push_bytes": mean_over(points, "ps_push_sent_bytes") + mean_over(points, "ps_push_recv_bytes"),
        "allreduce_bytes": mean_over(points, "allreduce_sent_bytes") +
        mean_over(points, "allreduce_recv_bytes"),
        "ps_requests": mean_over(points, "ps_requests"),
        "cache_hit_rate": job_status.row_cache_hit_rate(lambda name: mean_over(points, name)),
        "hot_share": mean_over(points, "hot_row_hits") / hot_looked if hot_looked else 0.0,
        "samples_per_s": statistics.fmean(p["throughput"] for p in points)}


def add_options(p, variants, timeout):
    """The options of the runs (data, job files, what is measured) on parser `p`, shared with
    bench/cluster/ctr.py."""
    p.add_argument("--bin", default="build/bin")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--variants", default=variants)
    p.add_argument("--train", type=int, default=500000)
    p.add_argument("--heldout", type=int, default=50000)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--skip", type=int, default=100, help="steps left out of the measures")
    p.add_argument("--metrics-every", type=int, default=50)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--cache-rows", type=int, default=0,
                   help="[ps] cache_rows of the cache variants (0: the default, 100,000)")
    p.add_argument("--ids", choices=("fixed", "hashed"), default="fixed",
                   help="hashed: every table a dynamic table of the raw ids (examples/ctr-hashed.toml)")
    p.add_argument("--max-rows", type=int, default=200000, help="with --ids hashed: each table's budget")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05, help="sparse Adagrad's")
    p.add_argument("--workdir", default="")
    p.add_argument("--timeout", type=int, default=timeout, help="seconds a job may take")
    p.add_argument("--per-run", action="store_true")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(p, "sync,async,cache1,cache4,cache16", 900)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--shards", type=int, default=2)
    args = p.parse_args()
    args.bin = os.path.abspath(args.bin)
    workdir = args.workdir or tempfile.mkdtemp(prefix="ctr-cache-")
    os.makedirs(workdir, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.variants.split(",")
    for v in variants:
        check_variant("ctr_cache", v)
    # The generator's defaults of bench/e2e/ctr_quality.py, without drift.
    gen_args = argparse.Namespace(bin=args.bin, train=args.train, heldout=args.heldout,
                                  drift_shift=0.0, drift_new=0.0, zipf=1.2)
    params = {"steps": args.steps, "workers": args.workers, "shards": args.shards,
              "dim": args.dim, "batch": args.batch, "lr": args.lr, "train": args.train,
              "ids": args.ids, **({"max_rows": args.max_rows} if args.ids == "hashed" else {}),
              **({"cache_rows": args.cache_rows} if args.cache_rows else {}),
              "arch": "hybrid, tables on ps"}
    results = {v: [] for v in variants}
    for seed in seeds:
        data, _ = ctr_quality.generate(gen_args, workdir, seed)
        for v in variants:
            r = run(args, workdir, data, v, seed)
            r["seed"] = seed
            results[v].append(r)
            if args.per_run:
                print(json.dumps({"bench": "ctr_cache", "impl": v, "stat": "run", **r, **params}),
                      flush=True)
    for v in variants:
        rs = results[v]
        for metric, unit in METRICS:
            print(json.dumps({"bench": "ctr_cache", "impl": v, "metric": metric, "unit": unit,
                              "stat": "median", "runs": len(rs),
                              "value": statistics.median(r[metric] for r in rs),
                              "values": [r[metric] for r in rs], "seeds": seeds, **params}),
                  flush=True)
    for v in variants:
        if not v.startswith(("cache", "hot")) or split_variant(v)[1]:
            continue
        pull_base = "async" if v.startswith("cache") else "sync"
        for metric, base in (("pull_bytes", pull_base), ("log_loss", "sync")):
            if base not in results:
                continue
            ratios = [c[metric] / b[metric] for c, b in zip(results[v], results[base])]
            print(json.dumps({"bench": "ctr_cache", "impl": v, "metric": f"{metric}_ratio",
                              "unit": f"x {base}", "stat": "median", "runs": len(ratios),
                              "value": statistics.median(ratios), "values": ratios,
                              "seeds": seeds, **params}), flush=True)


if __name__ == "__main__":
    main()
