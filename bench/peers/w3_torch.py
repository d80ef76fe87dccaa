#!/usr/bin/python3
"""W3 in PyTorch DDP: the reference Parallax's `lm` model is compared with.

Run with Debian's interpreter (python3-torch 1.13, `scripts/install-deps --test`):

  /usr/bin/python3 bench/peers/w3_torch.py --batches data/brown/w3-batches.bin \
      --vocab data/brown/vocab.tsv [--sparse | --alternate] [--runs 5]

The model (docs/PERFORMANCE.md, "W3 reference: PyTorch DDP"), examples/w3.toml's: input
embedding V x d (V = --vocab-size, 50,000; rows past vocab.tsv's words are never used), mean of
the k previous tokens' embeddings, Linear(d, 512) + ReLU, Linear(512, d) -> h, output embedding
V x d and output bias V x 1. Score s(w) = h . out[w] + bias[w]; loss per target =
-log sigma(s(target)) - sum over 16 negatives of log sigma(-s(neg)); the batch mean is the loss
(DDP averages the ranks' gradients, as Parallax's sync mean does). Plain SGD, lr 0.5, on every
variable.

Draws (default): exactly Parallax's (bench/peers/parallax_draws.py), so both systems follow the
same trajectory up to floating-point rounding: every initial value is the `lm` model's, from
Parallax's counter-based hashes for --seed ([model] seed): embeddings uniform(+-0.05)
(InitializeRow per variable id and row), Linear weights and biases uniform(+-1/sqrt(fan_in)) laid
out as Parallax's row-major (in x out) matrices (transposed into PyTorch's (out, in)), output
bias 0; negatives per example from Parallax's HashRng keyed by (seed, step, the example's index
in the global batch) through its alias table over unigram^--negative-power of the vocab.tsv
counts (with replacement; a negative equal to the target is kept, as in the loss's definition;
--negative-sharing batch: one set per rank and step). With --torch-draws: torch's RNG instead
(embeddings uniform(-0.05, 0.05) from torch.manual_seed(--seed), Linear layers PyTorch's default
initialisation, output bias 0, negatives torch.multinomial): the same model and maths on another
trajectory.

Data: the `parallax-data batches` file, so every rank reads exactly the (context, target) ids that
Parallax rank r of the same world size reads (docs/DATA.md, "Batches file").

Each run starts `workers` processes (gloo on 127.0.0.1, DistributedDataParallel,
torch.set_num_threads(1)); each runs the warm-up steps, then the timed steps. The driver samples
`ss -tinpH` for the workers' TCP sockets (by pid) just before and after the timed steps: bytes
sent per worker per step are the counters' growth over the timed steps, averaged over workers.

Output: one JSON object per line and statistic (median/min/max over runs), plus one line per run
("stat": "run") for the record; --losses FILE keeps the last run's loss of every rank and step.

Held-out loss (--eval-tokens N): after the timed steps, rank 0 evaluates the trained model as
Parallax's `lm` model does at the end of a job (bench/peers/heldout_eval.py: the same held-out
positions, contexts and full-softmax loss with the output bias), off the clock: `eval_loss`, the
mean negative log-likelihood in nats, the log of the perplexity Parallax prints.

With --rank R --init tcp://HOST:PORT --sync-dir DIR this process is rank R alone, for a driver
that starts the ranks itself (bench/cluster runs one per host namespace, with GLOO_SOCKET_IFNAME
set to the host's interface) and reads the bytes where they cross; it synchronises with the
driver through files in DIR (FileSync) and writes its time and losses to DIR/done-R.json.
"""

import argparse
import contextlib
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import time

# One compute thread per worker: torch.set_num_threads covers PyTorch's own pool, not the BLAS
# library python3-torch links (libblas.so.3, OpenBLAS with install-deps), which reads this
# when it loads. Spawned workers inherit it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heldout_eval  # noqa: E402
import parallax_draws  # noqa: E402

HEADER_BYTES = 32
MAGIC = b"PXBAT001"


def read_batches(path):
    """Returns (header dict, uint32 array [steps, workers, batch * (context + 1)])."""
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
        if len(head) != HEADER_BYTES or head[:8] != MAGIC:
            sys.exit(f"w3_torch: '{path}' is not a batches file (no {MAGIC.decode()} header); "
                     "write it with: parallax-data batches data/brown/train.tok --out FILE")
        workers, steps, batch, context = np.frombuffer(head[8:24], dtype="<u4").tolist()
        seed = int(np.frombuffer(head[24:32], dtype="<u8")[0])
        ids = np.fromfile(f, dtype="<u4")
    per = batch * (context + 1)
    if ids.size != steps * workers * per:
        sys.exit(f"w3_torch: '{path}' is truncated: {ids.size} ids, expected "
                 f"{steps * workers * per}; rewrite it with parallax-data batches")
    header = dict(workers=workers, steps=steps, batch=batch, context=context, seed=seed)
    return header, ids.reshape(steps, workers, per)


def read_counts(path):
    counts = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2:
                sys.exit(f"w3_torch: {path}:{n}: expected 'word<TAB>count'")
            counts.append(int(parts[1]))
    return np.array(counts, dtype=np.float64)


class W3(nn.Module):
    """Built with torch's RNG (embeddings uniform(-0.05, 0.05), PyTorch's default Linear init);
    parallax_init() then sets Parallax's values. `bias`: the output bias of Parallax's `lm` (the
    peer has it; bench/e2e's PyTorch front-end runs use the model without)."""

    def __init__(self, vocab, dim, hidden, sparse, bias=False):
        super().__init__()
        self.inp = nn.Embedding(vocab, dim, sparse=sparse)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.out = nn.Embedding(vocab, dim, sparse=sparse)
        nn.init.uniform_(self.inp.weight, -0.05, 0.05)
        nn.init.uniform_(self.out.weight, -0.05, 0.05)
        self.bias = nn.Embedding(vocab, 1, sparse=sparse) if bias else None
        if bias:
            nn.init.zeros_(self.bias.weight)

    @torch.no_grad()
    def parallax_init(self, seed, init_scale):
        """The `lm` model's initial values (trainer/models/lm_model.cc): its variables in
        registration order are ids 0..6 (input embedding, hidden weights and bias, projection
        weights and bias, output embedding, output bias); its weights are row-major in x out."""
        pd = parallax_draws
        vocab, dim = self.inp.weight.shape
        hidden = self.fc1.weight.shape[0]
        in1, in2 = 1 / math.sqrt(dim), 1 / math.sqrt(hidden)
        values = [(self.inp.weight, pd.initial_table(seed, 0, vocab, dim, init_scale)),
                  (self.fc1.weight, pd.initial_dense(seed, 1, dim * hidden, in1)
                   .reshape(dim, hidden).T),
                  (self.fc1.bias, pd.initial_dense(seed, 2, hidden, in1)),
                  (self.fc2.weight, pd.initial_dense(seed, 3, hidden * dim, in2)
                   .reshape(hidden, dim).T),
                  (self.fc2.bias, pd.initial_dense(seed, 4, dim, in2)),
                  (self.out.weight, pd.initial_table(seed, 5, vocab, dim, init_scale))]
        for param, value in values:
            param.copy_(torch.from_numpy(np.ascontiguousarray(value)))
        if self.bias is not None:
            self.bias.weight.zero_()  # Initializer kZeros

    def forward(self, context, targets, negatives):
        x = self.inp(context).mean(dim=1)                                   # B x d
        h = self.fc2(F.relu(self.fc1(x)))                                   # B x d
        pos = (h * self.out(targets)).sum(dim=1)                            # B
        neg = torch.bmm(self.out(negatives), h.unsqueeze(2)).squeeze(2)     # B x n
        if self.bias is not None:
            pos = pos + self.bias(targets).squeeze(1)
            neg = neg + self.bias(negatives).squeeze(2)
        return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(dim=1)).mean()


class Negatives:
    """The negatives of each (step, rank): Parallax's (default) or torch.multinomial's."""

    def __init__(self, args, counts, rank, batch):
        self.args, self.rank, self.batch = args, rank, batch
        weights = parallax_draws.negative_weights(counts, args.vocab_size, args.negative_power)
        if args.torch_draws:
            self.probs = torch.tensor(weights, dtype=torch.float64)
            self.probs /= self.probs.sum()
            self.gen = torch.Generator().manual_seed(args.seed * 1000003 + rank)
        else:
            self.table = parallax_draws.AliasTable(weights)

    def draw(self, step):
        a, b = self.args, self.batch
        if a.torch_draws:
            if a.negative_sharing == "batch":
                ids = torch.multinomial(self.probs, a.negatives, replacement=True,
                                        generator=self.gen)
                return ids.expand(b, a.negatives)
            return torch.multinomial(self.probs, b * a.negatives, replacement=True,
                                     generator=self.gen).view(b, a.negatives)
        ids = parallax_draws.negatives(self.table, a.seed, step, self.rank, a.workers, b,
                                       a.negatives, a.negative_sharing)
        return torch.from_numpy(ids)


class QueueSync:
    """The driver of one_run: queues and events between spawned workers and this process."""

    def __init__(self, to_driver, go, finish):
        self.to_driver, self.go, self.finish = to_driver, go, finish

    def ready(self, rank):
        self.to_driver.put(("ready", rank, os.getpid()))
        self.go.wait()

    def done(self, rank, elapsed, losses):
        self.to_driver.put(("done", rank, elapsed, losses))
        self.finish.wait()

    def evaluated(self, rank, result):
        self.to_driver.put(("eval", rank, result))


class FileSync:
    """A driver in another process (bench/cluster): files in a directory both can see.

    A rank writes ready-R (its pid) after the warm-up and waits for `go`; after the timed steps
    it writes done-R.json (elapsed seconds, losses) and waits for `finish`. The driver reads the
    links' byte counters between. With --eval-tokens, rank 0 then writes eval-0.json.
    """

    def __init__(self, directory, timeout):
        self.dir, self.timeout = directory, timeout

    def _wait(self, name):
        deadline = time.monotonic() + self.timeout
        path = os.path.join(self.dir, name)
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                sys.exit(f"w3_torch: no {path} from the driver in {self.timeout:.0f} s")
            time.sleep(0.005)

    def _write(self, name, text):
        tmp = os.path.join(self.dir, f".{name}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.rename(tmp, os.path.join(self.dir, name))

    def ready(self, rank):
        self._write(f"ready-{rank}", str(os.getpid()))
        self._wait("go")

    def done(self, rank, elapsed, losses):
        self._write(f"done-{rank}.json", json.dumps(dict(elapsed=elapsed, losses=losses)))
        self._wait("finish")

    def evaluated(self, rank, result):
        self._write(f"eval-{rank}.json", json.dumps(result))


def worker(rank, args, header, init_method, sync):
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank,
                            world_size=args.workers)
    _, ids = read_batches(args.batches)
    counts = read_counts(args.vocab)
    if len(counts) > args.vocab_size:
        sys.exit(f"w3_torch: {args.vocab} has {len(counts)} words, more than --vocab-size "
                 f"{args.vocab_size}; pass the job's [model] vocab")
    torch.manual_seed(args.seed)  # same initial values on every rank
    model = W3(args.vocab_size, args.dim, args.hidden, args.sparse, bias=True)
    if not args.torch_draws:
        model.parallax_init(args.seed, args.init_scale)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    b, k = header["batch"], header["context"]
    negatives_of = Negatives(args, counts, rank, b)
    total = args.warmup + args.steps
    losses = []
    t0 = 0.0
    for step in range(total):
        if step == args.warmup:
            dist.barrier()
            sync.ready(rank)
            dist.barrier()
            t0 = time.perf_counter()
        row = torch.from_numpy(ids[step, rank].astype(np.int64))
        context = row[: b * k].view(b, k)
        targets = row[b * k:]
        negatives = negatives_of.draw(step)
        # --no-sync: DDP's gradient all-reduce is skipped (each rank trains alone): the
        # compute-only step time of the same processes on the same cores.
        with ddp.no_sync() if args.no_sync else contextlib.nullcontext():
            loss = ddp(context, targets, negatives)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        losses.append(loss.item())
    if args.no_sync:
        dist.barrier()  # the slowest rank's compute, as with communication
    elapsed = time.perf_counter() - t0
    sync.done(rank, elapsed, losses)
    if args.eval_tokens > 0 and rank == 0:  # after the driver's window: off the clock
        t1 = time.perf_counter()
        loss, n = heldout_eval.heldout_loss(
            model, heldout_eval.read_token_file(args.heldout), counts, args.negative_power,
            k, args.eval_tokens)
        sync.evaluated(rank, dict(eval_loss=loss, eval_examples=n,
                                  eval_s=time.perf_counter() - t1))
    dist.destroy_process_group()


SOCKET_LINE = re.compile(r"pid=(\d+)")
COUNTER = re.compile(r"\b(bytes_sent|bytes_acked|bytes_received):(\d+)")


def socket_bytes(pids):
    """Sums bytes_sent/acked/received of the TCP sockets of each pid, from `ss -tinpH`."""
    out = subprocess.run(["ss", "-tinpH"], check=True, capture_output=True, text=True).stdout
    totals = {pid: dict(bytes_sent=0, bytes_acked=0, bytes_received=0) for pid in pids}
    owner = None
    for line in out.splitlines():
        if line and not line[0].isspace():  # a socket; its counters follow on indented lines
            owners = [int(p) for p in SOCKET_LINE.findall(line)]
            owner = next((p for p in owners if p in totals), None)
        elif owner is not None:
            for name, value in COUNTER.findall(line):
                totals[owner][name] += int(value)
    return totals


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def receive(queue, procs, timeout):
    """The next worker message; exits with a message when a worker died or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return queue.get(timeout=1.0)
        except Exception:  # queue.Empty: check the workers are still alive
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                sys.exit(f"w3_torch: worker pid {dead[0].pid} exited with {dead[0].exitcode}; "
                         "its traceback is above")
    sys.exit(f"w3_torch: no word from the workers in {timeout:.0f} s (--timeout)")


def one_run(args, header):
    ctx = mp.get_context("spawn")
    to_driver, go, finish = ctx.Queue(), ctx.Event(), ctx.Event()
    port = free_port()
    sync = QueueSync(to_driver, go, finish)
    procs = [ctx.Process(target=worker,
                         args=(r, args, header, f"tcp://127.0.0.1:{port}", sync))
             for r in range(args.workers)]
    for p in procs:
        p.start()
    try:
        pids = [receive(to_driver, procs, args.timeout)[2] for _ in procs]
        before = socket_bytes(pids)
        go.set()
        done = [receive(to_driver, procs, args.timeout) for _ in procs]
        after = socket_bytes(pids)
        finish.set()
        evaluated = receive(to_driver, procs, args.timeout)[2] if args.eval_tokens > 0 else {}
        for p in procs:
            p.join(timeout=args.timeout)
            if p.exitcode != 0:
                sys.exit(f"w3_torch: worker pid {p.pid} exited with {p.exitcode}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    elapsed = max(d[2] for d in done)
    per_step = {name: statistics.mean((after[p][name] - before[p][name]) / args.steps
                                      for p in pids)
                for name in ("bytes_sent", "bytes_acked", "bytes_received")}
    if args.losses:
        by_rank = sorted((d[1], d[3]) for d in done)
        with open(args.losses, "w", encoding="utf-8") as f:
            json.dump(dict(losses=[l for _, l in by_rank], **evaluated), f)
    losses = np.mean([d[3] for d in done], axis=0)  # rank means -> the global batch's mean
    return dict(tokens_per_s=args.workers * header["batch"] * args.steps / elapsed,
                step_ms=1000.0 * elapsed / args.steps,
                loss_last20=float(np.mean(losses[-20:])),
                first_loss=float(losses[0]),
                bytes_sent_per_worker_per_step=per_step["bytes_sent"],
                bytes_acked_per_worker_per_step=per_step["bytes_acked"],
                bytes_received_per_worker_per_step=per_step["bytes_received"],
                **{k: v for k, v in evaluated.items() if k == "eval_loss"})


UNITS = dict(tokens_per_s="tokens/s", step_ms="ms", loss_last20="nats", first_loss="nats",
             bytes_sent_per_worker_per_step="bytes", bytes_acked_per_worker_per_step="bytes",
             bytes_received_per_worker_per_step="bytes", eval_loss="nats")


def main():
    paragraphs = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(  # the first paragraph and what the peer draws
        description="\n\n".join([paragraphs[0]] + [p for p in paragraphs if p.startswith("Draws")]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", required=True, help="parallax-data batches file")
    ap.add_argument("--vocab", required=True, help="vocab.tsv (negative-sampling counts)")
    ap.add_argument("--sparse", action="store_true", help="nn.Embedding(sparse=True)")
    ap.add_argument("--alternate", action="store_true",
                    help="run dense and sparse alternately, --runs each")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=300, help="timed steps, after the warm-up")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--negatives", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--vocab-size", type=int, default=50000,
                    help="rows of the embeddings ([model] vocab); the alias table's size")
    ap.add_argument("--negative-power", type=float, default=0.75,
                    help="negatives from unigram^P ([model] negative_power)")
    ap.add_argument("--negative-sharing", choices=("example", "batch"), default="example",
                    help="16 negatives per example, or one set per rank and step "
                    "([model] negative_sharing)")
    ap.add_argument("--init-scale", type=float, default=0.05,
                    help="embeddings uniform(+-S) ([model] init_scale)")
    ap.add_argument("--seed", type=int, default=1,
                    help="initial values and negatives ([model] seed: Parallax's draws)")
    ap.add_argument("--torch-draws", action="store_true",
                    help="initial values and negatives from torch's RNG (uniform(+-0.05) "
                    "embeddings, PyTorch's default Linear init, torch.multinomial) instead of "
                    "exactly Parallax's: the same model on another trajectory")
    ap.add_argument("--losses", help="write the last run's losses, [rank][step], as JSON here "
                    "(and its eval_loss, with --eval-tokens)")
    ap.add_argument("--eval-tokens", type=int, default=0,
                    help="after training, rank 0's held-out loss over N positions, as Parallax's "
                    "lm model evaluates ([model] eval_tokens); 0: none")
    ap.add_argument("--heldout", help="the held-out token file (default: heldout.tok next to "
                    "--vocab, as [model] heldout_path defaults next to the data)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per phase of a run")
    ap.add_argument("--no-sync", action="store_true",
                    help="skip DDP's gradient all-reduce (compute-only step time)")
    one = ap.add_argument_group(
        "one rank of a run whose driver is another process (bench/cluster: a rank per host)")
    one.add_argument("--rank", type=int, help="run only this rank, in this process")
    one.add_argument("--init", help="torch.distributed init method, e.g. tcp://10.77.1.10:29500")
    one.add_argument("--sync-dir", help="directory of the ready/go/done/finish files")
    args = ap.parse_args()

    header, _ = read_batches(args.batches)
    args.workers = header["workers"]
    args.heldout = args.heldout or os.path.join(os.path.dirname(os.path.abspath(args.vocab)),
                                                "heldout.tok")
    if args.eval_tokens > 0 and not os.path.exists(args.heldout):
        sys.exit(f"w3_torch: no held-out split '{args.heldout}' for --eval-tokens; pass "
                 "--heldout FILE or run scripts/fetch-data")
    if header["steps"] < args.warmup + args.steps:
        sys.exit(f"w3_torch: the batches file holds {header['steps']} steps, fewer than "
                 f"--warmup + --steps = {args.warmup + args.steps}; rewrite it with "
                 "parallax-data batches --steps N")
    if args.rank is not None:
        if not args.init or not args.sync_dir or not 0 <= args.rank < args.workers:
            sys.exit(f"w3_torch: --rank needs --init and --sync-dir, and 0 <= rank < "
                     f"{args.workers} (the batches file's workers)")
        worker(args.rank, args, header, args.init, FileSync(args.sync_dir, args.timeout))
        return
    variants = [False, True] if args.alternate else [args.sparse]
    results = {v: [] for v in variants}
    common = dict(bench="e2e", workers=args.workers, batch=header["batch"],
                  context=header["context"], steps=args.steps, warmup=args.warmup)
    for run in range(args.runs):
        for sparse in variants:
            args.sparse = sparse
            r = one_run(args, header)
            results[sparse].append(r)
            impl = "torch-ddp-sparse" if sparse else "torch-ddp-dense"
            print(json.dumps(dict(common, impl=impl, stat="run", run=run, load1=os.getloadavg()[0],
                                  **{k: round(v, 4) for k, v in r.items()})), flush=True)
    for sparse in variants:
        impl = "torch-ddp-sparse" if sparse else "torch-ddp-dense"
        for metric, unit in UNITS.items():
            values = [r[metric] for r in results[sparse] if metric in r]
            if not values:
                continue
            for stat, f in (("median", statistics.median), ("min", min), ("max", max)):
                print(json.dumps(dict(bench="e2e", impl=impl, metric=metric, unit=unit, stat=stat,
                                      runs=len(values), value=round(f(values), 4),
                                      workers=args.workers, batch=header["batch"])), flush=True)


if __name__ == "__main__":
    main()
