"""DistributedSampler: each rank's share of every global batch, a function of the step."""

import torch
from torch.utils.data import Sampler

from parallax.torch import _context
from parallax.torch._context import error


class DistributedSampler(Sampler):
    """A batch sampler (DataLoader(data, batch_sampler=...)) for `data` (a sized dataset, or its
    length). Global batch t holds batch_size x world_size examples: epoch e = t // len(self)
    shuffles the indices with a generator seeded by (seed, e), the same on every rank, and batch
    t takes the next batch_size x world_size of them; rank r gets positions r, r + W, r + 2W...
    of it. So W ranks with batch_size B see exactly what one rank with batch_size W*B sees, and
    the batches are a function of the step: iter() starts at the model's current step (after a
    resume, where the checkpoint left off) and ends with the epoch. The last partial global
    batch of an epoch is dropped."""

    def __init__(self, data, batch_size, shuffle=True, seed=0):
        ctx = _context.current("parallax.torch.DistributedSampler()")
        self._ctx = ctx
        self.size = data if isinstance(data, int) else len(data)
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.global_batch = self.batch_size * ctx.world_size
        if self.batch_size < 1 or self.size < self.global_batch:
            raise error("INVALID_ARGUMENT", f"{ctx.where()}: DistributedSampler: {self.size} "
                        f"examples do not fill one global batch of {self.batch_size} x "
                        f"{ctx.world_size} ranks")

    def __len__(self):
        """Global batches (steps) per epoch."""
        return self.size // self.global_batch

    def order(self, epoch):
        """The indices of epoch `epoch` in the order batches take them."""
        if not self.shuffle:
            return torch.arange(self.size)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.size, generator=gen)

    def global_batch_indices(self, step):
        """Every rank's examples of global batch `step`, in rank-interleaved order."""
        epoch, b = divmod(step, len(self))
        return self.order(epoch)[b * self.global_batch:(b + 1) * self.global_batch]

    def __iter__(self):
        model = self._ctx.model
        step = model.steps if model is not None else 0
        epoch = step // len(self)
        order = self.order(epoch)
        rank, world = self._ctx.rank, self._ctx.world_size
        for b in range(step - epoch * len(self), len(self)):
            batch = order[b * self.global_batch:(b + 1) * self.global_batch]
            yield batch[rank::world].tolist()
