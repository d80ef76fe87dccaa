#!/usr/bin/python3
"""bench/cluster/ctr.py, small: the `ctr` model on 2 worker hosts and 2 PS hosts (links at
1 Gbit/s), async without a cache and with the version-checked row cache at staleness 4. Each job
runs to SUCCEEDED (ctr.py exits non-zero otherwise), and:

- each worker host's link carries, per step, what its rank's transports counted (PS pull, PS
  push and all-reduce bytes: with the shards on hosts of their own, all of a rank's traffic
  crosses its link) within 10%: the bench's two ways of counting agree;
- the cache's pull bytes are under 0.8x async's and its hit rate above 0.2 (on the e2e bench's
  data it is 0.45x and 0.67), and its link carries fewer bytes than async's.

    ctr_cluster_test.py --bin BUILD/bin

Needs root (network namespaces); without it, prints SKIPPED with the reason and exits 0 (ctest's
SKIP_REGULAR_EXPRESSION).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("SKIPPED: network namespaces need root")
        return 0
    with tempfile.TemporaryDirectory(prefix="px-ctr-cluster-test-") as tmp:
        argv = [sys.executable, os.path.join(ROOT, "bench", "cluster", "ctr.py"),
                "--bin", args.bin, "--rates", "1gbit", "--seeds", "1", "--steps", "160",
                "--skip", "40", "--metrics-every", "10", "--train", "40000", "--heldout",
                "2000", "--variants", "async,cache4v", "--per-run", "--workdir", tmp]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=500)
        if r.returncode != 0:
            print(f"FAILED: {' '.join(argv)} exited {r.returncode}:\n{r.stdout[-3000:]}"
                  f"{r.stderr[-5000:]}")
            return 1
    runs = {}
    for line in r.stdout.splitlines():
        row = json.loads(line)
        if row.get("stat") == "run":
            runs[row["impl"]] = row
    failures = []
    for impl in ("async", "cache4v"):
        if impl not in runs:
            print(f"FAILED: no run line for {impl}:\n{r.stdout[-3000:]}")
            return 1
        row = runs[impl]
        counted = row["pull_bytes"] + row["push_bytes"] + row["allreduce_bytes"]
        ratio = row["link_bytes_per_step"] / counted
        print(f"{impl}: link {row['link_bytes_per_step']:.0f} B/step, transports {counted:.0f} "
              f"(pull {row['pull_bytes']:.0f}, push {row['push_bytes']:.0f}, all-reduce "
              f"{row['allreduce_bytes']:.0f}): {ratio:.3f}; hit rate {row['cache_hit_rate']:.3f}")
        if not 0.9 <= ratio <= 1.1:
            failures.append(f"{impl}: the link carried {ratio:.3f}x what the transports counted")
    pull = runs["cache4v"]["pull_bytes"] / runs["async"]["pull_bytes"]
    print(f"cache4v pull bytes {pull:.3f}x async's")
    if pull >= 0.8:
        failures.append(f"cache4v's pull bytes are {pull:.3f}x async's (expected < 0.8)")
    if runs["cache4v"]["cache_hit_rate"] <= 0.2:
        failures.append(f"cache4v's hit rate is {runs['cache4v']['cache_hit_rate']:.3f}")
    if runs["cache4v"]["link_bytes_per_step"] >= runs["async"]["link_bytes_per_step"]:
        failures.append("cache4v's link carried no fewer bytes than async's")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
