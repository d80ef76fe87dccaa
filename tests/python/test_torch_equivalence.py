"""2 ranks x batch B under `parallax run` equal plain single-process PyTorch with batch 2B, for
every path: all-reduce, all-gather, PS and the hybrid plan. The model (trainers/tiny.py) has a
table on Adagrad ([optimizer.sparse]), a bag table on SGD and a dense layer on Adagrad
([[variable]] optimizers), dense layers on SGD ([optimizer.dense]), and changes the dense
learning rate twice (for variables on the PS, through the shards' SET message)."""
import pytest

import pxtest
import tiny_reference as ref


@pytest.mark.parametrize("arch,want_paths", [
    ("allreduce", {"words.weight": "allreduce", "hidden.weight": "allreduce"}),
    ("allgather", {"words.weight": "allgather", "tags.weight": "allgather",
                   "hidden.weight": "allreduce"}),
    ("ps", {"words.weight": "ps", "tags.weight": "ps", "hidden.weight": "ps"}),
    ("hybrid", {"tags.weight": "ps", "hidden.weight": "allreduce", "out.bias": "allreduce"}),
])
def test_two_ranks_equal_plain_pytorch_with_twice_the_batch(tmp_path, arch, want_paths):
    job = pxtest.Job(tmp_path, "tiny", ref.job_toml(arch, tags_on_ps=arch == "hybrid"))
    code, output = job.run()
    assert code == 0, output
    plan = job.rank_result(0)["plan"]
    assert {k: plan[k] for k in want_paths} == want_paths, plan
    assert job.rank_result(1)["steps"] == ref.STEPS
    want = ref.plain_pytorch(pxtest.load_trainer("tiny"), job.state("initial.pt"))
    pxtest.assert_close(job.state("final.pt"), want, f"arch {arch}")
