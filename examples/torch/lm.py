#!/usr/bin/python3
"""The language model of the built-in `lm` (docs/MODELS.md) in plain PyTorch, on Parallax.

Predicts token t of the Brown corpus from the k tokens before it: input embedding (V x d,
sparse) -> concatenation or mean of the k context rows -> Linear + ReLU -> Linear to d (h) ->
negative sampling against an output embedding (V x d) with a per-word bias (V x 1), both sparse.
Rank 0 prints the held-out perplexity (full softmax) next to the unigram model's.

    scripts/fetch-data                                  # data/brown/
    parallax run examples/torch/lm.toml                 # 2 workers, tables on the PS
    PYTHONPATH=build/python python3 examples/torch/lm.py --steps 200    # one process

The lines that make it a Parallax program are marked `# parallax`: without them (and with
torch.optim optimizers) it is a single-process PyTorch program.
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import parallax.torch as px  # parallax

HERE = os.path.dirname(os.path.abspath(__file__))


class LM(nn.Module):
    def __init__(self, vocab, dim, context, hidden, mode="concat", init_scale=0.05):
        super().__init__()
        self.mode = mode
        self.inp = nn.Embedding(vocab, dim, sparse=True)
        self.hidden = nn.Linear(context * dim if mode == "concat" else dim, hidden)
        self.projection = nn.Linear(hidden, dim)
        self.out = nn.Embedding(vocab, dim, sparse=True)
        self.bias = nn.Embedding(vocab, 1, sparse=True)
        nn.init.uniform_(self.inp.weight, -init_scale, init_scale)
        nn.init.uniform_(self.out.weight, -init_scale, init_scale)
        nn.init.zeros_(self.bias.weight)

    def encode(self, context):
        """h (B x d) of the contexts (B x k)."""
        x = self.inp(context)
        x = x.flatten(1) if self.mode == "concat" else x.mean(1)
        return self.projection(F.relu(self.hidden(x)))

    def forward(self, context, targets, negatives):
        """Mean over the batch of -log s(h.o[t] + b[t]) - sum_n log s(-(h.o[n] + b[n]))."""
        h = self.encode(context)
        ids = torch.cat([targets.unsqueeze(1), negatives], 1)  # B x (1 + K)
        scores = torch.bmm(self.out(ids), h.unsqueeze(2)).squeeze(2) + self.bias(ids).squeeze(2)
        return -(F.logsigmoid(scores[:, 0]) + F.logsigmoid(-scores[:, 1:]).sum(1)).mean()


def read_tokens(path):
    """A token file of parallax-data (docs/DATA.md): PXTOK001, uint64 count, uint32 ids."""
    with open(path, "rb") as f:
        if f.read(8) != b"PXTOK001":
            sys.exit(f"lm.py: {path} is not a token file; run scripts/fetch-data")
        count = int(np.frombuffer(f.read(8), dtype="<u8")[0])
        return np.frombuffer(f.read(4 * count), dtype="<u4").astype(np.int64)


class Windows(torch.utils.data.Dataset):
    """Example i: the `context` tokens before token i + context, and that token."""

    def __init__(self, tokens, context):
        self.windows = np.lib.stride_tricks.sliding_window_view(tokens, context + 1)

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, indices):  # a whole batch at once (batch_size=None below)
        w = torch.from_numpy(self.windows[indices])
        return w[:, :-1], w[:, -1]


def negatives_of(step, batch, probs, k, seed):
    """K negatives per example of this rank's share of global batch `step`, drawn for the whole
    global batch from one generator per step: N ranks x B draw what one rank x N*B draws."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    world = px.world_size()  # parallax
    every = torch.multinomial(probs, batch * world * k, replacement=True, generator=g)
    return every.view(batch * world, k)[px.rank()::world]  # parallax


@torch.no_grad()
def perplexity(model, heldout, counts, context, n, power, chunk=4096):
    """Full-softmax perplexity of n held-out positions, and the add-one unigram model's. Negative
    sampling's optimum is s(w|c) = log p(w|c) - log(K q(w)), so the model's distribution is the
    softmax of s + log q (q add-one smoothed so unsampled words keep a probability)."""
    vocab = len(counts)
    available = len(heldout) - context
    n = min(n, available)
    positions = context + np.arange(n) * available // n
    ctx = torch.from_numpy(np.stack([heldout[p - context:p] for p in positions]))
    targets = torch.from_numpy(heldout[positions])
    h = model.module.encode(ctx)  # parallax: model.module is the wrapped LM
    q = (torch.from_numpy(counts).double() + 1) ** power
    log_q = (q / q.sum()).log().float()
    lse = torch.full((n,), -math.inf)
    target_score = torch.zeros(n)
    for first in range(0, vocab, chunk):
        c = min(chunk, vocab - first)
        out = model.read_table("out.weight", first, c)  # parallax: rows from the PS
        bias = model.read_table("bias.weight", first, c)[:, 0]  # parallax
        scores = h @ out.T + bias + log_q[first:first + c]
        lse = torch.logaddexp(lse, torch.logsumexp(scores, 1))
        hit = (targets >= first) & (targets < first + c)
        target_score[hit] = scores[hit, targets[hit] - first]
    ppl = math.exp(-(target_score - lse).double().mean().item())
    unigram = (torch.from_numpy(counts[heldout[positions]]).double() + 1) / (counts.sum() + vocab)
    return ppl, math.exp(-unigram.log().mean().item())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, help="instead of the job's [trainer] steps")
    args = ap.parse_args()
    px.init(job=os.path.join(HERE, "lm.toml"))  # parallax: the job file when run by hand
    job = px.job()  # parallax: [trainer] and [model] of the job file
    m = job["model"]
    steps = args.steps or job["steps"]
    batch, k = job["batch_size"], m.get("context", 4)
    if "threads" in m:
        torch.set_num_threads(m["threads"])
    data_dir = os.path.dirname(m["data"])
    tokens = read_tokens(m["data"])
    heldout = read_tokens(os.path.join(data_dir, "heldout.tok"))
    with open(os.path.join(data_dir, "vocab.tsv"), encoding="utf-8") as f:
        counts = np.array([int(line.split("\t")[1]) for line in f], dtype=np.float64)
    vocab = m.get("vocab", 50_000)
    counts = np.concatenate([counts, np.zeros(vocab - len(counts))])
    power = m.get("negative_power", 0.75)
    probs = torch.from_numpy(counts ** power)
    seed = m.get("seed", 1)

    torch.manual_seed(seed)
    with px.build():  # parallax: the tables take no memory here
        model = LM(vocab, m.get("dim", 128), k, m.get("hidden", 512),
                   m.get("context_mode", "concat"), m.get("init_scale", 0.05))
    data = Windows(tokens, k)
    sampler = px.DistributedSampler(data, batch, seed=seed)  # parallax: this rank's share
    loader = torch.utils.data.DataLoader(data, sampler=sampler, batch_size=None)

    draws = iter(range(1 << 62))  # the plan measures the tables' sparsity on 3 batches:
    model = px.Model(model, sample=loader, forward=lambda lm, b: lm(  # parallax
        *b, negatives_of(next(draws), batch, probs, m.get("negatives", 16), seed)))
    opt = px.Optimizer(model)  # parallax: [optimizer.dense] and [optimizer.sparse]
    steps = min(steps, model.total_steps)  # parallax: a partition-search trial is shorter
    eval_every, eval_tokens = m.get("eval_every", 0), m.get("eval_tokens", 10_000)
    started, last, losses = time.time(), time.time(), []
    while model.steps < steps:
        for context, targets in loader:
            step = model.steps
            negatives = negatives_of(step, batch, probs, m.get("negatives", 16), seed)
            loss = model(context, targets, negatives)
            opt.zero_grad()
            loss.backward()
            opt.step(loss)  # parallax: the loss goes to `parallax status`
            losses.append(loss.item())
            done = model.steps >= steps
            if time.time() - last >= 5 or done:
                print(f"rank {px.rank()} step {model.steps}/{steps} loss "
                      f"{np.mean(losses):.4f} tokens/s "
                      f"{len(losses) * batch / (time.time() - last):.0f}", flush=True)
                last, losses = time.time(), []
            evaluate = done or (eval_every and model.steps % eval_every == 0)
            if evaluate and px.rank() == 0 and not model.in_trial:
                t0 = time.time()
                ppl, unigram = perplexity(model, heldout, counts, k, eval_tokens, power)
                print(f"eval step {model.steps} perplexity {ppl:.1f} unigram_perplexity "
                      f"{unigram:.1f} examples {min(eval_tokens, len(heldout) - k)} "
                      f"({time.time() - t0:.1f} s)", flush=True)
                last += time.time() - t0
            if done:
                break
    print(f"rank {px.rank()} trained {steps} steps in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
