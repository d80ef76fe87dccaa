"""The W3 PyTorch peer draws what Parallax draws (bench/peers/w3_torch.py, parallax_draws.py).

- The numpy port of Parallax's hashes, HashRng, alias table and initial values reproduces what
  the C++ prints (px-draws), bit for bit, and SplitMix64's reference outputs.
- A small W3-shaped job (tiny corpus, 2 workers, a few steps) through `parallax run` and through
  w3_torch.py on the same batches file: the first step's loss agrees to 1e-5 (same initial
  values, same negatives, same batch) and every later step's stays within a small tolerance
  (float32 rounding in different orders of summation, nothing else). At the end both evaluate
  the trained model on the held-out split (lm_model.cc's Evaluate, bench/peers/heldout_eval.py):
  the same positions, contexts and full softmax give the same held-out loss to 1e-5.

Environment: PARALLAX_BIN_DIR (the build's bin/, with px-draws, parallax, parallax-data).
"""
import glob
import json
import math
import os
import random
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PEERS = os.path.join(ROOT, "bench", "peers")
sys.path.insert(0, PEERS)
sys.path.insert(0, os.path.join(ROOT, "bench", "e2e"))
import parallax_draws as pd  # noqa: E402
from e2e import eval_loss_from_log, w3_text  # noqa: E402  (examples/w3.toml, substituted)
import job_status  # noqa: E402  (`parallax status JOB --json` of a finished run)

BIN = os.path.abspath(os.environ.get("PARALLAX_BIN_DIR", os.path.join(ROOT, "build", "bin")))
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch (scripts/install-deps --test)

# The model of the end-to-end check: W3's shape, smaller.
VOCAB, DIM, CONTEXT, HIDDEN, NEGATIVES, BATCH, STEPS, WORKERS = 48, 8, 3, 16, 4, 16, 8, 2
EVAL_TOKENS = 300  # of the ~800 held-out tokens: positions spaced unevenly (i * available // n)


def draws(*argv):
    out = subprocess.run([os.path.join(BIN, "px-draws"), *map(str, argv)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return json.loads(out)


def float_bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32).ravel().tolist()


# ---- the port against the C++


def test_splitmix64_reference_outputs():
    # splitmix64.c (Vigna) seeded with 1234567: its first five outputs. mix64(x) is one step of
    # the generator from state x - increment, so output k is mix64(seed + k * increment).
    seed = 1234567
    states = [(seed + k * 0x9E3779B97F4A7C15) % 2**64 for k in range(5)]
    assert pd.mix64(states).tolist() == [6457827717110365317, 3203168211198807973,
                                         9817491932198370423, 4593380528125082431,
                                         16408922859458223821]


def test_mixes_and_hashes_match_the_cpp():
    rnd = random.Random(11)
    xs = [0, 1, 2**63, 2**64 - 1] + [rnd.getrandbits(64) for _ in range(60)]
    got = draws("mix", *xs)
    assert pd.mix64(xs).tolist() == got["mix64"]
    assert pd.finalize64(xs).tolist() == got["finalize64"]
    assert got["mix64"] != got["finalize64"]  # the two Mix64 of the code base differ
    for a, b, c in [(1, 0, 0), (1, 309, 2**40 + 7), (rnd.getrandbits(64), 5, 3)]:
        assert pd.hash2(a, b).tolist() == [draws("hash", a, b)["hash"]]
        assert pd.hash3(a, b, c).tolist() == [draws("hash", a, b, c)["hash"]]


def test_hash_rng_matches_the_cpp():
    for key in (0, 12345, 2**64 - 5):
        assert pd.rng_draws([key], 100)[0].tolist() == draws("rng", "--key", key,
                                                             "--count", 100)["next"]


@pytest.mark.parametrize("kind", ["zipf", "ragged"])
def test_alias_table_samples_what_the_cpp_samples(tmp_path, kind):
    rnd = random.Random(3)
    if kind == "zipf":  # what the lm model builds: counts^0.75, padded with zero rows
        counts = [int(5000 / (i + 1)) for i in range(700)]
        weights = pd.negative_weights(counts, 1000, 0.75)
    else:  # awkward ratios, zeros, one huge weight: the rounding leftovers path
        weights = [rnd.choice([0.0, 1e-9, rnd.random(), 3.0, 1e6]) for _ in range(333)]
    path = tmp_path / "weights"
    path.write_text("\n".join(repr(w) for w in weights) + "\n")
    key = 987654321
    want = draws("alias", "--weights", path, "--key", key, "--count", 20000)["ids"]
    table = pd.AliasTable(weights)
    got = table.sample(pd.rng_draws([key], 20000)[0]).tolist()
    assert got == want
    assert all(weights[i] > 0 for i in got)  # a zero-weight row is never drawn
    columns = (pd.rng_draws([key], 20000)[0] % np.uint64(len(weights))).tolist()
    assert 0 < sum(g != c for g, c in zip(got, columns)) < len(got)  # both branches taken


def test_initial_values_match_the_cpp():
    scale = 0.05
    want = draws("init", "--seed", 3, "--var", 5, "--first", 40, "--rows", 7, "--dim", 130,
                 "--scale", scale)["bits"]
    assert float_bits(pd.initial_rows(3, 5, np.arange(40, 47), 130, scale)) == want
    # A dense variable: rows of 1024 values, the last one cut.
    scale = 1 / math.sqrt(128)
    want = draws("dense", "--seed", 1, "--var", 1, "--size", 2500, "--scale", scale)["bits"]
    values = pd.initial_dense(1, 1, 2500, scale)
    assert float_bits(values) == want
    assert np.abs(values).max() <= np.float32(scale) and len(set(want)) > 2400


# ---- the same job on both sides


def write_corpus(directory):
    """A Brown-format corpus (word/TAG tokens in files ca01..) of Zipf-distributed words."""
    os.makedirs(directory)
    rnd = random.Random(5)
    words = [f"w{i}" for i in range(60)]
    weights = [1 / (i + 1) for i in range(60)]
    for d in range(1, 9):
        tokens = rnd.choices(words, weights, k=400)
        with open(os.path.join(directory, f"ca{d:02d}"), "w") as f:
            f.write(" ".join(t + "/nn" for t in tokens) + "\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("w3")
    corpus, out = str(root / "corpus"), str(root / "brown")  # w3_text's DATA/brown/train.tok
    write_corpus(corpus)
    subprocess.run([os.path.join(BIN, "parallax-data"), "brown", corpus, out, "--vocab",
                    str(VOCAB - 8), "--heldout-every", "4"], check=True, capture_output=True,
                   timeout=60)
    batches = str(root / "batches.bin")
    subprocess.run([os.path.join(BIN, "parallax-data"), "batches", out + "/train.tok",
                    "--context", str(CONTEXT), "--batch", str(BATCH), "--workers",
                    str(WORKERS), "--steps", str(STEPS), "--seed", "1", "--out", batches],
                   check=True, capture_output=True, timeout=60)
    return root, out, batches


def torch_losses(root, data_dir, batches):
    """w3_torch.py's losses [rank][step] and held-out loss, Parallax's draws (its default)."""
    path = str(root / "torch-losses.json")
    proc = subprocess.run(
        [PYTHON, os.path.join(PEERS, "w3_torch.py"), "--batches", batches, "--vocab",
         data_dir + "/vocab.tsv", "--sparse", "--warmup", "0", "--steps", str(STEPS),
         "--vocab-size", str(VOCAB), "--dim", str(DIM), "--hidden", str(HIDDEN),
         "--negatives", str(NEGATIVES), "--timeout", "120", "--losses", path,
         "--eval-tokens", str(EVAL_TOKENS)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(path) as f:
        out = json.load(f)
    return out["losses"], out["eval_loss"]


def parallax_losses(root, data_dir, arch):
    """`parallax run` of the job: its losses [rank][step] from the metric points, and the
    held-out loss rank 0's trainer printed (its task.log under the state directory)."""
    job_dir = root / f"job-{arch}"
    job_dir.mkdir()
    job = job_dir / "job.toml"
    # examples/w3.toml (negative sharing, context mode, optimizers, seed) with smaller sizes.
    sizes = [(rf"(?m)^{key} = \d+.*$", f"{key} = {value}") for key, value in
             (("vocab", VOCAB), ("dim", DIM), ("context", CONTEXT), ("hidden", HIDDEN),
              ("negatives", NEGATIVES))]
    job.write_text(w3_text(WORKERS, arch, STEPS, BATCH, os.path.dirname(data_dir), sizes,
                           eval_tokens=EVAL_TOKENS))
    state = str(job_dir / "state")
    proc = subprocess.run([os.path.join(BIN, "parallax"), "run", "--state-dir", state, str(job)],
                          cwd=str(job_dir), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    # Its metric points as a user reads them: `parallax status 1 --json --points`.
    points = job_status.finished(BIN, state)["points"]
    losses = [[None] * STEPS for _ in range(WORKERS)]
    for p in points:
        losses[p["rank"]][p["step"]] = p["loss"]
    assert all(None not in per_rank for per_rank in losses), points
    evals = []
    for log in glob.glob(os.path.join(state, "**", "task.log"), recursive=True):
        with open(log) as f:
            loss = eval_loss_from_log(f.read())
        if loss is not None:
            evals.append(loss)
    assert len(evals) == 1, f"expected one trainer's eval line under {state}, got {evals}"
    return losses, evals[0]


@pytest.fixture(scope="module")
def torch_side(data):
    return torch_losses(*data)


@pytest.mark.parametrize("arch", ["hybrid", "ps", "allgather"])
def test_parallax_and_the_peer_follow_one_trajectory(data, torch_side, arch):
    root, data_dir, _ = data
    px_losses, px_eval = parallax_losses(root, data_dir, arch)
    pt_losses, pt_eval = torch_side
    px, pt = np.array(px_losses), np.array(pt_losses)
    assert pt.shape == px.shape == (WORKERS, STEPS)
    # Step 0: the same initial values, batch and negatives give the same loss but for rounding.
    assert np.abs(px[:, 0] - pt[:, 0]).max() < 1e-5, (px[:, 0], pt[:, 0])
    # Later steps: the updates (gradients averaged over the ranks, SGD) agree too.
    assert np.abs(px - pt).max() < 5e-5, (px, pt)
    # And the losses move: a trajectory, not a constant.
    assert np.abs(px[:, -1] - px[:, 0]).max() > 1e-3
    # The trained models: the same held-out loss.
    assert abs(px_eval - pt_eval) < 1e-5, (px_eval, pt_eval)
