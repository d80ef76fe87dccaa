#!/usr/bin/env python3
"""What a worker's row cache could save on the `ctr` data under two staleness rules: a model of
the pull bytes, not a measurement (bench/e2e/ctr_cache.py measures the cache the trainer has).

    bench/e2e/cache_rule_model.py [--data data/ctr] [--workers 2] [--batch 256] [--steps 1000]
        [--staleness 1,4,16] [--dim 16]

It replays the training file's categorical ids as the `ctr` model looks them up (26 tables,
row = value mod the table's size from generator.json, 0 when missing): at each step every
worker takes the next `batch` examples, asks for each table's distinct ids, and then pushes a
gradient for each of them. A shard's row counts the pushes it took (a per-row version). Rules:

- `clock` (the trainer's, schemas/ps_wire.md "Row cache"): a row pulled for step p serves the
  worker's steps up to p + S; later it is pulled again. A pull costs the id and the row.
- `version` (HET's per-row versions, on top of `clock`): a held row older than S steps is not
  pulled again but checked: the worker sends its id and the version it holds (8 + 4 bytes)
  and the shard sends the row (and its version) only when it took more than S pushes since;
  a bit per checked row says which came back. A pulled row carries its version (4 bytes).
- `version-others`: the same, counting only the other workers' pushes (the shard would need
  to know a row's pushes by worker).

Prints one JSON line per rule and S: the fraction of a step's distinct rows each way (hit:
served with no message; checked: a version rule's checks, the refreshed among them; refreshed:
pulled again; missed: not held) and `pull_bytes_cut`, the pull bytes saved against no cache (ids
and rows; headers left out, as they are per message, not per row).
"""

import argparse
import collections
import json
import os


def read_ids(path, sizes, limit):
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            if i >= limit:
                break
            cats = line.rstrip("\n").split("\t")[14:]
            rows.append([int(h, 16) % sizes[t] if h else 0 for t, h in enumerate(cats)])
    return rows


def simulate(rows, sizes, workers, batch, steps, staleness, rule):
    tables = len(sizes)
    pushes = [collections.Counter() for _ in range(tables)]
    own = [[collections.Counter() for _ in range(tables)] for _ in range(workers)]
    cache = [[{} for _ in range(tables)] for _ in range(workers)]  # id -> (pulled_at, version)
    n = collections.Counter()
    for step in range(steps):
        touched = []
        for w in range(workers):
            first = (step * workers + w) * batch
            examples = rows[first:first + batch]
            for t in range(tables):
                ids = {r[t] for r in examples}
                held = cache[w][t]
                for i in ids:
                    n["rows"] += 1
                    version = pushes[t][i] - (own[w][t][i] if rule == "version-others" else 0)
                    e = held.get(i)
                    if e is None:
                        n["missed"] += 1
                        held[i] = (step, version)
                    elif step - e[0] <= staleness:
                        n["hit"] += 1
                    elif rule == "clock":
                        n["refreshed"] += 1
                        held[i] = (step, version)
                    else:
                        n["checked"] += 1
                        if version - e[1] > staleness:
                            n["refreshed"] += 1
                            held[i] = (step, version)
                touched.append((w, t, ids))
        for w, t, ids in touched:
            for i in ids:
                pushes[t][i] += 1
                own[w][t][i] += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/ctr")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--staleness", default="1,4,16")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--rules", default="clock,version,version-others")
    args = ap.parse_args()
    with open(os.path.join(args.data, "generator.json")) as f:
        sizes = json.load(f)["table_sizes"]
    rows = read_ids(os.path.join(args.data, "train.tsv"), sizes, args.workers * args.batch * args.steps)
    steps = min(args.steps, len(rows) // (args.workers * args.batch))
    row_bytes = 4 * args.dim
    for s in [int(x) for x in args.staleness.split(",")]:
        for rule in args.rules.split(","):
            n = simulate(rows, sizes, args.workers, args.batch, steps, s, rule)
            total = n["rows"]
            no_cache = total * (8 + row_bytes)
            if rule == "clock":
                cost = (n["missed"] + n["refreshed"]) * (8 + row_bytes)
            else:
                cost = (n["missed"] * (8 + row_bytes + 4) + n["checked"] * (8 + 4 + 1 / 8) +
                        n["refreshed"] * (row_bytes + 4))
            line = {"bench": "cache_rule_model", "impl": rule, "metric": "pull_bytes_cut", "unit": "",
                    "stat": "model", "runs": 1, "value": round(1 - cost / no_cache, 4),
                    "staleness": s, "workers": args.workers, "batch": args.batch, "steps": steps,
                    "dim": args.dim}
            for k in ("hit", "checked", "refreshed", "missed"):
                line[k] = round(n[k] / total, 4)
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
