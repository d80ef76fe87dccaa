#!/usr/bin/python3
"""Plots bench/cluster/matrix.py results (JSON lines in FILE or on stdin) with gnuplot: tokens/s
vs workers, bytes per host link per step vs workers and CPU milliseconds per step (every process
of the run, all hosts together) vs workers, every variant, one panel per link rate.

  bench/cluster/plot.py results.jsonl --out docs/   # cluster-tokens.png, cluster-link-bytes.png,
                                                    # cluster-cpu.png (--prefix: other names)

Lines join the shapes with one worker per host (N:N); a shape with several workers per host
(8:2, local aggregation) is an open point of the same colour at its N. Shapes with PS hosts
(N:N+P, `[ps] hosts = "ps"`) are a dashed line of the same colour; their link bytes are the
worker hosts' (the PS hosts' links are in matrix.py's ps_host_link_* figures).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ORDER = ["parallax-hybrid", "parallax-ps", "parallax-allgather", "parallax-allreduce",
         "torch-ddp-sparse", "torch-ddp-dense", "torch-ddp-nosync", "parallax-torch-hybrid"]
COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]
NO_LINK = {"torch-ddp-nosync"}  # compute only: nothing on the links
LINK_METRICS = {"link_bytes_per_step"}
# metric, y label, scale, PNG, title, y axis settings
PANELS = (("tokens_per_s", "tokens/s (all workers)", 1.0, "cluster-tokens.png",
           "Training throughput, W3", "unset logscale y; set yrange [0:*]"),
          ("link_bytes_per_step", "MB per host link per step (sent + received)", 1e-6,
           "cluster-link-bytes.png", "Bytes on a host's link (veth counters), W3",
           "set logscale y 10; set yrange [*:*]"),
          ("cpu_ms_per_step", "CPU ms per step (all processes, all hosts)", 1.0,
           "cluster-cpu.png", "CPU per training step (/proc, every process of the run), W3",
           "unset logscale y; set yrange [0:*]"))


def rate_label(bits):
    return f"{bits / 1e9:g} Gbit/s" if bits >= 1e9 else f"{bits / 1e6:g} Mbit/s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", help="matrix.py's JSON lines (default: stdin)")
    ap.add_argument("--out", default="docs")
    ap.add_argument("--prefix", default="cluster",
                    help="PNG names: PREFIX-tokens.png, PREFIX-link-bytes.png, PREFIX-cpu.png")
    args = ap.parse_args()
    lines = open(args.results, encoding="utf-8") if args.results else sys.stdin
    rows = [json.loads(l) for l in lines if l.startswith("{")]
    medians = [r for r in rows if r.get("bench") == "cluster" and r.get("stat") == "median"]
    if not medians:
        sys.exit("plot: no median lines of bench/cluster/matrix.py in the input")
    runs = [r for r in rows if r.get("bench") == "cluster" and r.get("stat") == "run"]
    rate_bits = {r["rate"]: r["rate_bits_per_s"] for r in runs}
    rates = sorted({r["rate"] for r in medians}, key=lambda r: rate_bits.get(r, 0))
    impls = [i for i in ORDER if any(r["impl"] == i for r in medians)]
    batch = runs[0]["batch"] if runs else "?"
    steps = runs[0]["steps"] if runs else "?"
    tmp = tempfile.mkdtemp(prefix="px-cluster-plot-")
    os.makedirs(args.out, exist_ok=True)
    script = ['set terminal pngcairo size 1300,640 font ",11"', "set grid",
              "set key below maxrows 3 font \",10\"", 'set xlabel "workers N"',
              "set xtics (2, 4, 8)", "set logscale x 2", "set xrange [1.7:9.5]",
              'set format y "%g"']
    for metric, ylabel, scale, png, title, yaxis in PANELS:
        png = png.replace("cluster", args.prefix, 1)
        script += [f"set output '{os.path.join(args.out, png)}'",
                   f"set multiplot layout 1,{len(rates)} title \"{title} (batch {batch} per "
                   f"worker, {steps} timed steps; tbf-shaped links, no added latency)\"",
                   f'set ylabel "{ylabel}"', yaxis]
        for rate in rates:
            plots = []
            for i, impl in enumerate(impls):
                if metric in LINK_METRICS and impl in NO_LINK:
                    continue
                mine = [r for r in medians if r["impl"] == impl and r["rate"] == rate
                        and r["metric"] == metric]
                for kind, keep in (
                        ("flat", lambda r: r["workers"] == r["hosts"] and not r.get("ps_hosts")),
                        ("ps-hosts", lambda r: r["workers"] == r["hosts"] and r.get("ps_hosts")),
                        ("grouped", lambda r: r["workers"] != r["hosts"])):
                    points = sorted((r for r in mine if keep(r)), key=lambda r: r["workers"])
                    if not points:
                        continue
                    dat = os.path.join(tmp, f"{metric}-{rate}-{impl}-{kind}.dat")
                    with open(dat, "w", encoding="utf-8") as f:
                        f.write("# workers hosts median min max\n")
                        for r in points:
                            f.write(f"{r['workers']} {r['hosts']} {r['value'] * scale:.6g} "
                                    f"{r['min'] * scale:.6g} {r['max'] * scale:.6g}\n")
                    c = COLORS[ORDER.index(impl) % len(COLORS)]
                    if kind == "flat":
                        plots.append(f"'{dat}' using 1:3:4:5 with yerrorlines lw 2 pt 7 "
                                     f"lc rgb '{c}' title '{impl}'")
                    elif kind == "ps-hosts":
                        ps = "/".join(str(r["ps_hosts"]) for r in points)
                        plots.append(f"'{dat}' using 1:3:4:5 with yerrorlines lw 2 dt 2 pt 5 "
                                     f"lc rgb '{c}' title '{impl}, + {ps} PS hosts'")
                    else:
                        shapes = ", ".join(f"{r['hosts']} hosts x {r['workers'] // r['hosts']}"
                                           for r in points)
                        plots.append(f"'{dat}' using 1:3:4:5 with yerrorbars pt 6 ps 2 "
                                     f"lc rgb '{c}' title '{impl}, {shapes}'")
            script += [f'set title "{rate_label(rate_bits.get(rate, 0))} per host link"',
                       "plot " + ", ".join(plots)]
        script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)
    pngs = [os.path.join(args.out, p[3].replace("cluster", args.prefix, 1)) for p in PANELS]
    print(f"plot: {', '.join(pngs)}", file=sys.stderr)


if __name__ == "__main__":
    main()
