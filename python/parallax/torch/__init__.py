"""parallax.torch: a PyTorch model trains on Parallax with a few added lines.

    import parallax.torch as px

    px.init(job="lm.toml")              # the agent's task environment; one process without it
    with px.build():                    # sparse tables get no memory here
        model = LM(...)                 # nn.Embedding(..., sparse=True) = a sparse variable
    loader = DataLoader(data, batch_sampler=px.DistributedSampler(data, batch_size))
    model = px.Model(model, sample=loader)   # plan from the first batches, start the job
    opt = px.Optimizer(model)           # the job's [optimizer.dense] / [optimizer.sparse]
    while model.steps < px.job()["steps"]:
        for batch in loader:
            loss = model(*batch)
            opt.zero_grad()
            loss.backward()             # gradients go to Parallax as backward makes them
            opt.step(loss)              # exchange + optimizer; the loss goes to `parallax status`

Every embedding table with sparse=True is a sparse variable, every other parameter a dense one;
the plan puts each on all-reduce, all-gather or the PS shards (docs/PYTHON.md).
"""

import atexit
import pickle
import random as _random
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn

from parallax._core import Error
from parallax.torch import _context, _lookup, _runtime, _tables
from parallax.torch._context import error
from parallax.torch._dynamic import DynamicEmbedding, DynamicEmbeddingBag
from parallax.torch._sampler import DistributedSampler

__all__ = ["Error", "init", "build", "Model", "Optimizer", "DistributedSampler",
           "DynamicEmbedding", "DynamicEmbeddingBag", 
           "register_state", "random_state", "rank", "world_size", "local_rank", "job",
           "exported_state_dict"]


def init(job=None):
    """Reads this rank's task environment (set by the agent: rank, world size, coordinator, job
    file). Without it the process is one rank with no coordinator, and `job`, a job file, gives
    the settings (optimizers, steps, batch size...) the agent's job file would. Call once, first.
    """
    _context.init(job)
    atexit.register(_close)


def build():
    """A context in which the model is built: every nn.Embedding / nn.EmbeddingBag with
    sparse=True gets no memory (its weight is on the meta device; its values live in Parallax)
    and the model's initialisation of it is recorded (N(0, 1) by default, nn.init.uniform_,
    normal_, zeros_). A table built outside it starts from its own values instead (rank 0's,
    copied to the other ranks or written to the PS shards), at the cost of holding the whole
    table on every rank until parallax.torch.Model() wraps the model."""
    return _tables.build()


def rank():
    return _context.current("parallax.torch.rank()").rank


def world_size():
    return _context.current("parallax.torch.world_size()").world_size


def local_rank():
    return _context.current("parallax.torch.local_rank()").options.local_rank


def job():
    """The job's settings: steps, batch_size, workers, arch, consistency, dense_optimizer,
    sparse_optimizer, checkpoint_every, ..., and the [model] and [user] tables as dicts."""
    return _context.job_settings(_context.current("parallax.torch.job()"))


def register_state(name, save, restore):
    """Per-rank state kept with every checkpoint: save() -> bytes is called at each checkpoint,
    restore(bytes) when the job resumes, before parallax.torch.Model() returns. Register before
    building the Model."""
    ctx = _context.current("parallax.torch.register_state()")
    if ctx.model is not None:
        raise error("FAILED_PRECONDITION", f"{ctx.where()}: state '{name}' registered after "
                    "parallax.torch.Model() started the job; register it before")
    ctx.states.append((name, save, restore))


def random_state():
    """(save, restore) for register_state: the random states of torch, numpy and random."""
    def save():
        return pickle.dumps((torch.get_rng_state(), np.random.get_state(), _random.getstate()))

    def restore(data):
        t, n, p = pickle.loads(data)
        torch.set_rng_state(t)
        np.random.set_state(n)
        _random.setstate(p)

    return save, restore


class Model(nn.Module):
    """Wraps a model built inside build(): registers its parameters as variables, measures the
    tables' sparsity on `sample_batches` batches of `sample` (default 3; 16 in a job with
    [ps] hot_rows, whose choice needs more; see parallax/torch/_sampling.py),
    starts the job (plan, rendezvous, PS connection, resume from the newest checkpoint) and
    routes the tables' lookups and every gradient to Parallax.

    sample: a re-iterable of batches (the DataLoader); forward(module, batch) feeds one batch to
    the model (default: module(*batch) for a tuple or list, module(**batch) for a dict).
    seed: of the tables' initializer, a pure function of (seed, variable, row).
    bucket_bytes: the size of the dense gradients' fusion buckets (default: the Session's, 64
    MiB, the fastest measured for W3); smaller buckets start the all-reduce of the last layers'
    gradients while backward still computes the first layers', at a collective call each.
    """

    def __init__(self, module, sample=None, sample_batches=None, forward=None, seed=1,
                 bucket_bytes=None):
        super().__init__()
        ctx = _context.current("parallax.torch.Model()")
        if ctx.model is not None:
            raise error("FAILED_PRECONDITION", f"{ctx.where()}: a second parallax.torch.Model(); "
                        "a process trains one model")
        self.module = module
        if bucket_bytes is not None:
            ctx.options.fusion_bucket_bytes = int(bucket_bytes)
        self._rt = _runtime.Runtime(ctx, module, sample, sample_batches, forward, seed)
        ctx.model = self

    def forward(self, *args, **kwargs):
        self._rt.before_forward(args, kwargs)
        return self.module(*args, **kwargs)

    @property
    def steps(self):
        """Steps finished (a resumed job starts at its checkpoint's step)."""
        return self._rt.session.steps

    @property
    def total_steps(self):
        """The steps this attempt trains to: the job's [trainer] steps, or in a trial attempt of
        the partition search ([ps] partitions = "auto") its shorter budget. Loop to it."""
        o = self._rt.session.options
        steps = _context.job_settings(self._rt.ctx)["steps"]
        return min(steps, o.trial_warmup_steps + o.trial_steps) if o.trial_steps else steps

    @property
    def in_trial(self):
        """Whether this attempt is a timed trial of the partition search (skip evaluations)."""
        return self._rt.session.options.trial_steps > 0

    @property
    def resumed_from(self):
        """The checkpoint step this job resumed from, or None."""
        return self._rt.session.resumed_from

    @property
    def plan(self):
        """{parameter name: "allreduce" | "allgather" | "ps"} as the plan decided."""
        return dict(self._rt.paths)

    def prefetch(self, next_ids):
        """Starts pulling the next step's rows of several tables at once: `next_ids` maps each
        table (its module, or its weight's name, e.g. "emb.weight") to the next step's ids. On
        the PS their pulls go to each shard as one message ([ps] batch); the next forward of
        each table with those ids uses them, as with module.prefetch(next_ids)."""
        tables, ids = [], []
        for key, value in next_ids.items():
            found = [t for t in self._rt.tables if t.module is key or t.name == key]
            if not found:
                raise error("NOT_FOUND", f"prefetch: {key!r} is not a sparse table; the tables "
                            "are: " + ", ".join(t.name for t in self._rt.tables))
            tables.append(found[0])
            ids.append(value)
        _lookup.prefetch_many(self._rt, tables, ids)

    def read_table(self, name, first=0, count=None):
        """Rows [first, first + count) of sparse table `name` (its weight's name, e.g.
        "emb.weight") as a tensor, read in chunks (pulled from the PS shards when there)."""
        for t in self._rt.tables:
            if t.name == name:
                return self._rt.read_table(t, first, count)
        raise error("NOT_FOUND", f"no sparse table '{name}'; the tables are: " +
                    ", ".join(t.name for t in self._rt.tables))

    def state_dict(self, *args, **kwargs):
        """The wrapped model's state_dict (its own keys, no "module." prefix) as plain CPU
        tensors, the sparse tables read back from Parallax: load it into the plain model."""
        out = OrderedDict()
        tables = {t.name: t for t in self._rt.tables if not t.dynamic}
        for key, value in self.module.state_dict().items():
            if key in tables:
                out[key] = self._rt.read_table(tables[key])
            else:
                out[key] = value.detach().cpu().clone()
        return out

    def dynamic_rows(self, name):
        """(ids, rows) of dynamic table `name` (its placeholder weight's name, e.g.
        "user_emb.weight") trained in this process (no coordinator): the ids its rows hold,
        sorted, as an int64 tensor and their rows as a (n, dim) tensor. A job's dynamic tables
        live on the PS shards: `parallax export` writes them (<name>.ids.npy, <name>.npy)."""
        for t in self._rt.tables:
            if t.name == name and t.dynamic:
                if t.local is None:
                    raise error("FAILED_PRECONDITION", f"dynamic table '{name}' lives on the PS "
                                "shards of the job: `parallax export JOB --out DIR` writes its "
                                "ids and rows")
                ids, rows = t.local.rows()
                return torch.from_numpy(ids), torch.from_numpy(rows)
        raise error("NOT_FOUND", f"no dynamic table '{name}'; the dynamic tables are: " +
                    ", ".join(t.name for t in self._rt.tables if t.dynamic))

    def dynamic_stats(self, name):
        """Counters of a process-local dynamic table: rows, admitted, not_admitted_reads,
        dropped_gradients, evicted_ttl, evicted_budget, bytes (a job's are in `parallax
        status`)."""
        for t in self._rt.tables:
            if t.name == name and t.local is not None:
                return t.local.stats()
        raise error("NOT_FOUND", f"no dynamic table '{name}' in this process")

    def load_state_dict(self, *args, **kwargs):
        raise error("FAILED_PRECONDITION", "a parallax.torch.Model resumes from its job's "
                    "checkpoints ([trainer] checkpoint_every), not from load_state_dict; load "
                    "values into the plain model before wrapping it")

    def close(self):
        """Ends this rank's part of the job (also done at exit)."""
        self._rt.close()


class Optimizer(torch.optim.Optimizer):
    """The job's optimizers ([optimizer.dense] for dense variables, [optimizer.sparse] for the
    tables, a [[variable]] optimizer for its variable), applied by Parallax whichever path the
    plan gave a variable: by the rank for all-reduce and all-gather variables, by the PS shards
    for theirs. One parameter group per optimizer; setting a group's "lr" (by hand or with a
    torch.optim.lr_scheduler) reaches the shards at the next step(). Every rank must set the
    same learning rates at the same step."""

    def __init__(self, model):
        if not isinstance(model, Model):
            raise error("INVALID_ARGUMENT", "parallax.torch.Optimizer takes the "
                        "parallax.torch.Model, not the model it wraps")
        self._rt = model._rt
        settings = _context.job_settings(self._rt.ctx)
        overrides = {o["name"]: o["optimizer"] for o in settings["variables"] if o["optimizer"]}
        groups = OrderedDict()
        for v in self._rt.variables:
            sparse = isinstance(v, _runtime.Table)
            if v.name in overrides:
                key, config = f"variable:{v.name}", overrides[v.name]
            else:
                key = "sparse" if sparse else "dense"
                config = settings["sparse_optimizer" if sparse else "dense_optimizer"]
            group = groups.setdefault(key, {"params": [], "vars": [], "name": key,
                                            "lr": config["lr"], "optimizer": dict(config),
                                            "_parallax_lr": config["lr"]})
            group["params"].append(v.module.weight if sparse else v.param)
            group["vars"].append(v.var)
            if sparse and v.local is not None:
                group.setdefault("local", []).append(v)
        super().__init__(list(groups.values()), {})

    @torch.no_grad()
    def step(self, loss=None, samples=None):
        """Finishes the step: every rank's gradients averaged and applied by the variables'
        optimizers, the new values in the parameters. `loss` (this rank's batch loss) and
        `samples` (default: the first dimension of the model's first tensor input) go to the
        job's metrics (`parallax status`, `parallax run`'s progress line); a NaN or infinite
        loss stops the job, as for a built-in model."""
        self._rt.step(self.param_groups, loss, samples)


def exported_state_dict(directory, module):
    """What `parallax export JOB --out DIRECTORY` wrote (docs/EXPORT.md) as a state_dict for
    `module`, the plain model: every variable's array reshaped to its parameter's shape (dense
    variables are exported flat), the padding_idx row of a table zeroed. Buffers are not
    exported: load it with module.load_state_dict(state, strict=False)."""
    import json
    import os
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    params = dict(module.named_parameters())
    out = OrderedDict()
    for v in manifest["variables"]:
        if v.get("kind") == "dynamic":
            continue  # ids and rows, no parameter to fill: np.load its ids_file and file
        if v["name"] not in params:
            raise error("NOT_FOUND", f"exported variable '{v['name']}' is not a parameter of "
                        "the model given; export the job that trained this model")
        array = np.load(os.path.join(directory, v["file"]))
        out[v["name"]] = torch.from_numpy(array).reshape(params[v["name"]].shape)
    for name, m in module.named_modules():
        key = f"{name}.weight" if name else "weight"
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.padding_idx is not None \
                and key in out:
            out[key][m.padding_idx] = 0.0
    return out


def _close():
    ctx = _context._current
    if ctx is not None and ctx.model is not None:
        ctx.model.close()
