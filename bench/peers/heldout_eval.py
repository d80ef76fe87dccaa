"""The held-out evaluation of Parallax's `lm` model (trainer/models/lm_model.cc, Evaluate), for
the W3 PyTorch peer: the same tokens, positions, contexts and full-softmax loss, so both sides'
trained models are compared on one yardstick (the training-batch loss of a few steps is not one:
it is noisy, and W3 at lr 0.5 is chaotic).

- Tokens: the held-out split, a Parallax token file ("PXTOK001", uint64 count, uint32 ids;
  core/data/token_file.h), by default heldout.tok next to the training data.
- Positions: n = min(len - k, eval_tokens) of them spread evenly, p_i = k + i * (len - k) // n;
  the context of p is tokens[p - k .. p - 1], the target tokens[p].
- Score: the model's hidden state h of the context (mean of the k input rows, the MLP) against
  every output row: s(w) = h . out[w] + bias[w] + log q(w), q the add-one smoothed negative
  distribution (count + 1)^power over the vocabulary (rows past vocab.tsv count 0). Negative
  sampling's optimum is s = log p(w|c) - log(K q(w)), so softmax(s + log q) is the model's
  distribution (K cancels).
- Loss: the mean over positions of -log softmax(s)[target], in nats; Parallax prints its
  exponential, `eval step S perplexity P` (the trainer's log, rank 0).

Memory: blocks of 1024 positions against chunks of 4096 output rows, a running log-sum-exp in
float64 (as Parallax's FullSoftmax), so no n x V matrix is ever made.
"""

import math
import sys

import numpy as np
import torch

TOKEN_MAGIC = b"PXTOK001"
BLOCK, CHUNK = 1024, 4096  # lm_model.cc's kBlock and kChunk


def read_token_file(path):
    """The ids of a Parallax token file, uint32."""
    with open(path, "rb") as f:
        head = f.read(16)
        if len(head) != 16 or head[:8] != TOKEN_MAGIC:
            sys.exit(f"heldout_eval: '{path}' is not a Parallax token file (no "
                     f"{TOKEN_MAGIC.decode()} header); write it with scripts/fetch-data")
        count = int(np.frombuffer(head[8:16], dtype="<u8")[0])
        ids = np.fromfile(f, dtype="<u4")
    if ids.size != count:
        sys.exit(f"heldout_eval: '{path}' holds {ids.size} ids, its header says {count}; "
                 "recreate it with scripts/fetch-data --force")
    return ids


def positions(length, context, eval_tokens):
    """lm_model.cc's evaluation positions: min(length - k, eval_tokens) spread evenly."""
    available = length - context
    if available <= 0:
        sys.exit(f"heldout_eval: the held-out split has {length} tokens; it needs more than "
                 f"context = {context}")
    n = min(available, eval_tokens)
    return np.array([context + i * available // n for i in range(n)], dtype=np.int64)


def log_noise(counts, vocab, power):
    """log q(w) as float32, q(w) = (count + 1)^power / sum, in float64 as Parallax computes it."""
    padded = np.zeros(vocab, dtype=np.float64)
    padded[: len(counts)] = counts
    weights = np.array([math.pow(c + 1.0, power) for c in padded])
    total = 0.0
    for w in weights:  # sequential, as the C++ loop
        total += w
    return torch.from_numpy(np.log(weights / total).astype(np.float32))


@torch.no_grad()
def heldout_loss(model, tokens, counts, power, context, eval_tokens):
    """Mean held-out negative log-likelihood (nats) of `model` (bench/peers/w3_torch.py's W3)
    and the number of positions evaluated."""
    vocab = model.out.weight.shape[0]
    if len(tokens) and int(tokens.max()) >= vocab:
        sys.exit(f"heldout_eval: held-out token id {int(tokens.max())} is not below vocab = "
                 f"{vocab}; pass the job's [model] vocab (--vocab-size)")
    at = positions(len(tokens), context, eval_tokens)
    ids = torch.from_numpy(tokens.astype(np.int64))
    offsets = torch.arange(-context, 0, dtype=torch.int64)
    bias = model.bias.weight.squeeze(1) if model.bias is not None else torch.zeros(vocab)
    bias = bias + log_noise(counts, vocab, power)  # float32, as lm_model.cc adds them
    out = model.out.weight
    total = 0.0
    for first in range(0, len(at), BLOCK):
        p = torch.from_numpy(at[first:first + BLOCK])
        targets = ids[p]
        x = model.inp(ids[p[:, None] + offsets[None, :]]).mean(dim=1)
        h = model.fc2(torch.relu(model.fc1(x)))
        lse = torch.full((len(p),), -math.inf, dtype=torch.float64)
        target_logit = torch.zeros(len(p), dtype=torch.float64)
        for c0 in range(0, vocab, CHUNK):
            logits = (h @ out[c0:c0 + CHUNK].T + bias[c0:c0 + CHUNK]).double()
            lse = torch.logaddexp(lse, torch.logsumexp(logits, dim=1))
            inside = (targets >= c0) & (targets < c0 + CHUNK)
            rows = inside.nonzero().squeeze(1)
            target_logit[rows] = logits[rows, targets[rows] - c0]
        total += float((lse - target_logit).sum())
    return total / len(at), len(at)
