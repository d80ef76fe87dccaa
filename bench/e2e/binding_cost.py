#!/usr/bin/python3
"""The binding's own cost: W3's PyTorch loop in one process, plain PyTorch against
parallax.torch with one rank and no coordinator, side by side.

    PYTHONPATH=build/python bench/e2e/binding_cost.py --batches data/brown/w3-batches-1.bin
        --vocab data/brown/vocab.tsv [--runs 5] [--steps 200] [--warmup 20]

(the batches file is the one bench/e2e/run.sh writes; the build tree's python/ directory
holds the parallax package).

Both run bench/peers/w3_torch.py's W3 model (sparse embeddings) on rank 0's batches of the
batches file, 16 negatives per target, SGD lr 0.5, one compute thread, in a process of their
own, alternating (plain, parallax, plain, ...). Plain: torch.optim.SGD. Parallax: the same model
built in parallax.torch.build() and wrapped by Model (tables kept in the rank's replica, the
dense layers "all-reduced" over one rank: no communication) with the job's SGD. The difference
of the per-step times is what parallax.torch and the Session add to a step: lookups and
gradients through the Session, hooks, copying values back, the Session's optimizer instead of
torch's.

Output: a JSON line per run and impl ("stat": "run"), then the medians, and the difference of
the medians ("impl": "parallax-minus-plain").
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e import TORCH_JOB  # noqa: E402  (the e2e variant's job: SGD lr 0.5 everywhere)


def one_run(impl, args):
    """Runs `steps` steps in this process; returns the mean ms per timed step."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import torch
    sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
    import w3_torch
    torch.set_num_threads(1)
    header, ids = w3_torch.read_batches(args.batches)
    counts = w3_torch.read_counts(args.vocab)
    probs = torch.from_numpy(counts ** 0.75)
    probs /= probs.sum()
    b, k, negatives = header["batch"], header["context"], 16
    gen = torch.Generator().manual_seed(1)
    total = args.warmup + args.steps
    batches = []
    for step in range(total):
        row = torch.from_numpy(ids[step % header["steps"], 0].astype("int64"))
        neg = torch.multinomial(probs, b * negatives, replacement=True, generator=gen)
        batches.append((row[:b * k].view(b, k), row[b * k:], neg.view(b, negatives)))
    torch.manual_seed(1)
    if impl == "plain":
        model = w3_torch.W3(len(counts), 128, 512, sparse=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        step_fn = opt.step
    else:
        import parallax.torch as px
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            # Run by hand, one rank: the job's workers, shards and [user] play no part.
            f.write(TORCH_JOB.format(arch="hybrid", steps=total, root=ROOT,
                                     batches=args.batches, vocab=args.vocab))
        px.init(job=f.name)
        with px.build():
            model = w3_torch.W3(len(counts), 128, 512, sparse=True)
        model = px.Model(model, sample=batches[:3])
        opt = px.Optimizer(model)

        def step_fn():
            opt.step(loss)
    for step, batch in enumerate(batches):
        if step == args.warmup:
            started = time.perf_counter()
        loss = model(*batch)
        opt.zero_grad()
        loss.backward()
        step_fn()
    return 1000.0 * (time.perf_counter() - started) / args.steps, loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", required=True, help="parallax-data batches file")
    ap.add_argument("--vocab", required=True, help="vocab.tsv")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200, help="timed steps")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--impl", choices=["plain", "parallax"], help="one run in this process")
    args = ap.parse_args()
    if args.impl:
        ms, loss = one_run(args.impl, args)
        print(json.dumps({"step_ms": ms, "loss": loss}))
        return
    results = {"plain": [], "parallax": []}
    common = dict(bench="binding_cost", steps=args.steps, warmup=args.warmup, batch=256)
    for run in range(args.runs):
        for impl in results:
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, __file__, "--impl", impl, "--batches",
                                   args.batches, "--vocab", args.vocab, "--steps",
                                   str(args.steps), "--warmup", str(args.warmup)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                sys.exit(f"binding_cost: {impl} failed:\n{proc.stderr[-3000:]}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            results[impl].append(r["step_ms"])
            print(json.dumps(dict(common, impl=impl, stat="run", run=run, load1=round(load, 2),
                                  step_ms=round(r["step_ms"], 4), loss=round(r["loss"], 4))),
                  flush=True)
    medians = {impl: statistics.median(v) for impl, v in results.items()}
    for impl, values in results.items():
        print(json.dumps(dict(common, impl=impl, metric="step_ms", unit="ms", stat="median",
                              runs=len(values), value=round(medians[impl], 4),
                              min=round(min(values), 4), max=round(max(values), 4))), flush=True)
    diffs = [p - q for p, q in zip(results["parallax"], results["plain"])]
    print(json.dumps(dict(common, impl="parallax-minus-plain", metric="step_ms", unit="ms",
                          stat="median", runs=len(diffs),
                          value=round(medians["parallax"] - medians["plain"], 4),
                          paired_median=round(statistics.median(diffs), 4))), flush=True)


if __name__ == "__main__":
    main()
