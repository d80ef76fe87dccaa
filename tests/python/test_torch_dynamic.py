"""px.DynamicEmbeddingBag: a table over raw 64-bit ids with no row count. Run by hand (no
coordinator) its rows live in the process, admitted, evicted and trained by the same C++ table
the PS shards use; under `parallax run` on 2 workers the table lives on a PS shard, and the job
equals the process alone on the global batch; `parallax export` writes its ids and rows."""
import json
import math
import os

import numpy as np
import pytest
import torch

import parallax
import parallax.torch as px
from parallax.torch import _context
import pxtest

JOB = """
[job]
name = "dynamic"
workers = {workers}
arch = "hybrid"
[trainer]
command = ["./dynamic.py"]
steps = {steps}
batch_size = 32
{checkpoint}
[optimizer.dense]
type = "sgd"
lr = 0.5
[optimizer.sparse]
type = "adagrad"
lr = 0.3
initial_accumulator = 0.0
epsilon = 1e-10
[ps]
shards = 1
[user]
out = "@OUT@"
global_batch = 64
max_rows = {max_rows}
"""


@pytest.fixture(autouse=True)
def fresh_context(monkeypatch):
    """Each test is a new process as far as parallax.torch knows; no task environment."""
    for name in list(os.environ):
        if name.startswith("PARALLAX_"):
            monkeypatch.delenv(name)
    _context.reset_for_tests()
    yield
    _context.reset_for_tests()


def run_alone(tmp_path, steps, max_rows):
    """The trainer in this process, no coordinator: (rank-0 result, final.pt)."""
    job = pxtest.Job(tmp_path, "dynamic",
                     JOB.format(workers=1, steps=steps, max_rows=max_rows, checkpoint=""))
    pxtest.load_trainer("dynamic").main(job.file)
    return job.rank_result(0), job.state("final.pt")


def test_alone_the_rows_live_in_the_process_under_their_budget(tmp_path):
    result, final = run_alone(tmp_path, steps=30, max_rows=300)
    assert result["plan"]["emb.weight"] == "local"
    stats = result["stats"]
    # 30 steps of tens of distinct ids each, of hundreds of distinct values: the budget was
    # needed, and held.
    assert 0 < stats["rows"] <= 300, stats
    assert stats["evicted_budget"] > 0, stats
    assert stats["admitted"] == stats["rows"] + stats["evicted_budget"], stats
    ids, rows = final["emb.ids"].numpy(), final["emb.rows"].numpy()
    assert len(ids) == stats["rows"] and rows.shape == (len(ids), 8)
    assert (np.diff(ids) > 0).all()  # sorted, each once
    assert (ids < 0).any() and (ids > 0).any()  # the whole 64-bit range
    assert 0 not in ids  # padding_idx is never a row
    losses = result["losses"]
    assert all(math.isfinite(x) for x in losses)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]), losses


def test_a_step_over_the_budget_stops_with_what_to_set(tmp_path):
    # 64 examples x 4 fields of Zipf values: a step touches tens of distinct ids, more than 10.
    with pytest.raises(parallax.Error) as e:
        run_alone(tmp_path, steps=3, max_rows=10)
    assert "max_rows" in str(e.value) and "emb.weight" in str(e.value), str(e.value)


def test_outside_a_model_the_module_reads_rows_and_zeros_for_padding():
    m = px.DynamicEmbeddingBag(4, mode="sum", padding_idx=0)
    ids = torch.tensor([[0, -5, 2**62], [7, 0, 0]])
    out = m(ids)
    assert out.shape == (2, 4)
    again = px.DynamicEmbedding(4, padding_idx=0)(torch.tensor([0, -5]))
    assert (again[0] == 0).all() and not (again[1] == 0).all()


def test_two_workers_on_a_shard_equal_the_process_alone_and_export_the_table(tmp_path):
    steps = 12
    _, alone = run_alone(tmp_path / "alone", steps=steps, max_rows=0)
    _context.reset_for_tests()
    os.environ.pop("PARALLAX_JOB_FILE", None)
    job = pxtest.Job(tmp_path / "job", "dynamic",
                     JOB.format(workers=2, steps=steps, max_rows=0,
                                checkpoint='checkpoint_every = 6\ncheckpoint_dir = "checkpoints"'))
    code, output = job.run()
    assert code == 0, output
    for rank in range(2):
        result = job.rank_result(rank)
        assert result["plan"]["emb.weight"] == "ps", result
        assert result["steps"] == steps
    got = job.state("final.pt")
    pxtest.assert_close(got, {k: alone[k] for k in got}, "2 workers against one process")
    exported = os.path.join(job.dir, "export")
    code, output = job.export(exported)
    assert code == 0, output
    with open(os.path.join(exported, "manifest.json")) as f:
        entry = next(v for v in json.load(f)["variables"] if v["name"] == "emb.weight")
    assert entry["kind"] == "dynamic" and entry["ids_dtype"] == "int64", entry
    ids = np.load(os.path.join(exported, entry["ids_file"]))
    rows = np.load(os.path.join(exported, entry["file"]))
    assert ids.dtype == np.int64 and (np.diff(ids) > 0).all()
    np.testing.assert_array_equal(ids, alone["emb.ids"].numpy())
    np.testing.assert_allclose(rows, alone["emb.rows"].numpy(), rtol=1e-5, atol=1e-6)
