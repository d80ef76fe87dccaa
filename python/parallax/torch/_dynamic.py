"""Dynamic embedding tables: px.DynamicEmbedding and px.DynamicEmbeddingBag.

A dynamic table has no row count: any int64 is an id (taken as its 64 bits, a hash of a raw
feature value). An id becomes a row after ``admit_after`` contributions (a rank's push of one
step), rows untouched for ``ttl_steps`` steps are evicted, and a table at ``max_rows`` evicts the
coldest rows (``eviction``: "lru" or "lfu") to admit new ones. Until an id is a row it reads as
the initializer's values and its gradient is dropped; ``padding_idx`` is never a row and reads
as zeros. The job file's ``[[variable]]`` entry of the table (named by its module, e.g.
``"user_emb"``) overrides these settings and the optimizer, as for built-in models.

Wrapped by ``parallax.torch.Model``:
- in a job (a coordinator, ``parallax run`` or an agent): the table lives on the PS shards, the
  only place a table without a row count can live (the plan refuses another path);
- run by hand (no coordinator): the rows are kept in this process by the same C++ table the
  shards use (``parallax._core.DynamicTable``), with the same admission, eviction and optimizer,
  so the same model file trains alone and distributed.

Outside a Model the module reads rows of an empty table of its own (the initializer's values;
zeros for padding_idx) and does not train: wrap the model to train it.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from parallax import _core
from parallax.torch._context import error

_EVICTIONS = ("lru", "lfu")
_INITS = ("normal", "uniform", "zeros")


class _DynamicBase(nn.Module):
    def __init__(self, embedding_dim, admit_after=1, ttl_steps=0, max_rows=0, eviction="lru",
                 padding_idx=None, init="normal", scale=1.0):
        super().__init__()
        if int(embedding_dim) < 1:
            raise error("INVALID_ARGUMENT", f"a dynamic table needs embedding_dim >= 1, got "
                        f"{embedding_dim}")
        if eviction not in _EVICTIONS:
            raise error("INVALID_ARGUMENT", f"eviction {eviction!r} is not one of {_EVICTIONS}")
        if init not in _INITS:
            raise error("INVALID_ARGUMENT", f"init {init!r} is not one of {_INITS}")
        self.embedding_dim = int(embedding_dim)
        self.admit_after, self.ttl_steps = int(admit_after), int(ttl_steps)
        self.max_rows, self.eviction = int(max_rows), eviction
        self.padding_idx = None if padding_idx is None else int(padding_idx)
        self.init, self.scale = init, float(scale)
        # No rows here: a zero-size placeholder, so that the module has a parameter for
        # optimizers' groups and moves with .to(device) like any module.
        self.weight = nn.Parameter(torch.empty(0, self.embedding_dim))
        self._table = None  # a process-local table outside a Model (read-only)

    def extra_repr(self):
        return (f"{self.embedding_dim}, admit_after={self.admit_after}, "
                f"ttl_steps={self.ttl_steps}, max_rows={self.max_rows}, "
                f"eviction={self.eviction!r}, padding_idx={self.padding_idx}")

    def _rows(self, ids):
        """Rows of the flat int64 ids from a table of this module's own (no Model)."""
        if self._table is None:
            self._table = _core.DynamicTable(
                "dynamic", 0, self.embedding_dim, self.admit_after, self.ttl_steps, self.max_rows,
                self.eviction, [] if self.padding_idx is None else [self.padding_idx], self.init,
                1, self.scale, {"type": "sgd", "lr": 0.01})
        flat = ids.reshape(-1).long().cpu().numpy()
        rows = torch.from_numpy(self._table.read(flat)).view(len(flat), self.embedding_dim)
        return rows.to(ids.device)


class DynamicEmbedding(_DynamicBase):
    """nn.Embedding over raw int64 ids, with no row count (see the module's docstring)."""

    bag = False

    def forward(self, input):
        return self._rows(input).view(tuple(input.shape) + (self.embedding_dim,))


class DynamicEmbeddingBag(_DynamicBase):
    """nn.EmbeddingBag over raw int64 ids, with no row count: mode "sum", "mean" or "max",
    offsets and per_sample_weights as nn.EmbeddingBag takes them."""

    bag = True

    def __init__(self, embedding_dim, mode="mean", include_last_offset=False, **kwargs):
        super().__init__(embedding_dim, **kwargs)
        if mode not in ("sum", "mean", "max"):
            raise error("INVALID_ARGUMENT", f"mode {mode!r} is not sum, mean or max")
        self.mode, self.include_last_offset = mode, include_last_offset

    def forward(self, input, offsets=None, per_sample_weights=None):
        rows = self._rows(input)
        index = torch.arange(rows.shape[0], device=input.device).view(input.shape)
        return F.embedding_bag(index, rows, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights,
                               include_last_offset=self.include_last_offset)


def is_dynamic(module):
    return isinstance(module, _DynamicBase)


def local_table(table, var_id, settings, optimizer, seed):
    """The process-local table of a dynamic module when the job has no coordinator: the module's
    settings with the job file's [[variable]] entry over them, the variable's optimizer."""
    m = table.module
    over = settings or {}

    def pick(key, default):
        value = over.get(key)
        return default if value is None else value

    never = [] if m.padding_idx is None else [m.padding_idx]
    return _core.DynamicTable(table.name, var_id, m.embedding_dim,
                              pick("admit_after", m.admit_after), pick("ttl_steps", m.ttl_steps),
                              pick("max_rows", m.max_rows), pick("eviction", m.eviction), never,
                              m.init, seed, m.scale, optimizer)
