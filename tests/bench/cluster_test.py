#!/usr/bin/python3
"""The emulated cluster (bench/cluster): a W3 job (examples/w3.toml's model, a smaller batch and
few steps) with local aggregation on 2 hosts x 2 workers, links shaped to 1 Gbit/s, runs to
SUCCEEDED, and each host's link carries, in each direction, what the plan's bytes per worker by
path put there (bench/cluster/matrix.py, link_bytes_from_plan) within 10%
(ClusterTest.test_two_hosts_with_local_aggregation). ClusterTest.test_torch_front_end_on_two_hosts:
matrix.py's parallax-torch-hybrid variant (the W3 model in PyTorch through `parallax.torch`,
bench/e2e/w3_parallax_torch.py) on 2 hosts x 1 worker runs to SUCCEEDED with the plan its rank 0
stored, and each host's link carries, in both directions together, the bytes the trainers'
transports counted for one worker within 10% (with one rank per host and one PS shard per host,
a host's link carries its rank's collective bytes and the half of its PS bytes that goes to the
other host's shard, plus the other rank's half to this host's shard: one worker's bytes).

    cluster_test.py --bin BUILD/bin [--batch 64] [--steps 30] [--warmup 3] [TEST ...]

The data is a synthetic corpus in the Brown format (Zipf-distributed words), converted by
`parallax-data brown`, so the test needs no download. Needs root (network namespaces) and
iproute2; without root it reports a skip with the reason (exit 0, "SKIPPED" on stdout, which
ctest's SKIP_REGULAR_EXPRESSION turns into a skipped test); so does the front-end's test when
/usr/bin/python3 cannot import torch (python3-torch, scripts/install-deps --test).

What it prints for the record: the measured bytes, the plan's own link figure
(`total_bytes_per_host_link`) and their ratio. That figure leaves out that 1/H of a host's PS
traffic stays on the host and that a ring collective crosses a host's link once whatever the
workers on it, so at 2 hosts x 2 workers it is about twice what crosses; the check uses the
plan's bytes per worker by path, which the cost model gets right.
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "cluster"))
import matrix  # noqa: E402
from cluster import Cluster  # noqa: E402

ARGS = None


def write_corpus(src, documents=30, words_per_document=6000, types=20000, seed=7):
    """Brown-format documents ca01.. of word/tag tokens, words Zipf(1)-distributed."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(types)]
    os.makedirs(src)
    for d in range(documents):
        words = rng.choices(range(types), weights=weights, k=words_per_document)
        with open(os.path.join(src, f"c{'abcdefghijklmnopqr'[d // 99]}{d % 99 + 1:02d}"), "w",
                  encoding="utf-8") as f:
            f.write(" ".join(f"w{w}/nn" for w in words) + "\n")


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="px-cluster-test-")
        cls.data = os.path.join(cls.tmp.name, "data")
        src = os.path.join(cls.tmp.name, "corpus")
        write_corpus(src)
        subprocess.run([os.path.join(ARGS.bin, "parallax-data"), "brown", src,
                        os.path.join(cls.data, "brown")], check=True, stdout=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def matrix_args(self, name):
        """matrix.py's options for this test, and a fresh workdir for it."""
        args = argparse.Namespace(bin=ARGS.bin, data=self.data, batch=ARGS.batch,
                                  warmup=ARGS.warmup, steps=ARGS.steps, plan=None, timeout=600,
                                  measured_figures=False, eval_tokens=0,
                                  seed_per_round=False, metrics_every=1)
        workdir = os.path.join(self.tmp.name, name)
        os.makedirs(workdir)
        return args, workdir

    def test_two_hosts_with_local_aggregation(self):
        args, workdir = self.matrix_args("run")
        with Cluster(ARGS.bin, hosts=2, rate="1gbit", slots=2,
                     workdir=os.path.join(workdir, "cluster")) as c:
            # Raises (with the daemons' logs) unless the job ends SUCCEEDED.
            r = matrix.run_parallax(args, c, 4, 2, "parallax-hybrid", "hybrid", "1gbit",
                                    workdir, 0)
        print(f"per host per step: sent {r['link_sent_bytes_by_host']}, received "
              f"{r['link_received_bytes_by_host']}; from the plan's bytes by path "
              f"{r['expected_link_bytes']:.0f} per direction; the plan's link figure "
              f"{r['predicted_link_bytes']:.0f} (measured / it = {r['link_vs_plan_link']:.3f}); "
              f"link utilisation {r['link_util_max']:.3f}; paths {r['paths']}; a worker's transport over the plan's bytes {r['worker_vs_plan']:.3f}", flush=True)
        # The bytes below are the plan's: the job ran the plan that was priced.
        self.assertIsNone(r.get("plan_differs"), f"the job ran {r['paths']}")
        # Local aggregation is what the plan priced: the tables it put on the PS.
        self.assertIn("ps", r["paths"].values())
        expected = r["expected_link_bytes"]
        for direction in ("sent", "received"):
            for host, measured in enumerate(r[f"link_{direction}_bytes_by_host"]):
                self.assertLess(abs(measured / expected - 1), 0.10,
                                f"host {host} {direction} {measured} bytes per step, the plan's "
                                f"bytes by path put {expected:.0f} there")

    def test_torch_front_end_on_two_hosts(self):
        try:
            import torch  # noqa: F401  (the trainer's interpreter is /usr/bin/python3 too)
        except ImportError as e:
            print(f"SKIPPED: the PyTorch front-end's trainer needs torch, which /usr/bin/python3 "
                  f"cannot import ({e}); scripts/install-deps --test installs python3-torch", flush=True)
            self.skipTest("no torch")
        args, workdir = self.matrix_args("torch")
        with Cluster(ARGS.bin, hosts=2, rate="1gbit", slots=1,
                     workdir=os.path.join(workdir, "cluster"), allow_exec=[workdir]) as c:
            # Raises (with the daemons' logs) unless the job ends SUCCEEDED.
            r = matrix.run_parallax(args, c, 2, 2, "parallax-torch-hybrid", "hybrid", "1gbit",
                                    workdir, 0, frontend=True)
        worker = r["worker_bytes_per_step"]
        print(f"per host per step: sent {r['link_sent_bytes_by_host']}, received "
              f"{r['link_received_bytes_by_host']}; a worker's transports {worker:.0f}; "
              f"paths {r['paths']}; predicted communication {r['predicted_comm_ms']:.2f} ms "
              f"per step, waited {r['comm_wait_ms']:.2f}", flush=True)
        # The plan rank 0 made for the torch model's variables (nn.Module names).
        self.assertIn("inp.weight", r["paths"])
        self.assertGreater(worker, 0)
        for host, (sent, received) in enumerate(zip(r["link_sent_bytes_by_host"],
                                                    r["link_received_bytes_by_host"])):
            self.assertLess(abs((sent + received) / worker - 1), 0.10,
                            f"host {host}: {sent} + {received} bytes per step on its link, a "
                            f"worker's transports counted {worker:.0f}")


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ARGS, rest = ap.parse_known_args()
    if os.geteuid() != 0:
        print(f"SKIPPED: network namespaces need root (euid {os.geteuid()})")
        return 0
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
