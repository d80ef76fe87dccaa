#!/usr/bin/python3
"""A DLRM-like click-through-rate model (the built-in `ctr`, docs/MODELS.md) in plain PyTorch,
on Parallax: one embedding table per categorical feature (sparse), a bottom MLP over the 13
dense features, the pairwise dot products of [bottom output, 26 embeddings], a top MLP to one
logit, log loss. Rank 0 prints the held-out AUC next to the generator's Bayes AUC.

    scripts/fetch-data --synthetic-ctr                  # data/ctr/{train,heldout}.tsv
    parallax run examples/torch/ctr.toml
    PYTHONPATH=build/python python3 examples/torch/ctr.py --steps 200    # one process

The lines that make it a Parallax program are marked `# parallax`.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import parallax.torch as px  # parallax

HERE = os.path.dirname(os.path.abspath(__file__))


def mlp(widths, relu_last):
    layers = []
    for i in range(len(widths) - 1):
        linear = nn.Linear(widths[i], widths[i + 1])
        nn.init.xavier_uniform_(linear.weight)
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if relu_last or i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, tables, dense_features, dim, bottom, top, init_scale=0.05):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(rows, dim, sparse=True) for rows in tables)
        for t in self.tables:
            nn.init.uniform_(t.weight, -init_scale, init_scale)
        self.bottom = mlp([dense_features] + bottom + [dim], relu_last=True)
        n = len(tables) + 1
        self.pairs = torch.triu_indices(n, n, offset=1)
        self.top = mlp([dim + n * (n - 1) // 2] + top + [1], relu_last=False)

    def forward(self, dense, categorical, labels):
        x = self.bottom(dense)                                            # B x d
        vectors = torch.stack([x] + [t(categorical[:, f]) for f, t in enumerate(self.tables)],
                              1)                                          # B x 27 x d
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        logit = self.top(torch.cat([x, dots], 1)).squeeze(1)
        return F.binary_cross_entropy_with_logits(logit, labels), logit


def read_criteo(path, table_sizes):
    """(labels, dense log(1 + x) with 0 for missing, categorical rows = hex value mod table size
    with 0 for missing), as core/data's CriteoReader reads them; cached next to the file."""
    cache = path + ".npz"
    if os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(path):
        z = np.load(cache)
        return z["labels"], z["dense"], z["categorical"]
    labels, dense, categorical = [], [], []
    sizes = np.array(table_sizes, dtype=np.uint64)
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            labels.append(float(fields[0]))
            dense.append([np.log1p(max(int(v), 0)) if v else 0.0 for v in fields[1:14]])
            categorical.append([int(v, 16) if v else 0 for v in fields[14:40]])
    categorical = np.array(categorical, dtype=np.uint64) % sizes
    out = (np.array(labels, np.float32), np.array(dense, np.float32),
           categorical.astype(np.int64))
    tmp = f"{cache}.{os.getpid()}.npz"  # several ranks may write it at once
    np.savez(tmp, labels=out[0], dense=out[1], categorical=out[2])
    os.replace(tmp, cache)
    return out


class Examples(torch.utils.data.Dataset):
    def __init__(self, labels, dense, categorical):
        self.labels, self.dense = torch.from_numpy(labels), torch.from_numpy(dense)
        self.categorical = torch.from_numpy(categorical)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, indices):  # a whole batch at once (batch_size=None below)
        return self.dense[indices], self.categorical[indices], self.labels[indices]


def auc(scores, labels):
    """Area under the ROC curve (ties count one half)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    ordered = np.sort(scores)
    for value in np.unique(ordered[1:][np.diff(ordered) == 0]):
        tie = scores == value
        ranks[tie] = ranks[tie].mean()
    positives = labels > 0.5
    n_pos, n_neg = positives.sum(), (~positives).sum()
    return (ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, heldout, n, chunk=8192):
    scores = []
    for first in range(0, n, chunk):
        dense, categorical, labels = heldout[list(range(first, min(first + chunk, n)))]
        scores.append(model.module(dense, categorical, labels)[1])  # parallax: the inner model
    return auc(torch.cat(scores).numpy(), heldout.labels[:n].numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, help="instead of the job's [trainer] steps")
    args = ap.parse_args()
    px.init(job=os.path.join(HERE, "ctr.toml"))  # parallax: the job file when run by hand
    job = px.job()  # parallax
    m = job["model"]
    batch = job["batch_size"]
    if "threads" in m:
        torch.set_num_threads(m["threads"])
    data_dir = os.path.dirname(m["data"])
    if not os.path.exists(m["data"]):
        sys.exit(f"ctr.py: {m['data']} is missing; run scripts/fetch-data --synthetic-ctr")
    tables = m["tables"]
    train = Examples(*read_criteo(m["data"], tables))
    heldout = Examples(*read_criteo(os.path.join(data_dir, "heldout.tsv"), tables))
    torch.manual_seed(m.get("seed", 1))
    with px.build():  # parallax
        model = DLRM(tables, 13, m.get("dim", 16), m.get("bottom", [64]), m.get("top", [64]),
                     m.get("init_scale", 0.05))
    sampler = px.DistributedSampler(train, batch, seed=m.get("seed", 1))  # parallax
    loader = torch.utils.data.DataLoader(train, sampler=sampler, batch_size=None)
    model = px.Model(model, sample=loader)  # parallax
    opt = px.Optimizer(model)  # parallax
    steps = min(args.steps or job["steps"], model.total_steps)  # parallax
    eval_every, eval_n = m.get("eval_every", 0), min(m.get("eval_examples", 100_000),
                                                     len(heldout))
    bayes = None
    generator = os.path.join(data_dir, "generator.json")
    if os.path.exists(generator):
        with open(generator) as f:
            bayes = json.load(f).get("bayes_auc")
    last, losses = time.time(), []
    while model.steps < steps:
        for batch_data in loader:
            loss, _ = model(*batch_data)
            opt.zero_grad()
            loss.backward()
            opt.step(loss)  # parallax
            losses.append(loss.item())
            done = model.steps >= steps
            if time.time() - last >= 5 or done:
                print(f"rank {px.rank()} step {model.steps}/{steps} loss {np.mean(losses):.4f} "
                      f"samples/s {len(losses) * batch / (time.time() - last):.0f}", flush=True)
                last, losses = time.time(), []
            if (done or (eval_every and model.steps % eval_every == 0)) and px.rank() == 0 \
                    and not model.in_trial:
                t0 = time.time()
                value = evaluate(model, heldout, eval_n)
                print(f"eval step {model.steps} auc {value:.4f}" +
                      (f" bayes_auc {bayes:.4f}" if bayes else "") +
                      f" examples {eval_n} ({time.time() - t0:.1f} s)", flush=True)
                last += time.time() - t0
            if done:
                break


if __name__ == "__main__":
    main()
