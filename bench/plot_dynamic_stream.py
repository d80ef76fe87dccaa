#!/usr/bin/python3
"""Plots `ps_bench --modes stream` (JSON lines on stdin or in FILE) with gnuplot into one SVG:
each shard's rows held (against its share of max_rows) and its RSS, over the new ids sent.

  build/bin/ps_bench --modes stream --every 250 > stream.jsonl
  bench/plot_dynamic_stream.py stream.jsonl --out docs/dynamic-stream.svg
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", help="JSON lines of ps_bench --modes stream (default: stdin)")
    ap.add_argument("--out", default="docs/dynamic-stream.svg")
    args = ap.parse_args()
    lines = open(args.results, encoding="utf-8") if args.results else sys.stdin
    rows = [json.loads(l) for l in lines if l.startswith("{")]
    points = [r for r in rows if r.get("bench") == "ps" and r.get("mode") == "stream"
              and r.get("stat") == "point" and "shard" in r and "step" in r]
    if not points:
        sys.exit("plot_dynamic_stream: no stream samples in the input")
    first = points[0]
    shards = sorted({r["shard"] for r in points})
    tmp = tempfile.mkdtemp(prefix="px-stream-plot-")
    for s in shards:
        held = {r["step"]: r for r in points if r["shard"] == s and r["metric"] == "shard_rows_held"}
        rss = {r["step"]: r for r in points if r["shard"] == s and r["metric"] == "shard_rss_bytes"}
        with open(os.path.join(tmp, f"shard{s}.dat"), "w", encoding="utf-8") as f:
            f.write("# new_ids(1e6) rows_held rss_MiB\n")
            for step in sorted(held):
                f.write(f"{held[step]['new_ids'] / 1e6:.3f} {held[step]['value']:.0f} "
                        f"{rss[step]['value'] / 2**20:.1f}\n")
    budget = first["shard_budget"]
    colors = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"]
    rows_plots, rss_plots = [], []
    for i, s in enumerate(shards):
        dat = os.path.join(tmp, f"shard{s}.dat")
        c = colors[i % len(colors)]
        rows_plots.append(f"'{dat}' using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '{c}' "
                          f"title 'shard {s}'")
        rss_plots.append(f"'{dat}' using 1:3 with linespoints lw 2 pt 7 ps 0.6 lc rgb '{c}' "
                         f"title 'shard {s}'")
    rows_plots.insert(0, f"{budget} with lines dt 2 lw 1 lc rgb 'black' title 'budget per "
                         f"shard ({budget:,})'")
    title = (f"ps\\\\_bench --modes stream: a dynamic table, max\\\\_rows {first['max_rows']:,} "
             f"over {len(shards)} shards (LRU), 2 workers, sync\\n"
             f"{first['k']} ids a worker-step: half new, half from a hot set of "
             f"{first['hot']:,} ids moving {first['hot_drift']} a step")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    script = f"""
set terminal svg size 900,720 dynamic font "sans,12"
set output '{args.out}'
set multiplot layout 2,1 title "{title}" font ",12"
set grid
set key right bottom
set format y "%.0f"
set xlabel "new ids sent (millions)"
set ylabel "rows held"
set yrange [0:{budget * 1.15:.0f}]
plot {", ".join(rows_plots)}
set ylabel "shard RSS (MiB)"
set yrange [0:*]
set key right bottom
plot {", ".join(rss_plots)}
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


if __name__ == "__main__":
    main()
