#!/usr/bin/python3
"""A click model over raw 64-bit hashed ids (negative int64 included) with a
px.DynamicEmbeddingBag, trained by parallax.torch. The Python tests run it under `parallax run`
(copied next to a job file) and by hand with no coordinator (main(job_file)), where the table's
rows live in the process.

[user] keys: out (directory for rank-R.json and, from rank 0, final.pt with the dense values and,
when the table is in this process, its ids and rows), max_rows, admit_after, eviction (the
table's settings; the job file's [[variable]] entry may override them), global_batch (each
rank's batch is global_batch / workers).
"""
import json
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 11
EXAMPLES = 2048
FIELDS = 4
PAD = 0  # a "missing value" id: never a row, reads as zeros


def raw_id(value):
    """The 64-bit hash a pipeline would give a raw feature value, as an int64."""
    x = (value * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & (2**64 - 1)
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x ^= x >> 32
    return x - 2**64 if x >= 2**63 else x


class Clicks(nn.Module):
    def __init__(self, px, max_rows=0, admit_after=1, eviction="lru"):
        super().__init__()
        self.emb = px.DynamicEmbeddingBag(8, mode="sum", max_rows=max_rows,
                                          admit_after=admit_after, eviction=eviction,
                                          padding_idx=PAD, init="uniform", scale=0.1)
        self.out = nn.Linear(8, 1)

    def forward(self, ids, y):
        return F.binary_cross_entropy_with_logits(self.out(self.emb(ids)).squeeze(1), y)


def dataset():
    rng = np.random.default_rng(SEED)
    values = np.minimum(rng.zipf(1.3, size=(EXAMPLES, FIELDS)), 5000)
    ids = np.vectorize(raw_id, otypes=[np.int64])(values)
    ids[rng.random(size=ids.shape) < 0.1] = PAD
    y = (values[:, 0] % 2 == 0).astype(np.float32)
    return torch.utils.data.TensorDataset(torch.from_numpy(ids), torch.from_numpy(y))


def main(job_file=None):
    import parallax.torch as px
    px.init(job=job_file)
    job = px.job()
    user = job["user"]
    torch.manual_seed(SEED)  # the dense layer's values, alike on every rank
    model = Clicks(px, user.get("max_rows", 0), user.get("admit_after", 1),
                   user.get("eviction", "lru"))
    data = dataset()
    batch = user.get("global_batch", 64) // px.world_size()
    loader = torch.utils.data.DataLoader(
        data, batch_sampler=px.DistributedSampler(data, batch, shuffle=False))
    model = px.Model(model, sample=loader)
    opt = px.Optimizer(model)
    losses = []
    while model.steps < job["steps"]:
        for ids, y in loader:
            loss = model(ids, y)
            opt.zero_grad()
            loss.backward()
            opt.step(loss)
            losses.append(float(loss))
            if model.steps >= job["steps"]:
                break
    result = dict(rank=px.rank(), steps=model.steps, plan=model.plan, losses=losses)
    final = {"out.weight": model.module.out.weight.detach().clone(),
             "out.bias": model.module.out.bias.detach().clone()}
    if model.plan["emb.weight"] == "local":
        result["stats"] = model.dynamic_stats("emb.weight")
        final["emb.ids"], final["emb.rows"] = model.dynamic_rows("emb.weight")
    out = user["out"]
    with open(os.path.join(out, f"rank-{px.rank()}.json"), "w") as f:
        json.dump(result, f)
    if px.rank() == 0:
        torch.save(final, os.path.join(out, "final.pt"))
    model.close()


if __name__ == "__main__":
    main()
