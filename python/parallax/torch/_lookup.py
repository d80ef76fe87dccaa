"""The forward of a sparse table once parallax.torch.Model owns it: the rows of the batch's ids
come from the Session (pulled from the PS shards, or read from the rank's replica) as one leaf
tensor with a row per id, which the rest of the graph uses as the table's output; its gradient
(a row per id) goes back to the Session as soon as backward computes it. Repeated ids are
pulled once and their gradients summed by the Session, in C++."""

import functools

import numpy as np
import torch
import torch.nn.functional as F

from parallax.torch._context import error


def _flat_ids(ids):
    """`ids` as a flat int64 numpy array of its own (the caller may reuse its tensor before
    backward hands the gradient over)."""
    flat = ids.reshape(-1)
    if flat.dtype != torch.int64:
        flat = flat.long()
    return flat.cpu().numpy().copy()


def _shape_out(table, ids, offsets):
    if not table.bag:
        return tuple(ids.shape) + (table.dim,)
    if ids.dim() == 2:
        return (ids.shape[0], table.dim)
    bags = offsets.numel() - (1 if table.module.include_last_offset else 0)
    return (bags, table.dim)


def _stage(rows, device):
    """Rows on the host go to `device` through pinned memory (GPU models)."""
    if device.type == "cpu":
        return rows
    return rows.pin_memory().to(device, non_blocking=True)


def forward(runtime, table, input, offsets=None, per_sample_weights=None):
    """nn.Embedding / nn.EmbeddingBag forward over Parallax's rows of `table`."""
    ids = _flat_ids(input)
    if runtime.capturing:
        if table.local is None:  # a process-local dynamic table needs no plan
            runtime.session.sample_ids(table.var, ids)
        return torch.zeros(_shape_out(table, input, offsets), device=input.device)
    runtime.check_usable(f"forward of '{table.name}'")
    try:
        if table.local is not None:
            flat = table.local.read(ids)
        else:
            flat = runtime.session.lookup(table.var, ids)
    except Exception as e:
        raise runtime.context_error(e, f"looking up rows of '{table.name}'") from None
    rows = torch.from_numpy(flat).view(len(ids), table.dim)
    pad = None
    if table.padding_idx is not None:
        pad = ids == table.padding_idx
        if pad.any():
            rows[torch.from_numpy(pad)] = 0.0  # padding_idx reads as zeros, gets no gradient
        else:
            pad = None
    rows = _stage(rows, input.device)
    if torch.is_grad_enabled():
        rows.requires_grad_(True)
        rows.register_hook(functools.partial(runtime.on_table_grad, table, ids, pad))
    if not table.bag:
        return rows.view(tuple(input.shape) + (table.dim,))
    # A bag reduces its positions' rows; padding positions point at an extra zero row that
    # padding_idx leaves out of the bag, as nn.EmbeddingBag does.
    module = table.module
    index = torch.arange(len(ids), device=input.device)
    if pad is not None:
        index[torch.from_numpy(pad).to(input.device)] = len(ids)
        rows = torch.cat([rows, rows.new_zeros(1, table.dim)])
    return F.embedding_bag(index.view(input.shape), rows, offsets, mode=module.mode,
                           per_sample_weights=per_sample_weights,
                           include_last_offset=module.include_last_offset,
                           padding_idx=len(ids) if pad is not None else None)


def prefetch(runtime, table, next_ids):
    """Starts pulling the rows of `next_ids` (the next step's input to this table) while this
    step computes; the next step's forward with the same ids waits on it instead of pulling."""
    prefetch_many(runtime, [table], [next_ids])


def prefetch_many(runtime, tables, next_ids):
    """prefetch() of several tables at once: their pulls go to each PS shard as one message
    (the job's [ps] batch)."""
    runtime.check_usable("prefetch of " + ", ".join(repr(t.name) for t in tables))
    on_ps = [(t, ids) for t, ids in zip(tables, next_ids) if t.local is None]
    if not on_ps:
        return
    try:
        runtime.session.prefetch_many([t.var for t, _ in on_ps],
                                      [_flat_ids(ids) for _, ids in on_ps])
    except Exception as e:
        names = ", ".join(repr(t.name) for t, _ in on_ps)
        raise runtime.context_error(e, f"prefetching rows of {names}") from None


def gradient_rows(ids, pad, grad):
    """(ids, rows) to hand to the Session: a row per position, without padding_idx's."""
    grad = grad.detach()
    if grad.device.type != "cpu":
        grad = grad.cpu()
    grad = grad.contiguous().numpy()
    if pad is None:
        return ids, grad
    keep = ~pad
    return ids[keep], grad[keep]


def install(runtime, table):
    """Routes the table module's forward to Parallax and gives it a prefetch() method."""
    module = table.module

    def table_forward(input, offsets=None, per_sample_weights=None):
        if not table.bag and (offsets is not None or per_sample_weights is not None):
            raise error("INVALID_ARGUMENT", f"'{table.name}' is an nn.Embedding: forward takes "
                        "only the ids")
        return forward(runtime, table, input, offsets, per_sample_weights)

    module.forward = table_forward
    module.prefetch = functools.partial(prefetch, runtime, table)
