#!/usr/bin/python3
"""Plots bench/scaling results (JSON lines on stdin or in FILE) with gnuplot into two PNGs:
bytes per worker per step vs workers, and communication time per step vs workers.

  bench/scaling/plot.py results.jsonl --out docs/   # writes scaling-bytes.png, scaling-comm-time.png
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

IMPLS = ["parallax-hybrid", "parallax-allreduce", "parallax-allgather", "parallax-ps",
         "torch-ddp-sparse"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", help="JSON lines of scaling.py (default: stdin)")
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    lines = open(args.results, encoding="utf-8") if args.results else sys.stdin
    rows = [json.loads(l) for l in lines if l.startswith("{") and '"bench": "scaling"' in l]
    rows = [r for r in rows if "impl" in r]
    if not rows:
        sys.exit("plot: no scaling results in the input")
    tmp = tempfile.mkdtemp(prefix="px-scaling-plot-")
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    for impl in impls:
        with open(os.path.join(tmp, f"{impl}.dat"), "w", encoding="utf-8") as f:
            f.write("# workers measured_MB ss_MB predicted_MB comm_ms step_ms\n")
            for r in sorted((r for r in rows if r["impl"] == impl), key=lambda r: r["workers"]):
                def mb(v):
                    return "NaN" if v is None else f"{v / 1e6:.6f}"
                f.write(f"{r['workers']} {mb(r.get('measured'))} {mb(r.get('ss'))} "
                        f"{mb(r.get('predicted'))} {r.get('comm_ms') or 'NaN'} "
                        f"{r.get('step_ms') or 'NaN'}\n")
    title = (f"W3, compute-light (batch {rows[0]['batch']}, d {rows[0]['dim']}, "
             f"hidden {rows[0]['hidden']}, V 50,000)")
    colors = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"]
    bytes_plots, time_plots = [], []
    for i, impl in enumerate(impls):
        dat = os.path.join(tmp, f"{impl}.dat")
        c = colors[i % len(colors)]
        measured_col = 3 if impl.startswith("torch") else 2
        bytes_plots.append(f"'{dat}' using 1:{measured_col} with linespoints lw 2 pt 7 "
                           f"lc rgb '{c}' title '{impl} (measured)'")
        bytes_plots.append(f"'{dat}' using 1:4 with points pt 6 ps 2 lc rgb '{c}' "
                           f"title '{impl} (predicted)'")
        time_col = 6 if impl.startswith("torch") else 5
        suffix = " (whole step)" if impl.startswith("torch") else ""
        time_plots.append(f"'{dat}' using 1:{time_col} with linespoints lw 2 pt 7 lc rgb '{c}' "
                          f"title '{impl}{suffix}'")
    os.makedirs(args.out, exist_ok=True)
    script = f"""
set terminal pngcairo size 900,560 font ",11"
set key outside right top
set size ratio 0.8
set grid
set xlabel "workers"
set xtics (2, 4, 8)
set logscale x 2
set xrange [1.8:9]
set logscale y 10
set format y "%g"
set title "Bytes per worker per step (sent + received)\\n{title}"
set ylabel "MB per worker per step"
set output '{os.path.join(args.out, "scaling-bytes.png")}'
plot {", ".join(bytes_plots)}
set title "Communication time per step (training thread blocked)\\n{title}"
set ylabel "ms per step"
set output '{os.path.join(args.out, "scaling-comm-time.png")}'
plot {", ".join(time_plots)}
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


if __name__ == "__main__":
    main()
