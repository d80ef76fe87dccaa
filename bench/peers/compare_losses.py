#!/usr/bin/python3
"""Where a Parallax job's and the PyTorch peer's W3 trajectories part: per-step losses side by side.

With the same draws (w3_torch.py's default) the two sides start from the same values and train
on the same batches and negatives, so their per-step losses agree to float rounding; this prints
the first step at which they differ by more than each threshold, and the losses over windows.

  bench/peers/compare_losses.py --db STATE.DB --job ID --torch SYNC_DIR [--window 20,100]

STATE.DB: the coordinator's database (metric points, metrics_every = 1); SYNC_DIR: the directory
of the peer's done-R.json files (bench/cluster/matrix.py: WORKDIR/torch-ddp-sparse-<shape>-<rate>-
<round>; its state database: WORKDIR/cluster-<shape>-*/state.db, one job per Parallax run in the
order run). One JSON line per statistic: "diverged" (first step whose largest per-rank difference
is over a threshold), "loss" (the mean over ranks and the window's last steps, each side).
"""

import argparse
import glob
import json
import os
import sqlite3
import sys

import numpy as np

THRESHOLDS = (1e-5, 1e-3, 1e-1)


def parallax_losses(db, job):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("SELECT rank, step, loss FROM metrics WHERE job_id = ? ORDER BY attempt",
                       (job,)).fetchall()
    con.close()
    if not rows:
        sys.exit(f"compare_losses: {db} has no metric points of job {job}")
    ranks, steps = max(r for r, _, _ in rows) + 1, max(s for _, s, _ in rows) + 1
    out = np.full((ranks, steps), np.nan)
    for rank, step, loss in rows:
        out[rank, step] = loss
    return out


def torch_losses(directory):
    paths = sorted(glob.glob(os.path.join(directory, "done-*.json")),
                   key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    if not paths:
        sys.exit(f"compare_losses: no done-R.json in {directory}")
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            out.append(json.load(f)["losses"])
    return np.array(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="the coordinator's state database")
    ap.add_argument("--job", type=int, required=True, help="the Parallax job's id")
    ap.add_argument("--torch", required=True, help="directory of the peer's done-R.json")
    ap.add_argument("--window", default="20,100", help="last steps to average the loss over")
    args = ap.parse_args()
    px, pt = parallax_losses(args.db, args.job), torch_losses(args.torch)
    if px.shape != pt.shape:
        sys.exit(f"compare_losses: Parallax has {px.shape} (ranks, steps) of losses, the peer "
                 f"{pt.shape}: not the same run's shape")
    if np.isnan(px).any():
        sys.exit("compare_losses: the job has steps without a metric point (metrics_every = 1?)")
    diff = np.abs(px - pt).max(axis=0)
    common = dict(bench="losses", ranks=px.shape[0], steps=px.shape[1])
    for threshold in THRESHOLDS:
        over = np.nonzero(diff > threshold)[0]
        print(json.dumps(dict(common, stat="diverged", threshold=threshold,
                              step=int(over[0]) if over.size else None)))
    for window in (int(w) for w in args.window.split(",")):
        print(json.dumps(dict(common, stat="loss", window=window,
                              parallax=round(float(px[:, -window:].mean()), 4),
                              torch=round(float(pt[:, -window:].mean()), 4),
                              difference=round(float(px[:, -window:].mean()
                                                     - pt[:, -window:].mean()), 4))))


if __name__ == "__main__":
    main()
