"""parallax.torch jobs under `parallax run` (2 ranks, a PS shard): an interrupted job resumes to
the same model, async and SSP jobs run to the end (one with a row cache, whose counters reach
`parallax status`), ranks with different models stop with an
error naming the rank and the parameter, a rank never holds a PS table, hot rows train the
one-process model through a restart, and small fusion
buckets all-reduce dense gradients while backward goes on."""
import json
import math
import os
import subprocess

import parallax.torch as px
import pxtest
import tiny_reference as ref


def test_an_interrupted_job_resumes_to_the_same_model_and_exports_it(tmp_path):
    # Both ranks exit at step 8 of the first attempt; the job restarts from the checkpoint of
    # step 5 (dense values and optimizer state, the PS table, each rank's registered state).
    # `parallax export` then writes the checkpoint of the last step (every job ends with
    # one, whatever checkpoint_every) for the plain model.
    toml = ref.job_toml("hybrid", tags_on_ps=True, checkpoint_every=5, max_restarts=1,
                        user="fail_at_step = 8")
    job = pxtest.Job(tmp_path, "tiny", toml)
    code, output = job.run()
    assert code == 0, output
    for rank in range(2):
        result = job.rank_result(rank)
        assert result["resumed_from"] == 5, result
        # "seen" is the rank's own state: steps 0-4 came back from the checkpoint.
        assert result["seen"] == list(range(ref.STEPS)), result
    tiny = pxtest.load_trainer("tiny")
    want = ref.plain_pytorch(tiny, job.state("initial.pt"))
    pxtest.assert_close(job.state("final.pt"), want, "resumed job")

    exported = os.path.join(job.dir, "export")
    code, output = job.export(exported)
    assert code == 0, output
    plain = tiny.Tiny()
    plain.load_state_dict(px.exported_state_dict(exported, plain), strict=False)
    pxtest.assert_close(plain.state_dict(), want, "exported checkpoint of the last step")


def run_to_the_end(tmp_path, consistency, ps=""):
    job = pxtest.Job(tmp_path, "tiny", ref.job_toml("hybrid", consistency=consistency,
                                                    tags_on_ps=True, ps=ps))
    code, output = job.run()
    assert code == 0, output
    for rank in range(2):
        assert job.rank_result(rank)["steps"] == ref.STEPS
        assert job.rank_result(rank)["plan"]["tags.weight"] == "ps"
    final = job.state("final.pt")
    assert all(math.isfinite(v) for t in final.values() for v in t.flatten().tolist())
    assert not all((final[k] == job.state("initial.pt")[k]).all() for k in final)
    return job


def test_an_async_job_runs_to_the_end(tmp_path):
    run_to_the_end(tmp_path, "async")


def test_an_ssp_job_runs_to_the_end(tmp_path):
    run_to_the_end(tmp_path, "ssp")


def test_an_ssp_job_with_a_row_cache_runs_to_the_end_and_reports_it(tmp_path):
    # The tiny model's PS table under `[ps] cache_staleness`: its lookups are served from the
    # rank's cache between pulls, and the cache's counters reach `parallax status --json`.
    job = run_to_the_end(tmp_path, "ssp", ps="cache_staleness = 3")
    points = [p for p in job.status()["points"] if p["values"].get("steps", 0) > 0]
    assert points, "no metric points of steps"
    total = {k: sum(p["values"].get(k, 0.0) * p["values"]["steps"] for p in points)
             for k in ("row_cache_hits", "row_cache_misses", "row_cache_stale_refreshes",
                       "row_cache_bytes_saved")}
    assert all(k in p["values"] for p in points for k in total), points
    assert total["row_cache_misses"] > 0, total
    assert total["row_cache_hits"] > 0 and total["row_cache_bytes_saved"] > 0, total


def test_ranks_with_different_models_stop_naming_the_rank_and_the_parameter(tmp_path):
    job = pxtest.Job(tmp_path, "tiny", ref.job_toml("hybrid", user="differ = true"))
    code, output = job.run()
    assert code != 0
    assert "rank 1" in output and "hidden.weight" in output, output
    assert "differs between ranks" in output and "build the same model" in output, output


def test_a_rank_never_holds_a_table_on_the_ps(tmp_path):
    # 4M x 32 floats = 512 MB: a rank that held it would be far over the bound.
    rows = 4_000_000
    toml = ref.job_toml("hybrid", user=f"big_rows = {rows}\nsave = false",
                        extra_variables='[[variable]]\nname = "big.weight"\npath = "ps"')
    job = pxtest.Job(tmp_path, "tiny", toml)
    code, output = job.run()
    assert code == 0, output
    table_mb = rows * 32 * 4 / 2**20
    for rank in range(2):
        result = job.rank_result(rank)
        assert result["plan"]["big.weight"] == "ps"
        # The rank's peak memory: the interpreter and torch (about 250 MB) and the batches' rows.
        assert result["max_rss_mb"] < 0.75 * table_mb, result


OVERLAP_JOB = """
[job]
name = "mlp-overlap"
workers = 2
arch = "allreduce"
[trainer]
command = ["./mlp.py"]
steps = 15
batch_size = 256
timeline = "timeline"
[optimizer.dense]
type = "sgd"
lr = 0.01
[user]
{bucket}
"""


def overlap(tmp_path, bucket):
    """(overlapped fraction of the all-reduce time, buckets per step) of an all-reduce job."""
    job = pxtest.Job(tmp_path, "mlp", OVERLAP_JOB.format(bucket=bucket))
    code, output = job.run()
    assert code == 0, output
    traces = [os.path.join(job.dir, "timeline", f"rank-{r}.trace.json") for r in range(2)]
    stats = subprocess.run([os.path.join(pxtest.BIN_DIR, "parallax-timeline-stats")] + traces,
                           capture_output=True, text=True, check=True)
    with open(traces[0]) as f:
        events = json.load(f)["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    buckets = sum(1 for e in events if e["ph"] == "X" and lanes[e["tid"]].startswith("allreduce"))
    return json.loads(stats.stdout)["value"], buckets / 15


def test_small_fusion_buckets_all_reduce_while_backward_goes_on(tmp_path):
    # 4 layers of 1 MiB of weights: buckets of 1.1 MiB hold a layer each; the default (64 MiB)
    # holds the whole model, reduced once backward is over.
    fraction, per_step = overlap(tmp_path / "small", "bucket_bytes = 1_100_000")
    assert per_step >= 4, per_step
    assert fraction > 0.05, fraction
    whole, one = overlap(tmp_path / "default", "")
    assert one == 1, one
    assert whole < fraction, (whole, fraction)


def test_hot_rows_train_the_one_process_model_through_a_restart(tmp_path):
    # `[ps] hot_rows = 8`: the tags table's 8 most sampled rows live on both ranks, all-reduced
    # with the dense gradients, the others on the shard. The job still trains the one-process
    # model, across a restart at step 8 (the checkpoint of step 5 handed the hot rows' whole
    # state back to the shard, and the resumed ranks took it over from there), and the ranks
    # count the rows the hot rows served (`hot_row_hits`) and the others.
    toml = ref.job_toml("hybrid", tags_on_ps=True, checkpoint_every=5, max_restarts=1,
                        user="fail_at_step = 8", ps="hot_rows = 8")
    job = pxtest.Job(tmp_path, "tiny", toml)
    code, output = job.run()
    assert code == 0, output
    for rank in range(2):
        assert job.rank_result(rank)["resumed_from"] == 5, job.rank_result(rank)
        assert job.rank_result(rank)["plan"]["tags.weight"] == "ps"
    tiny = pxtest.load_trainer("tiny")
    want = ref.plain_pytorch(tiny, job.state("initial.pt"))
    pxtest.assert_close(job.state("final.pt"), want, "hot rows, restarted")
    points = [p for p in job.status()["points"] if p["values"].get("steps", 0) > 0]
    hits = sum(p["values"].get("hot_row_hits", 0.0) * p["values"]["steps"] for p in points)
    misses = sum(p["values"].get("hot_row_misses", 0.0) * p["values"]["steps"] for p in points)
    assert hits > 0 and misses > 0, (hits, misses)
