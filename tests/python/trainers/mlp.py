#!/usr/bin/python3
"""Four dense 512 x 512 layers, no tables: the fusion buckets' overlap with backward under
`parallax run` (tests/python/test_torch_jobs.py). [user] bucket_bytes: parallax.torch.Model's."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import parallax.torch as px


def main():
    px.init()
    job = px.job()
    torch.manual_seed(3)
    net = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(512, 512), nn.ReLU())])
    g = torch.Generator().manual_seed(3)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 512, generator=g),
                                          torch.randn(4096, 512, generator=g))
    loader = torch.utils.data.DataLoader(
        data, batch_sampler=px.DistributedSampler(data, job["batch_size"]))
    model = px.Model(net, bucket_bytes=job["user"].get("bucket_bytes"))
    opt = px.Optimizer(model)
    while model.steps < job["steps"]:
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step(loss)
            if model.steps >= job["steps"]:
                break


if __name__ == "__main__":
    main()
