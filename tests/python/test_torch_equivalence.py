"""2 ranks x batch B under `parallax run` equal plain single-process PyTorch with batch 2B, for
every path: all-reduce, all-gather, PS and the hybrid plan. The model (trainers/tiny.py) has a
table on Adagrad ([optimizer.sparse]), a bag table on SGD and a dense layer on Adagrad
([[variable]] optimizers), dense layers on SGD ([optimizer.dense]), and changes the dense
learning rate mid-run (the SET message for variables on the PS)."""
import pytest
import torch

import pxtest

STEPS, BATCH = 12, 16
DENSE_LR, SPARSE_LR, TAGS_LR, OUT_LR = 0.2, 0.3, 0.5, 0.1
LR_AT = {5: 0.05, 9: 0.4}  # step -> learning rate of the "dense" group

JOB = """
[job]
name = "eq-{arch}"
workers = 2
arch = "{arch}"
[trainer]
command = ["./tiny.py"]
steps = {steps}
batch_size = {batch}
[optimizer.dense]
type = "sgd"
lr = {dense_lr}
[optimizer.sparse]
type = "adagrad"
lr = {sparse_lr}
initial_accumulator = 0.0
epsilon = 1e-10
[[variable]]
name = "tags.weight"
optimizer = {{ type = "sgd", lr = {tags_lr} }}
{tags_path}
[[variable]]
name = "out.weight"
optimizer = {{ type = "adagrad", lr = {out_lr}, initial_accumulator = 0.0, epsilon = 1e-10 }}
[ps]
shards = 1
[user]
out = "@OUT@"
lr_at = {{ {lr_at} }}
"""


def plain_pytorch(tiny, initial):
    """The same model, data and optimizers in one process with batch 2B."""
    model = tiny.Tiny()
    model.load_state_dict(initial)
    adagrad = dict(eps=1e-10, initial_accumulator_value=0.0)
    dense = torch.optim.SGD([model.hidden.weight, model.hidden.bias, model.out.bias],
                            lr=DENSE_LR)
    others = [torch.optim.Adagrad([model.words.weight], lr=SPARSE_LR, **adagrad),
              torch.optim.SGD([model.tags.weight], lr=TAGS_LR),
              torch.optim.Adagrad([model.out.weight], lr=OUT_LR, **adagrad)]
    data = tiny.dataset()
    for step, idx in enumerate(pxtest.global_batches(len(data), 2 * BATCH, STEPS, tiny.SEED)):
        dense.param_groups[0]["lr"] = LR_AT.get(step, dense.param_groups[0]["lr"])
        loss = model(*data[idx])
        for opt in [dense] + others:
            opt.zero_grad()
        loss.backward()
        for opt in [dense] + others:
            opt.step()
    return model.state_dict()


@pytest.mark.parametrize("arch,want_paths", [
    ("allreduce", {"words.weight": "allreduce", "hidden.weight": "allreduce"}),
    ("allgather", {"words.weight": "allgather", "tags.weight": "allgather",
                   "hidden.weight": "allreduce"}),
    ("ps", {"words.weight": "ps", "tags.weight": "ps", "hidden.weight": "ps"}),
    ("hybrid", {"tags.weight": "ps", "hidden.weight": "allreduce", "out.bias": "allreduce"}),
])
def test_two_ranks_equal_plain_pytorch_with_twice_the_batch(tmp_path, arch, want_paths):
    toml = JOB.format(arch=arch, steps=STEPS, batch=BATCH, dense_lr=DENSE_LR,
                      sparse_lr=SPARSE_LR, tags_lr=TAGS_LR, out_lr=OUT_LR,
                      tags_path='path = "ps"' if arch == "hybrid" else "",
                      lr_at=", ".join(f'"{k}" = {v}' for k, v in LR_AT.items()))
    job = pxtest.Job(tmp_path, "tiny", toml)
    code, output = job.run()
    assert code == 0, output
    plan = job.rank_result(0)["plan"]
    assert {k: plan[k] for k in want_paths} == want_paths, plan
    assert job.rank_result(1)["steps"] == STEPS
    tiny = pxtest.load_trainer("tiny")
    want = plain_pytorch(tiny, job.state("initial.pt"))
    pxtest.assert_close(job.state("final.pt"), want, f"arch {arch}")
