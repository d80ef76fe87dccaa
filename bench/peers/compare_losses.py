#!/usr/bin/python3
"""Where a Parallax job's and the PyTorch peer's W3 trajectories part: per-step losses side by side.

With the same draws (w3_torch.py's default) the two sides start from the same values and train
on the same batches and negatives, so their per-step losses agree to float rounding; this prints
the first step at which they differ by more than each threshold, and the losses over windows.

  bench/peers/compare_losses.py --state-dir DIR --job ID --torch SYNC_DIR [--window 20,100]
  bench/peers/compare_losses.py --coordinator HOST:PORT --job ID --torch SYNC_DIR

The job's losses are its metric points (metrics_every = 1) of its current attempt, from
`parallax status ID --json --points` (bench/e2e/job_status.py): against a coordinator that runs
(--coordinator), or one started for the reading on DIR, the state directory of a coordinator
that ended: a `parallax run --state-dir DIR`, or a cluster's workdir (bench/cluster/matrix.py:
WORKDIR/cluster-<shape>-*, one job per Parallax run in the order run). SYNC_DIR: the directory
of the peer's done-R.json files (matrix.py: WORKDIR/torch-ddp-sparse-<shape>-<rate>-<round>).
One JSON line per statistic: "diverged" (first step whose largest per-rank difference is over a
threshold), "loss" (the mean over ranks and the window's last steps, each side).
"""

import argparse
import glob
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "e2e"))
import job_status  # noqa: E402  (what `parallax status JOB --json` says of a job)

THRESHOLDS = (1e-5, 1e-3, 1e-1)


def parallax_losses(status):
    """The losses [rank][step] of a job's status object read with its points
    (job_status.read(..., points=True)); NaN where a step has no point."""
    points = status.get("points")
    if not points:
        sys.exit(f"compare_losses: job {status['id']} has no metric points of attempt "
                 f"{status['attempt']} (state {status['state']})")
    ranks = max(p["rank"] for p in points) + 1
    steps = max(p["step"] for p in points) + 1
    out = np.full((ranks, steps), np.nan)
    for p in points:
        out[p["rank"], p["step"]] = p["loss"]
    return out


def job_with_points(args):
    """The job's status object with its points: from --coordinator, or from a coordinator
    started on --state-dir."""
    try:
        if args.coordinator:
            return job_status.read(args.bin, args.coordinator, args.job, points=True)
        with job_status.served(args.bin, args.state_dir) as address:
            return job_status.read(args.bin, address, args.job, points=True)
    except job_status.StatusError as e:
        sys.exit(f"compare_losses: cannot read job {args.job}: {e}")


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
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-dir", help="state directory of a coordinator that ended (a "
                       "`parallax run --state-dir`, a cluster's workdir)")
    where.add_argument("--coordinator", help="HOST:PORT of a coordinator that runs")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                    help="directory of `parallax` and parallax-coordinator (default: build/bin)")
    ap.add_argument("--job", type=int, required=True, help="the Parallax job's id")
    ap.add_argument("--torch", required=True, help="directory of the peer's done-R.json")
    ap.add_argument("--window", default="20,100", help="last steps to average the loss over")
    args = ap.parse_args()
    px, pt = parallax_losses(job_with_points(args)), torch_losses(args.torch)
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
