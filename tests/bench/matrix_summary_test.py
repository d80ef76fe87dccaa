#!/usr/bin/python3
"""bench/cluster/matrix.py's summary lines from run rows, with no cluster: the per-round ratio to
DDP sparse, and the paired loss difference over rounds with its standard error, where a variant
with no loss (torch-ddp-nosync) is left out of the loss instead of stopping the summary."""

import os
import statistics
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "cluster"))
import matrix  # noqa: E402


def row(impl, rnd, tokens_per_s, loss):
    return dict(impl=impl, workers=8, hosts=8, ps_hosts=0, rate="1gbit", round=rnd,
                tokens_per_s=tokens_per_s, loss_last20=loss)


class SummaryTest(unittest.TestCase):
    def summary(self, rows):
        out = []
        matrix.summarize(rows, out.append)
        return {(o["impl"], o["metric"]): o for o in out}

    def test_paired_loss_difference_and_ratio_per_round(self):
        rows = [row("parallax-hybrid", 0, 300.0, 5.50), row("torch-ddp-sparse", 0, 100.0, 5.40),
                row("parallax-hybrid", 1, 280.0, 5.45), row("torch-ddp-sparse", 1, 100.0, 5.50),
                row("parallax-hybrid", 2, 330.0, 5.52), row("torch-ddp-sparse", 2, 110.0, 5.49),
                row("torch-ddp-nosync", 0, 900.0, None), row("torch-ddp-nosync", 1, 900.0, None),
                row("torch-ddp-nosync", 2, 900.0, None)]
        s = self.summary(rows)
        loss = s[("parallax-hybrid", "loss_last20_vs_torch_ddp_sparse")]
        diffs = [0.10, -0.05, 0.03]
        self.assertEqual(loss["runs"], 3)
        self.assertAlmostEqual(loss["value"], statistics.mean(diffs), places=4)
        self.assertAlmostEqual(loss["sem"], statistics.stdev(diffs) / 3 ** 0.5, places=4)
        self.assertEqual(s[("parallax-hybrid", "tokens_per_s_vs_torch_ddp_sparse")]["value"], 3.0)
        # No loss, so no loss line; its ratio is still there.
        self.assertNotIn(("torch-ddp-nosync", "loss_last20_vs_torch_ddp_sparse"), s)
        self.assertEqual(s[("torch-ddp-nosync", "tokens_per_s_vs_torch_ddp_sparse")]["value"], 9.0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
