"""Sparse embedding tables built without storage, and how they were initialised.

Inside ``parallax.torch.build()`` every ``nn.Embedding`` / ``nn.EmbeddingBag`` created with
``sparse=True`` gets its weight on the ``meta`` device: no memory, whatever its size. Its values
will live in Parallax (on the PS shards, or in the rank's replica when the plan keeps the table on
workers) and start from Parallax's initializer, a pure function of (seed, variable, row) that
workers and shards compute alike. Which initializer: what the model's own code asked for, seen
while it ran inside build(): ``nn.Embedding``'s default N(0, 1), ``nn.init.uniform_(w, -a, a)``,
``nn.init.normal_(w, 0, s)``, ``nn.init.zeros_``, and the initialisers built on them
(``xavier_uniform_``, ``kaiming_uniform_``...), also through ``weight.data``. Anything else
(an asymmetric range, a mean, ``copy_`` of pretrained values) raises at once, naming the table.

How a table is recognised through ``weight.data``: each meta weight is a view at its own storage
offset (1, 2, ...) of a meta buffer, and ``.data`` keeps the offset.
"""

import contextlib
import inspect
import math

import torch
import torch.nn as nn

from parallax.torch._context import error


class TableInit:
    """A table's initializer: kind "normal" (mean 0, stddev scale), "uniform" ([-scale, scale))
    or "zeros"."""

    def __init__(self, kind="normal", scale=1.0):
        self.kind, self.scale = kind, float(scale)

    def __repr__(self):
        return f"TableInit({self.kind!r}, {self.scale})"


# Storage offset of a meta table weight -> its TableInit. Entries are made inside build().
_tables = {}
_next_offset = [1]


def table_init(weight):
    """The recorded initializer of a table built inside build(); None for any other tensor."""
    if weight.device.type != "meta":
        return None
    return _tables.get(weight.storage_offset())


def _meta_weight(rows, dim):
    offset = _next_offset[0]
    _next_offset[0] += 1
    base = torch.empty(rows * dim + offset, device="meta")
    weight = base.as_strided((rows, dim), (dim, 1), offset)
    _tables[offset] = TableInit()  # nn.Embedding's reset_parameters: N(0, 1)
    return weight


def _recorded(tensor):
    return tensor.device.type == "meta" and tensor.storage_offset() in _tables


def _refuse(what):
    return error("INVALID_ARGUMENT",
                 f"a sparse embedding table built inside parallax.torch.build() was initialised "
                 f"with {what}; its values live in Parallax and start from its initializer: use "
                 "the module's default N(0, 1), nn.init.uniform_(w, -a, a), nn.init.normal_(w, 0, "
                 "s) or nn.init.zeros_(w)")


def _patched_methods(originals):
    def uniform_(self, a=0.0, b=1.0, *args, **kwargs):
        if not _recorded(self):
            return originals["uniform_"](self, a, b, *args, **kwargs)
        if not math.isclose(a, -b, rel_tol=1e-9, abs_tol=0.0) or b <= 0:
            raise _refuse(f"uniform_({a}, {b}) (only a symmetric range [-a, a) is supported)")
        _tables[self.storage_offset()] = TableInit("uniform", b)
        return self

    def normal_(self, mean=0.0, std=1.0, *args, **kwargs):
        if not _recorded(self):
            return originals["normal_"](self, mean, std, *args, **kwargs)
        if mean != 0:
            raise _refuse(f"normal_(mean={mean}, std={std}) (only mean 0 is supported)")
        _tables[self.storage_offset()] = TableInit("normal", std)
        return self

    def zero_(self):
        if not _recorded(self):
            return originals["zero_"](self)
        _tables[self.storage_offset()] = TableInit("zeros", 0.0)
        return self

    def fill_(self, value):
        if not _recorded(self):
            return originals["fill_"](self, value)
        if float(value) != 0.0:
            raise _refuse(f"fill_({value}) (only zeros are supported)")
        _tables[self.storage_offset()] = TableInit("zeros", 0.0)
        return self

    def copy_(self, src, *args, **kwargs):
        if not _recorded(self):
            return originals["copy_"](self, src, *args, **kwargs)
        raise _refuse("copy_ of given values (pretrained values cannot seed a table that lives "
                      "on PS shards)")

    return dict(uniform_=uniform_, normal_=normal_, zero_=zero_, fill_=fill_, copy_=copy_)


def _patched_init(original):
    signature = inspect.signature(original)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        if a["sparse"] and a["_weight"] is None and a["device"] is None and (
                a["dtype"] in (None, torch.float32)):
            # nn.Embedding zeroes padding_idx's row in reset_parameters, which
            # a given _weight skips; parallax.torch.Model honours padding_idx.
            a["_weight"] = _meta_weight(a["num_embeddings"], a["embedding_dim"])
        original(*bound.args, **bound.kwargs)

    return __init__


@contextlib.contextmanager
def build():
    """See parallax.torch.build."""
    saved_init = {cls: cls.__init__ for cls in (nn.Embedding, nn.EmbeddingBag)}
    names = ("uniform_", "normal_", "zero_", "fill_", "copy_")
    saved_methods = {name: getattr(torch.Tensor, name) for name in names}
    try:
        for cls, original in saved_init.items():
            cls.__init__ = _patched_init(original)
        for name, method in _patched_methods(saved_methods).items():
            setattr(torch.Tensor, name, method)
        yield
    finally:
        for cls, original in saved_init.items():
            cls.__init__ = original
        for name, method in saved_methods.items():
            setattr(torch.Tensor, name, method)
