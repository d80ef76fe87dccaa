"""One rank's Session for a torch model: registration, the start, gradients from autograd
hooks, the step and the values going back into the parameters."""

import functools
import math

import numpy as np
import torch

from parallax import _core
from parallax.torch import _context, _dynamic, _lookup, _sampling, _tables
from parallax.torch._context import error
from parallax.torch._variables import Dense, Table, collect


class Runtime:
    """What parallax.torch.Model and Optimizer share. Thread-compatible, like the Session: the
    training thread drives it, and autograd's hooks run in that thread (CPU) or while it waits
    in backward() (CUDA)."""

    def __init__(self, ctx, module, sample, sample_batches, sample_forward, seed):
        self.ctx = ctx
        self.where = ctx.where()
        self.module = module
        self.capturing = False
        self.started = False
        self.variables = collect(module, self.where)
        self.dense = [v for v in self.variables if isinstance(v, Dense)]
        self.tables = [v for v in self.variables if isinstance(v, Table)]
        self.param_ids = {id(p) for p in module.parameters()}
        self.grads_this_step = 0
        self.given = set()  # dense variables whose gradient arrived this step
        self.last_samples = None
        self.broken = None
        self.deferred = None  # the first error of a gradient hook this step
        self.session = self._call(lambda: _core.Session(ctx.options), "creating the session")
        self._register(seed)
        self.param_ids = {id(p) for p in module.parameters()}  # tables' weights were replaced
        for name, save, restore in ctx.states:
            self._call(lambda: self.session.register_state(name, save, restore),
                       f"registering state '{name}'")
        for t in self.tables:
            _lookup.install(self, t)
        if self.tables:
            if sample is None:
                raise error("INVALID_ARGUMENT", f"{self.where}: the model has sparse tables (" +
                            ", ".join(repr(t.name) for t in self.tables) + ") but no sample= "
                            "batches: pass the data loader (or any re-iterable of batches), so "
                            "the plan measures which rows a batch touches")
            if sample_batches is None:
                # As the built-in models: with [ps] hot_rows a hot row's expected share of the
                # steps to come is its share of the other sampled batches, which 3 measure only
                # in halves.
                sample_batches = 16 if ctx.options.job["hot_rows"] != 0 else 3
            _sampling.sample(self, sample, sample_batches, sample_forward)
        self._call(self.session.start, "starting the job")
        self.started = True
        self.paths = {v.name: "local" if isinstance(v, Table) and v.local is not None
                      else self.session.path_of(v.var) for v in self.variables}
        self._pull_dense()
        for v in self.dense:
            v.param.register_hook(functools.partial(self.on_dense_grad, v))

    # ---- registration -------------------------------------------------------------------

    def _register(self, seed):
        """Every variable to the Session. A table built inside build() starts from Parallax's
        initializer; one built outside it, and every dense parameter, from the module's own
        values (rank 0's win: broadcast to the other ranks, written to the PS shards by rank 0),
        after which a table's weight is replaced by one on the meta device (its values live in
        Parallax)."""
        settings = _context.job_settings(self.ctx)
        overrides = {o["name"]: o for o in settings["variables"]}
        for index, v in enumerate(self.variables):
            if isinstance(v, Table) and v.dynamic:
                self._register_dynamic(v, index, overrides.get(v.name), settings, seed)
                continue
            if isinstance(v, Table):
                init = _tables.table_init(v.module.weight)
                values = None
                if init is None:
                    values = v.module.weight.detach().reshape(-1).cpu().numpy()
                    init = _tables.TableInit("zeros", 0.0)
                v.var = self._call(
                    lambda: self.session.register_sparse(v.name, v.rows, v.dim, init.kind, seed,
                                                         init.scale, values),
                    f"registering '{v.name}'")
                if values is not None:
                    v.module.weight = torch.nn.Parameter(
                        torch.empty((v.rows, v.dim), device="meta"))
            else:
                values = v.param.detach().reshape(-1).cpu().numpy()
                v.var = self._call(
                    lambda: self.session.register_dense(v.name, v.param.numel(), values),
                    f"registering '{v.name}'")

    def _register_dynamic(self, v, index, override, settings, seed):
        """A dynamic table: on the PS shards in a job; kept in this process (the C++ table the
        shards use) when there is no coordinator, with the job file's settings for it and its
        optimizer, its rows saved with every checkpoint as this rank's state."""
        m = v.module
        if self.ctx.options.coordinator:
            v.var = self._call(
                lambda: self.session.register_dynamic(
                    v.name, v.dim, m.admit_after, m.ttl_steps, m.max_rows, m.eviction, m.init,
                    seed, m.scale, [] if m.padding_idx is None else [m.padding_idx]),
                f"registering dynamic table '{v.name}'")
            return
        optimizer = (override or {}).get("optimizer") or settings["sparse_optimizer"]
        v.local = self._call(lambda: _dynamic.local_table(v, index, override, optimizer, seed),
                             f"creating dynamic table '{v.name}'")
        table = v.local
        self._call(lambda: self.session.register_state(
            f"dynamic-table:{v.name}", table.serialize, table.restore),
            f"registering the rows of '{v.name}' with checkpoints")

    # ---- errors --------------------------------------------------------------------------

    def _call(self, fn, what):
        try:
            return fn()
        except _core.Error as e:
            raise self.context_error(e, what) from None

    def context_error(self, e, what):
        """`e` (a parallax.Error) with this rank and what it was doing in front."""
        if not isinstance(e, _core.Error):
            return e
        code = getattr(e, "code", "INTERNAL")
        message = getattr(e, "message", str(e))
        return error(code, f"{self.where}: {what}: {message}")

    def check_usable(self, what):
        if self.broken is not None:
            raise error("FAILED_PRECONDITION", f"{self.where}: {what}: the job failed earlier "
                        f"({self.broken}); start a new attempt")
        if not self.started:
            raise error("FAILED_PRECONDITION", f"{self.where}: {what} before parallax.torch."
                        "Model() started the job")

    # ---- gradients (autograd hooks) -----------------------------------------------------------
    # A hook never raises: an exception inside backward() leaves autograd nodes in a thread-local
    # queue of torch's engine, and releasing them at exit needs the interpreter (the process
    # hangs instead of exiting). The first error of a step is kept and raised by step().

    def on_dense_grad(self, v, grad):
        try:
            if v.var in self.given:
                raise error("FAILED_PRECONDITION",
                            f"{self.where}: the gradient of '{v.name}' arrived twice in step "
                            f"{self.session.steps}: backward() ran twice before step(); call "
                            "optimizer.step() after each backward() (gradient accumulation is "
                            "not supported)")
            self.given.add(v.var)
            self.grads_this_step += 1
            flat = grad.detach().reshape(-1)
            if flat.is_cuda:
                # All-reduced in device memory by the Session (NCCL), by address: torch's
                # kernels that wrote it must be done first.
                flat = flat.contiguous()
                torch.cuda.current_stream(flat.device).synchronize()
                self._gradient(lambda: self.session.gradient_device(
                    v.var, flat.data_ptr(), flat.numel()), v.name)
                return
            self._gradient(lambda: self.session.gradient(v.var, flat.numpy()), v.name)
        except Exception as e:  # noqa: BLE001 (kept for step(), see above)
            self.deferred = self.deferred or e

    def on_table_grad(self, table, ids, pad, grad):
        try:
            ids, rows = _lookup.gradient_rows(ids, pad, grad)
            self.grads_this_step += 1
            if table.local is not None:
                table.pending.append((ids, np.array(rows, dtype=np.float32).reshape(-1)))
                return
            self._gradient(lambda: self.session.sparse_gradient(table.var, ids, rows), table.name)
        except Exception as e:  # noqa: BLE001 (kept for step(), see above)
            self.deferred = self.deferred or e

    def _gradient(self, call, name):
        if self.deferred is not None:
            return  # the step failed already
        try:
            call()
        except _core.Error as e:
            raise self.context_error(e, f"gradient of '{name}'") from None

    def raise_deferred(self):
        if self.deferred is not None:
            e, self.deferred = self.deferred, None
            self.grads_this_step = 0
            self.given.clear()
            raise e

    # ---- the step ------------------------------------------------------------------------

    def before_forward(self, args, kwargs):
        self.check_usable("forward")
        self.raise_deferred()
        for p in self.module.parameters():
            if id(p) not in self.param_ids:
                name = next(n for n, q in self.module.named_parameters() if q is p)
                raise error("FAILED_PRECONDITION",
                            f"{self.where}: parameter '{name}' was added to the model after "
                            "parallax.torch.Model() started the job; create every parameter "
                            "before wrapping the model")
        first = next((a for a in list(args) + list(kwargs.values())
                      if isinstance(a, torch.Tensor) and a.dim() > 0), None)
        self.last_samples = int(first.shape[0]) if first is not None else None

    def step(self, groups, loss, samples):
        self.check_usable("step()")
        self.raise_deferred()
        if self.grads_this_step == 0:
            raise error("FAILED_PRECONDITION",
                        f"{self.where}: step() without backward(): no gradient reached Parallax "
                        f"in step {self.session.steps}; call loss.backward() before "
                        "optimizer.step()")
        self._apply_learning_rates(groups)
        step = self.session.steps
        for t in self.tables:
            if t.local is not None:
                self._checked(lambda: self._apply_local(t, step), f"step {step} of '{t.name}'")
        if loss is not None:
            value = float(loss.detach() if isinstance(loss, torch.Tensor) else loss)
            count = samples if samples is not None else (self.last_samples or 0)
            self._checked(lambda: self.session.report_metrics(step, value, count),
                          "reporting the loss")
        self._checked(self.session.step, f"step {step}")
        self.grads_this_step = 0
        self.given.clear()
        self._pull_dense()

    @staticmethod
    def _apply_local(table, step):
        """A process-local dynamic table's step: its rows of this step, one contribution."""
        table.local.advance_to(step)
        if table.pending:
            ids = np.concatenate([i for i, _ in table.pending])
            rows = np.concatenate([r for _, r in table.pending])
            table.pending = []
            table.local.push(ids, rows, table.lr_scale)

    def _checked(self, fn, what):
        """Runs a Session call whose failure ends the job on this rank."""
        try:
            return fn()
        except _core.Error as e:
            err = self.context_error(e, what)
            self.broken = getattr(err, "message", str(err))
            raise err from None

    def _apply_learning_rates(self, groups):
        for g in groups:
            lr = g["lr"]
            if lr == g.get("_parallax_lr"):
                continue
            if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
                raise error("INVALID_ARGUMENT", f"{self.where}: learning rate {lr!r} of the "
                            f"'{g['name']}' parameter group must be a finite number > 0")
            for var in g["vars"]:
                if var is None:
                    continue  # a process-local dynamic table: below
                self._checked(lambda: self.session.set_learning_rate(var, float(lr)),
                              f"setting the learning rate of group '{g['name']}' to {lr}")
            for t in g.get("local", []):
                t.lr_scale = float(lr) / g["optimizer"]["lr"]
            g["_parallax_lr"] = lr

    def _pull_dense(self):
        """The Session's dense values into the parameters (after the optimizer ran)."""
        with torch.no_grad():
            for v in self.dense:
                p = v.param
                # A CPU parameter's memory as a numpy array, made once and again only when
                # the parameter's storage moved (the user may reassign p.data).
                if v.host_view is not None and v.host_view[0] == p.data_ptr():
                    self.session.dense_into(v.var, v.host_view[1])
                elif p.device.type == "cpu" and p.is_contiguous():
                    v.host_view = (p.data_ptr(), p.data.view(-1).numpy())
                    self.session.dense_into(v.var, v.host_view[1])
                else:
                    host = np.empty(p.numel(), dtype=np.float32)
                    self.session.dense_into(v.var, host)
                    p.data.copy_(torch.from_numpy(host).view(p.shape))

    # ---- reading -------------------------------------------------------------------------

    def read_table(self, table, first=0, count=None, chunk=1 << 16):
        """Rows [first, first + count) of `table` as a (count, dim) tensor."""
        self.check_usable(f"reading '{table.name}'")
        if table.dynamic:
            raise error("FAILED_PRECONDITION", f"'{table.name}' is a dynamic table: it has no "
                        "rows 0..N-1 to read; use model.dynamic_rows(name) when it trains in "
                        "this process, or `parallax export` for a job")
        count = table.rows - first if count is None else count
        out = torch.empty((count, table.dim), dtype=torch.float32)
        for at in range(0, count, chunk):
            n = min(chunk, count - at)
            flat = self._call(lambda: self.session.read_sparse(table.var, first + at, n),
                              f"reading '{table.name}'")
            out[at:at + n] = torch.from_numpy(flat).view(n, table.dim)
        if table.padding_idx is not None and first <= table.padding_idx < first + count:
            out[table.padding_idx - first] = 0.0
        return out

    def close(self):
        """Destroys the Session (stops its threads, writes its timeline)."""
        self.session = None
        self.broken = "the model was closed"
