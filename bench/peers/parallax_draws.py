"""Parallax's randomness in numpy: what the built-in `lm` model draws, bit for bit.

Parallax draws with counter-based integer hashes, never a library RNG, so a value is a pure
function of its coordinates and can be recomputed anywhere (here, for a PyTorch peer that must
start where Parallax starts and sample what it samples):

- initial values (core/ps/initializer.cc, InitializeRow): row `row` of variable `var` is
  `dim` values from finalize64 of (seed, var << 40 ^ row) and the column; uniform values are
  (2u - 1) * scale in float32, u the top 24 bits over 2^24. A dense variable of `size` values
  is rows of min(size, 1024) values (trainer/variables.cc, InitialDenseValues), row-major.
- negatives (trainer/models/lm_model.cc, Draw; trainer/models/sampling.{h,cc}): a HashRng per
  (seed, step, example's index in the global batch: i * world + rank), 16 draws each, through
  Walker's alias table over counts^power (`negative_sharing = "batch"`: one HashRng per
  (seed, step, rank), its draws shared by the rank's batch).

Two mixing functions: core/ps's `Mix64` is SplitMix64's finaliser alone (`finalize64` here);
the models' `Mix64` adds the golden-ratio increment first (`mix64`, the SplitMix64 step).
Everything is uint64 arithmetic modulo 2^64 in numpy, vectorised.
"""

import math

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment
RNG_STRIDE = np.uint64(0x632BE59BD9B4E019)  # HashRng's counter multiplier
DENSE_ROW = 1024  # trainer/variables.cc, DenseRowDim


def _u64(x):
    return np.array(x, dtype=np.uint64, ndmin=1)


def finalize64(x):
    """core/ps/plan.h Mix64: SplitMix64's finaliser of each uint64 in x (an array)."""
    x = _u64(x)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def mix64(x):
    """trainer/models/sampling.h Mix64: the SplitMix64 step (increment, then finalise)."""
    with np.errstate(over="ignore"):
        return finalize64(_u64(x) + GOLDEN)


def hash2(a, b):
    """sampling.h Hash(a, b) = Mix64(a ^ Mix64(b)), elementwise."""
    return mix64(_u64(a) ^ mix64(b))


def hash3(a, b, c):
    """sampling.h Hash(a, b, c) = Hash(Hash(a, b), c)."""
    return hash2(hash2(a, b), c)


def rng_draws(keys, count):
    """HashRng(key).Next() `count` times for each key: an array [len(keys), count]."""
    keys = _u64(keys)
    counters = np.arange(1, count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return mix64(keys[:, None] + RNG_STRIDE * counters[None, :])


def unit_double(x):
    """sampling.h UnitDouble: uniform in [0, 1) from the top 53 bits."""
    return (_u64(x) >> np.uint64(11)).astype(np.float64) * 2.0**-53


class AliasTable:
    """sampling.cc AliasTable: Walker's alias method, built in the C++'s order of operations
    (sequential sum, stacks popped from the back), so every probability and alias is the same
    double and index."""

    def __init__(self, weights):
        w = [float(x) for x in weights]
        n = len(w)
        total = 0.0
        for x in w:  # sequential, as the C++ loop (numpy's and Python's sums are not)
            total += x
        scaled = (np.array(w, dtype=np.float64) * float(n) / total).tolist()
        prob, alias = [0.0] * n, [0] * n
        small = [i for i in range(n) if scaled[i] < 1.0]
        large = [i for i in range(n) if scaled[i] >= 1.0]
        while small and large:
            s, l = small.pop(), large[-1]
            prob[s] = scaled[s]
            alias[s] = l
            scaled[l] -= 1.0 - scaled[s]
            if scaled[l] < 1.0:
                large.pop()
                small.append(l)
        for i in large + small:
            prob[i] = 1.0  # the C++ sets large's, then small's (rounding leftovers), to 1
        self.prob = np.array(prob, dtype=np.float64)
        self.alias = np.array(alias, dtype=np.int64)

    def sample(self, random):
        """AliasTable::Sample of each uint64 in `random`, same shape."""
        random = np.asarray(random, dtype=np.uint64)
        column = (random % np.uint64(len(self.prob))).astype(np.int64)
        coin = unit_double(mix64(random.ravel())).reshape(random.shape)
        return np.where(coin < self.prob[column], column, self.alias[column])


def negative_weights(counts, vocab, power):
    """lm_model.cc SetData: counts (padded with zeros to `vocab` rows) to the power `power`,
    with C's pow per value (numpy's vectorised power may round differently)."""
    if len(counts) > vocab:
        raise ValueError(f"{len(counts)} vocabulary counts for vocab = {vocab}")
    padded = list(counts) + [0] * (vocab - len(counts))
    return [math.pow(float(c), power) for c in padded]


def negatives(table, seed, step, rank, world, batch, count, sharing="example"):
    """The negative ids of rank `rank`'s batch at `step` (lm_model.cc, Draw): [batch, count].
    "example": one HashRng per example, keyed by its index in the global batch (rank-major
    interleaving, i * world + rank); "batch": one per (step, rank), the same `count` ids for
    every example."""
    if sharing == "batch":
        ids = table.sample(rng_draws(hash3(seed, step, rank), count))
        return np.repeat(ids, batch, axis=0)
    examples = np.arange(batch, dtype=np.uint64) * np.uint64(world) + np.uint64(rank)
    return table.sample(rng_draws(hash3(seed, step, examples), count))


def initial_rows(seed, var, rows, dim, scale):
    """InitializeRow (uniform) of each row id in `rows`: float32 [len(rows), dim] in
    [-scale, scale)."""
    rows = _u64(rows)
    base = finalize64(_u64(seed) ^ finalize64((np.uint64(var) << np.uint64(40)) ^ rows))
    column = np.arange(1, dim + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        r = finalize64(base[:, None] + GOLDEN * column[None, :])
    unit = (r >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)
    return (np.float32(2.0) * unit - np.float32(1.0)) * np.float32(scale)


def initial_table(seed, var, rows, dim, scale, chunk=4096):
    """Every row of a sparse variable (InitialSparseRow for ids 0..rows-1): float32 [rows, dim],
    in chunks of rows to bound the uint64 temporaries."""
    out = np.empty((rows, dim), dtype=np.float32)
    for first in range(0, rows, chunk):
        last = min(rows, first + chunk)
        out[first:last] = initial_rows(seed, var, np.arange(first, last), dim, scale)
    return out


def initial_dense(seed, var, size, scale):
    """InitialDenseValues: `size` float32 values, rows of min(size, 1024) (the last cut)."""
    dim = max(1, min(size, DENSE_ROW))
    rows = (size + dim - 1) // dim
    return initial_rows(seed, var, np.arange(rows), dim, scale).ravel()[:size]
