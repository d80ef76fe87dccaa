#!/usr/bin/python3
"""W3 in PyTorch DDP: the reference Parallax's `lm` model is compared with.

Run with Debian's interpreter (python3-torch 1.13, `scripts/install-deps`):

  /usr/bin/python3 bench/peers/w3_torch.py --batches data/brown/w3-batches.bin \
      --vocab data/brown/vocab.tsv [--sparse | --alternate] [--runs 5]

The model (docs/PERFORMANCE.md, "W3 reference: PyTorch DDP"): input embedding V x d, mean of
the k previous tokens' embeddings, Linear(d, 512) + ReLU, Linear(512, d) -> h, output
embedding V x d. Loss per target = -log s(h . out[target]) - sum over 16 negatives of
log s(-h . out[neg]); the batch mean is the loss. Negatives are drawn per example (16 for each
target, independently, with replacement, from unigram^0.75 of the vocab.tsv counts; a negative
equal to the target is kept, as in the loss's definition). Plain SGD, lr 0.5, on every variable.
Embeddings start uniform(-0.05, 0.05); the Linear layers keep PyTorch's default initialisation
(uniform(+-1/sqrt(fan_in)) for weights and biases).

Data: the `parallax-data batches` file, so every rank reads exactly the (context, target) ids that
Parallax rank r of the same world size reads (docs/DATA.md, "Batches file").

Each run starts `workers` processes (gloo on 127.0.0.1, DistributedDataParallel,
torch.set_num_threads(1)); each runs the warm-up steps, then the timed steps. The driver samples
`ss -tinpH` for the workers' TCP sockets (by pid) just before and after the timed steps: bytes
sent per worker per step are the counters' growth over the timed steps, averaged over workers.

Output: one JSON object per line and statistic (median/min/max over runs), plus one line per run
("stat": "run") for the record.

With --rank R --init tcp://HOST:PORT --sync-dir DIR this process is rank R alone, for a driver
that starts the ranks itself (bench/cluster runs one per host namespace, with GLOO_SOCKET_IFNAME
set to the host's interface) and reads the bytes where they cross; it synchronises with the
driver through files in DIR (FileSync) and writes its time and losses to DIR/done-R.json.
"""

import argparse
import contextlib
import json
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
    def __init__(self, vocab, dim, hidden, sparse):
        super().__init__()
        self.inp = nn.Embedding(vocab, dim, sparse=sparse)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.out = nn.Embedding(vocab, dim, sparse=sparse)
        nn.init.uniform_(self.inp.weight, -0.05, 0.05)
        nn.init.uniform_(self.out.weight, -0.05, 0.05)

    def forward(self, context, targets, negatives):
        x = self.inp(context).mean(dim=1)                                   # B x d
        h = self.fc2(F.relu(self.fc1(x)))                                   # B x d
        pos = (h * self.out(targets)).sum(dim=1)                            # B
        neg = torch.bmm(self.out(negatives), h.unsqueeze(2)).squeeze(2)     # B x n
        return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(dim=1)).mean()


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


class FileSync:
    """A driver in another process (bench/cluster): files in a directory both can see.

    A rank writes ready-R (its pid) after the warm-up and waits for `go`; after the timed steps
    it writes done-R.json (elapsed seconds, losses) and waits for `finish`. The driver reads the
    links' byte counters between.
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


def worker(rank, args, header, init_method, sync):
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank,
                            world_size=args.workers)
    _, ids = read_batches(args.batches)
    counts = read_counts(args.vocab)
    probs = torch.from_numpy(counts ** 0.75)
    probs /= probs.sum()
    torch.manual_seed(args.seed)  # same initial values on every rank (DDP also broadcasts rank 0's)
    model = W3(len(counts), args.dim, args.hidden, args.sparse)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed * 1000003 + rank)
    b, k = header["batch"], header["context"]
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
        negatives = torch.multinomial(probs, b * args.negatives, replacement=True,
                                      generator=gen).view(b, args.negatives)
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
    losses = np.mean([d[3] for d in done], axis=0)  # rank means -> the global batch's mean
    return dict(tokens_per_s=args.workers * header["batch"] * args.steps / elapsed,
                step_ms=1000.0 * elapsed / args.steps,
                loss_last20=float(np.mean(losses[-20:])),
                first_loss=float(losses[0]),
                bytes_sent_per_worker_per_step=per_step["bytes_sent"],
                bytes_acked_per_worker_per_step=per_step["bytes_acked"],
                bytes_received_per_worker_per_step=per_step["bytes_received"])


UNITS = dict(tokens_per_s="tokens/s", step_ms="ms", loss_last20="nats", first_loss="nats",
             bytes_sent_per_worker_per_step="bytes", bytes_acked_per_worker_per_step="bytes",
             bytes_received_per_worker_per_step="bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    ap.add_argument("--seed", type=int, default=1, help="initial values and negatives")
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
            values = [r[metric] for r in results[sparse]]
            for stat, f in (("median", statistics.median), ("min", min), ("max", max)):
                print(json.dumps(dict(bench="e2e", impl=impl, metric=metric, unit=unit, stat=stat,
                                      runs=len(values), value=round(f(values), 4),
                                      workers=args.workers, batch=header["batch"])), flush=True)


if __name__ == "__main__":
    main()
