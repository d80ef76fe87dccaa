"""What the benchmarks read of a job (bench/e2e/job_status.py: `parallax status JOB --json`,
never the coordinator's database), on a real `parallax run` of a small mlp job with a metric
point every step: while it runs, through its embedded coordinator, and after it ended, through
a coordinator started on its state directory, with every point (`--points`) for
bench/e2e/e2e.py's job_metrics.

Usage: job_status_test.py --bin BUILD/bin [unittest options]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "e2e"))
import e2e  # noqa: E402
import job_status  # noqa: E402

ARGS = None
WORKERS, STEPS, BATCH = 2, 1000, 32
JOB = f"""[job]
name = "status-read"
workers = {WORKERS}
arch = "hybrid"

[trainer]
model = "mlp"
steps = {STEPS}
batch_size = {BATCH}
metrics_every = 1

[model]
features = 8
classes = 4
hidden = [16]
eval_every = 0

[optimizer.dense]
type = "sgd"
lr = 0.1
"""


class JobStatusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="px-job-status-test-")
        job = os.path.join(cls.tmp.name, "job.toml")
        with open(job, "w", encoding="utf-8") as f:
            f.write(JOB)
        cls.state = os.path.join(cls.tmp.name, "state")
        run = subprocess.Popen([os.path.join(ARGS.bin, "parallax"), "run", "--state-dir",
                                cls.state, job], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        cls.running = cls.read_while_running(run, step=100)
        out, _ = run.communicate(timeout=300)
        if run.returncode != 0:
            raise AssertionError(f"parallax run exited with {run.returncode}:\n{out[-3000:]}")
        cls.done = job_status.finished(ARGS.bin, cls.state)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def read_while_running(cls, run, step):
        """The job's status once every rank has a point of `step`, read from the run's own
        coordinator (job_status.running_address), as bytes_check.py and scaling.py read it."""
        pace = job_status.Pace()
        deadline = time.monotonic() + 120
        while run.poll() is None and time.monotonic() < deadline:
            address = job_status.running_address(cls.state)
            seen = -1
            if address is not None:
                try:
                    s = job_status.read(ARGS.bin, address, 1)
                except job_status.StatusError:
                    s = None  # not listening yet
                seen = job_status.min_step(s, WORKERS) if s else -1
                if seen >= step:
                    return s
            time.sleep(pace.wait(seen, step))
        raise AssertionError(f"no status with every rank at step {step} while the job ran "
                             f"(exit {run.poll()})")

    def test_a_running_job_shows_its_progress(self):
        s = self.running
        self.assertEqual(s["state"], "RUNNING")
        self.assertEqual(len(s["metrics"]), WORKERS)
        self.assertTrue(100 <= job_status.min_step(s, WORKERS) < STEPS - 1, s["metrics"])
        self.assertNotIn("points", s)  # only with --points

    def test_a_finished_run_has_every_point_of_every_rank(self):
        s = self.done
        self.assertEqual((s["state"], s["attempt"]), ("SUCCEEDED", 1))
        points = s["points"]
        self.assertEqual(len(points), WORKERS * STEPS)
        for rank in range(WORKERS):
            self.assertEqual([p["step"] for p in points if p["rank"] == rank], list(range(STEPS)))
        steps = [p["step"] for p in points]
        self.assertEqual(steps, sorted(steps), "points in step order")
        self.assertEqual(job_status.min_step(s, WORKERS), STEPS - 1)
        self.assertEqual({p["step"] for p in job_status.points_between(s, 10, 20)},
                         set(range(10, 20)))

    def test_newest_metrics_are_the_last_point_of_each_rank(self):
        # "metrics" (cli/job_metrics.cc) is each rank's newest point of the attempt, though
        # it reads only the last few steps when every rank has a point there.
        newest = {}
        for p in self.done["points"]:
            newest[p["rank"]] = p
        self.assertEqual(sorted(self.done["metrics"], key=lambda p: p["rank"]),
                         [newest[r] for r in range(WORKERS)])

    def test_job_metrics_from_the_points(self):
        warmup = 100
        m = e2e.job_metrics(self.done, STEPS, warmup, BATCH)
        last20 = [p for p in self.done["points"] if p["step"] >= STEPS - 20]
        per_rank = [statistics.mean(p["values"].get("loss_mean", p["loss"]) for p in last20
                                    if p["rank"] == r) for r in range(WORKERS)]
        self.assertAlmostEqual(m["loss_last20"], statistics.mean(per_rank), places=9)
        timed = [p for p in self.done["points"] if warmup <= p["step"] < STEPS]
        slowest = max(sum(BATCH / p["throughput"] for p in timed if p["rank"] == r)
                      for r in range(WORKERS))
        self.assertAlmostEqual(m["step_ms"], 1000.0 * slowest / (STEPS - warmup), places=6)
        self.assertGreater(m["compute_ms"], 0)

    def test_a_run_in_a_state_dir_used_before_is_the_one_read(self):
        # finished() reads job 1: a bench that runs again in the same --workdir empties the
        # run's state directory first, or it reports the earlier run's figures as its own.
        with tempfile.TemporaryDirectory(prefix="px-job-status-reuse-") as tmp:
            state = os.path.join(tmp, "state")
            for steps in (20, 30):
                job = os.path.join(tmp, f"job-{steps}.toml")
                with open(job, "w", encoding="utf-8") as f:
                    f.write(JOB.replace(f"steps = {STEPS}", f"steps = {steps}"))
                run = subprocess.run([os.path.join(ARGS.bin, "parallax"), "run", "--state-dir",
                                      job_status.fresh_state_dir(state), job],
                                     capture_output=True, text=True, timeout=300)
                self.assertEqual(run.returncode, 0, run.stdout[-2000:] + run.stderr[-2000:])
                s = job_status.finished(ARGS.bin, state)
                self.assertEqual(len(s["points"]), WORKERS * steps)

    def test_points_only_of_one_job_in_json(self):
        cli = os.path.join(ARGS.bin, "parallax")
        with job_status.served(ARGS.bin, self.state) as address:
            no_job = subprocess.run([cli, "--coordinator", address, "status", "--json",
                                     "--points"], capture_output=True, text=True, timeout=60)
            no_json = subprocess.run([cli, "--coordinator", address, "status", "1", "--points"],
                                     capture_output=True, text=True, timeout=60)
        self.assertEqual(no_job.returncode, 2, no_job.stderr)
        self.assertIn("--points needs a JOB", no_job.stderr)
        self.assertNotEqual(no_json.returncode, 0, no_json.stdout)
        self.assertIn("--json", no_json.stderr)
        with self.assertRaises(job_status.StatusError):
            job_status.points_between(self.running, 0, 10)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ARGS, rest = ap.parse_known_args()
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
