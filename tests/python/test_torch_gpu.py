"""The GPU path of parallax.torch: CUDA parameters' gradients all-reduced in device memory by the
Session (NCCL, by data_ptr()), table rows staged through pinned memory. Needs a CUDA device and
a torch built with CUDA; skipped otherwise (Debian's python3-torch has no CUDA)."""
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import parallax.torch as px
from parallax.torch import _context

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device, or a torch without CUDA: the GPU path compiles here but cannot run")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 8, sparse=True)
        self.fc = nn.Linear(8, 1)

    def forward(self, ids, y):
        return F.mse_loss(self.fc(self.emb(ids).mean(1)).squeeze(1), y)


def test_one_process_on_the_gpu_trains_like_plain_pytorch_on_the_gpu(monkeypatch):
    for name in list(os.environ):
        if name.startswith("PARALLAX_"):
            monkeypatch.delenv(name)
    _context.reset_for_tests()
    px.init()
    g = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, 100, (16, 3), generator=g).cuda(), torch.randn(16, generator=g)
             .cuda()) for _ in range(5)]
    with px.build():
        net = Net()
    net.fc.cuda()
    model = px.Model(net, sample=data)
    opt = px.Optimizer(model)
    plain = Net()
    plain.load_state_dict(model.state_dict())
    plain.cuda()
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.01)
    for ids, y in data:
        for m, o in ((model, opt), (plain, plain_opt)):
            loss = m(ids, y)
            o.zero_grad()
            loss.backward()
            o.step()
    got, want = model.state_dict(), plain.state_dict()
    for key in want:
        assert torch.allclose(got[key], want[key].cpu(), rtol=1e-5, atol=1e-6), key
    model.close()
    _context.reset_for_tests()
