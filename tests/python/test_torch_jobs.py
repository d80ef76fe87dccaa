"""parallax.torch jobs under `parallax run` (2 ranks, a PS shard): an interrupted job resumes to
the same model, async and SSP jobs run to the end, ranks with different models stop with an
error naming the rank and the parameter, and a rank never holds a PS table."""
import math

import pxtest
import tiny_reference as ref


def test_an_interrupted_job_resumes_to_the_same_model(tmp_path):
    # Both ranks exit at step 8 of the first attempt; the job restarts from the checkpoint of
    # step 5 (dense values and optimizer state, the PS table, each rank's registered state).
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
    want = ref.plain_pytorch(pxtest.load_trainer("tiny"), job.state("initial.pt"))
    pxtest.assert_close(job.state("final.pt"), want, "resumed job")


def run_to_the_end(tmp_path, consistency):
    job = pxtest.Job(tmp_path, "tiny", ref.job_toml("hybrid", consistency=consistency,
                                                    tags_on_ps=True))
    code, output = job.run()
    assert code == 0, output
    for rank in range(2):
        assert job.rank_result(rank)["steps"] == ref.STEPS
        assert job.rank_result(rank)["plan"]["tags.weight"] == "ps"
    final = job.state("final.pt")
    assert all(math.isfinite(v) for t in final.values() for v in t.flatten().tolist())
    assert not all((final[k] == job.state("initial.pt")[k]).all() for k in final)


def test_an_async_job_runs_to_the_end(tmp_path):
    run_to_the_end(tmp_path, "async")


def test_an_ssp_job_runs_to_the_end(tmp_path):
    run_to_the_end(tmp_path, "ssp")


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
