"""The forward of a sparse table once parallax.torch.Model owns it: the batch's distinct rows
come from the Session (pulled from the PS shards, or read from the rank's replica), become a
leaf tensor the rest of the graph uses, and its gradient (one row per distinct id) goes back to
the Session as soon as backward computes it."""

import functools

import numpy as np
import torch
import torch.nn.functional as F

from parallax.torch._context import error


def _distinct(ids):
    """(distinct ids as int64 numpy, inverse index tensor shaped like `ids`)."""
    flat = ids.reshape(-1)
    if flat.dtype != torch.int64:
        flat = flat.long()
    uniq, inverse = torch.unique(flat.cpu(), sorted=True, return_inverse=True)
    return uniq.numpy(), inverse.view(ids.shape)


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
    if runtime.capturing:
        uniq, _ = _distinct(input)
        runtime.session.sample_ids(table.var, uniq)
        return torch.zeros(_shape_out(table, input, offsets), device=input.device)
    runtime.check_usable(f"forward of '{table.name}'")
    uniq, inverse = _distinct(input)
    try:
        flat = runtime.session.lookup(table.var, uniq)
    except Exception as e:
        raise runtime.context_error(e, f"looking up rows of '{table.name}'") from None
    rows = torch.from_numpy(flat).view(len(uniq), table.dim)
    pad = None
    if table.padding_idx is not None:
        hit = np.flatnonzero(uniq == table.padding_idx)
        if hit.size:
            pad = int(hit[0])
            rows[pad] = 0.0  # padding_idx's row reads as zeros and gets no gradient
    rows = _stage(rows, input.device)
    if torch.is_grad_enabled():
        rows.requires_grad_(True)
        rows.register_hook(functools.partial(runtime.on_table_grad, table, uniq, pad))
    inverse = inverse.to(input.device)
    if not table.bag:
        return F.embedding(inverse, rows, padding_idx=pad)
    module = table.module
    return F.embedding_bag(inverse, rows, offsets, mode=module.mode,
                           per_sample_weights=per_sample_weights,
                           include_last_offset=module.include_last_offset, padding_idx=pad)


def prefetch(runtime, table, next_ids):
    """Starts pulling the rows `next_ids` (the next step's input to this table) while this step
    computes; the next step's forward with the same ids waits on it instead of pulling."""
    runtime.check_usable(f"prefetch of '{table.name}'")
    uniq, _ = _distinct(next_ids)
    try:
        runtime.session.prefetch(table.var, uniq)
    except Exception as e:
        raise runtime.context_error(e, f"prefetching rows of '{table.name}'") from None


def gradient_rows(uniq, pad, grad):
    """(ids, rows) to hand to the Session: the distinct ids without padding_idx's row."""
    grad = grad.detach()
    if grad.device.type != "cpu":
        grad = grad.cpu()
    grad = grad.contiguous().numpy()
    if pad is None:
        return uniq, grad
    keep = np.ones(len(uniq), dtype=bool)
    keep[pad] = False
    return uniq[keep], grad[keep]


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
