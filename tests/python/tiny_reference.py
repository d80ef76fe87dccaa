"""The job the Python job tests run (trainers/tiny.py under `parallax run`) and the plain
single-process PyTorch run it must equal."""
import torch

import pxtest

STEPS, BATCH = 12, 16
DENSE_LR, SPARSE_LR, TAGS_LR, OUT_LR = 0.2, 0.3, 0.5, 0.1
LR_AT = {5: 0.05, 9: 0.4}  # "dense" group's learning rate from these steps on

JOB = """
[job]
name = "tiny-{arch}"
workers = 2
arch = "{arch}"
consistency = "{consistency}"
{staleness}max_restarts = {max_restarts}
[trainer]
command = ["./tiny.py"]
steps = {steps}
batch_size = {batch}
checkpoint_every = {checkpoint_every}
{checkpoint_dir}
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
{extra_variables}
[ps]
shards = 1
{ps}
[user]
out = "@OUT@"
lr_at = {{ {lr_at} }}
{user}
"""


def job_toml(arch, consistency="sync", tags_on_ps=False, checkpoint_every=0, max_restarts=0,
             user="", extra_variables="", ps=""):
    """The tiny job; `user` adds [user] lines, `extra_variables` [[variable]] tables, `ps` [ps]
    lines."""
    return JOB.format(
        arch=arch, consistency=consistency,
        staleness="staleness = 2\n" if consistency == "ssp" else "", max_restarts=max_restarts, steps=STEPS, batch=BATCH,
        checkpoint_every=checkpoint_every,
        checkpoint_dir='checkpoint_dir = "checkpoints"' if checkpoint_every else "",
        dense_lr=DENSE_LR, sparse_lr=SPARSE_LR, tags_lr=TAGS_LR, out_lr=OUT_LR,
        tags_path='path = "ps"' if tags_on_ps else "", extra_variables=extra_variables,
        lr_at=", ".join(f'"{k}" = {v}' for k, v in LR_AT.items()), user=user, ps=ps)


def plain_pytorch(tiny, initial, steps=STEPS):
    """The same model, data, optimizers and learning rates in one process with batch 2B."""
    model = tiny.Tiny()
    model.load_state_dict(initial)
    adagrad = dict(eps=1e-10, initial_accumulator_value=0.0)
    dense = torch.optim.SGD([model.hidden.weight, model.hidden.bias, model.out.bias],
                            lr=DENSE_LR)
    others = [torch.optim.Adagrad([model.words.weight], lr=SPARSE_LR, **adagrad),
              torch.optim.SGD([model.tags.weight], lr=TAGS_LR),
              torch.optim.Adagrad([model.out.weight], lr=OUT_LR, **adagrad)]
    data = tiny.dataset()
    for step, idx in enumerate(pxtest.global_batches(len(data), 2 * BATCH, steps, tiny.SEED)):
        dense.param_groups[0]["lr"] = tiny.learning_rate(LR_AT, step, DENSE_LR)
        loss = model(*data[idx])
        for opt in [dense] + others:
            opt.zero_grad()
        loss.backward()
        for opt in [dense] + others:
            opt.step()
    return model.state_dict()
