#!/usr/bin/python3
"""W3 in PyTorch on Parallax: bench/peers/w3_torch.py's model, data and loop with parallax.torch
in place of DistributedDataParallel (the `parallax-torch-hybrid` variant of bench/e2e/e2e.py,
which writes the job file and runs it with `parallax run`).

Same as the DDP side: the W3 class (embeddings U(+-0.05), Linear layers PyTorch's default
initialisation from torch.manual_seed(seed)), the batches file's (context, target) ids of this
rank, 16 negatives per target from unigram^0.75 drawn with a torch.Generator seeded
seed * 1000003 + rank, one compute thread, plain SGD lr 0.5 on every variable (the job's
[optimizer.*]), batch-mean loss. Differences: the rows of the next step are prefetched while
this one computes (its negatives are drawn one step ahead, the same sequence of draws; one
prefetch of the output table serves both of the model's lookups of it), and the
figures come from the job's own metric points (metrics_every = 1), as for the other Parallax
variants.

[user] keys: repo (the repository root), batches (parallax-data batches file), vocab
(vocab.tsv), seed.
"""
import os
import sys

import torch

import parallax.torch as px


def main():
    px.init()
    job = px.job()
    user = job["user"]
    sys.path.insert(0, os.path.join(user["repo"], "bench", "peers"))
    import w3_torch  # noqa: E402  (its W3 model and readers)

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    rank, seed = px.rank(), user.get("seed", 1)
    header, ids = w3_torch.read_batches(user["batches"])
    counts = w3_torch.read_counts(user["vocab"])
    probs = torch.from_numpy(counts ** 0.75)
    probs /= probs.sum()
    b, k, negatives = header["batch"], header["context"], 16
    gen = torch.Generator().manual_seed(seed * 1000003 + rank)

    def batch(step):
        row = torch.from_numpy(ids[step, rank].astype("int64"))
        neg = torch.multinomial(probs, b * negatives, replacement=True, generator=gen)
        return row[:b * k].view(b, k), row[b * k:], neg.view(b, negatives)

    torch.manual_seed(seed)
    with px.build():
        model = w3_torch.W3(len(counts), 128, 512, sparse=True)
    sample_gen = torch.Generator().manual_seed(seed)  # sampling draws its own negatives
    samples = [(torch.from_numpy(ids[s, rank].astype("int64"))[:b * k].view(b, k),
                torch.from_numpy(ids[s, rank].astype("int64"))[b * k:],
                torch.multinomial(probs, b * negatives, replacement=True,
                                  generator=sample_gen).view(b, negatives)) for s in range(3)]
    model = px.Model(model, sample=samples)
    opt = px.Optimizer(model)
    steps = min(job["steps"], model.total_steps)
    current = batch(model.steps)
    while model.steps < steps:
        step = model.steps
        following = batch(step + 1) if step + 1 < steps else None
        loss = model(*current)
        if following is not None:  # the next step's rows are pulled while this one computes
            model.module.inp.prefetch(following[0])
            model.module.out.prefetch(torch.cat([following[1], following[2].reshape(-1)]))
        opt.zero_grad()
        loss.backward()
        opt.step(loss, samples=b)
        current = following
    print(f"rank {rank} trained {steps} steps, plan {model.plan}", flush=True)


if __name__ == "__main__":
    main()
