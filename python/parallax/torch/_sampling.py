"""Sparsity from the model's own first batches, without consuming the user's data.

Before the job starts, the plan needs each table's density: the fraction of its rows a batch
touches. parallax.torch.Model measures it on the first `sample_batches` batches of `sample=`:

- a fresh iterator is taken from `sample` (a DataLoader, or any re-iterable: a list, a
  function's result...), so the iterator the training loop uses is untouched; a one-shot
  iterator (a generator) is refused, because drawing from it would eat training batches;
- the model runs forward on them in eval mode under torch.no_grad(); each sparse table records
  the distinct ids it is asked for (Session.sample_ids) and returns zeros, so nothing is looked
  up and no table is touched;
- the random states of torch, numpy and random are saved before and restored after, so negative
  sampling or dropout in the forward leaves the training run's random numbers as they were.
"""

import random

import numpy as np
import torch

from parallax.torch._context import error


def call_forward(module, batch):
    """The default way a batch feeds the model: model(*batch) for a tuple or list, model(**batch)
    for a dict, model(batch) otherwise."""
    if isinstance(batch, (tuple, list)):
        return module(*batch)
    if isinstance(batch, dict):
        return module(**batch)
    return module(batch)


def _random_states():
    states = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return states, cuda


def _restore(saved):
    (torch_state, np_state, py_state), cuda = saved
    torch.set_rng_state(torch_state)
    np.random.set_state(np_state)
    random.setstate(py_state)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def sample(runtime, source, batches, forward):
    iterator = iter(source)
    if iterator is source:
        raise error("INVALID_ARGUMENT",
                    f"{runtime.where}: sample= is a one-shot iterator; drawing from it would "
                    "consume training batches: pass the DataLoader (or a list of batches, or "
                    "anything iter() can restart)")
    forward = forward or call_forward
    saved = _random_states()
    was_training = runtime.module.training
    runtime.module.eval()
    runtime.capturing = True
    drawn = 0
    try:
        with torch.no_grad():
            for batch in iterator:
                forward(runtime.module, batch)
                drawn += 1
                if drawn == batches:
                    break
    finally:
        runtime.capturing = False
        runtime.module.train(was_training)
        _restore(saved)
        del iterator  # a DataLoader's workers stop here
    if drawn == 0:
        raise error("INVALID_ARGUMENT", f"{runtime.where}: sample= yielded no batch")
