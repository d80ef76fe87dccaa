"""parallax.torch in one process with no coordinator: tables built without memory and their
initialisation kept, training equal to plain PyTorch, the sampler's sharding, and a clear error
for each misuse."""
import os
import random

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import parallax
import parallax.torch as px
from parallax.torch import _context


@pytest.fixture(autouse=True)
def fresh_context(monkeypatch):
    """Each test is a new process as far as parallax.torch knows; no task environment."""
    for name in list(os.environ):
        if name.startswith("PARALLAX_"):
            monkeypatch.delenv(name)
    if _context._current is not None and _context._current.model is not None:
        _context._current.model.close()
    _context.reset_for_tests()
    yield
    if _context._current is not None and _context._current.model is not None:
        _context._current.model.close()
    _context.reset_for_tests()


class Net(nn.Module):
    def __init__(self, rows=30, max_norm=None, scale_grad_by_freq=False):
        super().__init__()
        self.emb = nn.Embedding(rows, 4, sparse=True, max_norm=max_norm,
                                scale_grad_by_freq=scale_grad_by_freq)
        nn.init.uniform_(self.emb.weight, -0.2, 0.2)
        self.bag = nn.EmbeddingBag(20, 4, mode="mean", sparse=True, padding_idx=3)
        self.fc = nn.Linear(8, 1)

    def forward(self, ids, bags, y):
        x = torch.cat([self.emb(ids).sum(1), self.bag(bags)], 1)
        return F.mse_loss(self.fc(x).squeeze(1), y)


def batches(n=6, size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 30, (size, 3), generator=g), torch.randint(0, 20, (size, 5),
                                                                          generator=g),
             torch.randn(size, generator=g)) for _ in range(n)]


def wrapped(data=None, **kwargs):
    px.init()
    with px.build():
        net = Net(**kwargs)
    return px.Model(net, sample=data or batches())


def test_tables_built_inside_build_take_no_memory_and_keep_their_initialisation():
    with px.build():
        default = nn.Embedding(10_000_000, 64, sparse=True)  # 2.4 GB if it were allocated
        uniform = nn.Embedding(10, 4, sparse=True)
        nn.init.uniform_(uniform.weight, -0.3, 0.3)
        via_data = nn.Embedding(10, 4, sparse=True)
        via_data.weight.data.normal_(0, 0.02)
        xavier = nn.EmbeddingBag(10, 4, sparse=True)
        nn.init.xavier_uniform_(xavier.weight)
        zeros = nn.Embedding(10, 4, sparse=True)
        nn.init.zeros_(zeros.weight)
        dense = nn.Embedding(10, 4)  # sparse=False: a dense parameter, built as usual
        linear = nn.Linear(3, 3)
    from parallax.torch._tables import table_init
    assert default.weight.device.type == "meta"
    got = {name: (table_init(m.weight).kind, round(table_init(m.weight).scale, 4))
           for name, m in [("default", default), ("uniform", uniform), ("via_data", via_data),
                           ("xavier", xavier), ("zeros", zeros)]}
    assert got == {"default": ("normal", 1.0), "uniform": ("uniform", 0.3),
                   "via_data": ("normal", 0.02), "xavier": ("uniform", round((6 / 14) ** .5, 4)),
                   "zeros": ("zeros", 0.0)}
    assert dense.weight.device.type == "cpu" and table_init(dense.weight) is None
    assert linear.weight.abs().sum() > 0  # other initialisation untouched
    # Outside the scope nothing is patched.
    assert nn.Embedding(3, 2, sparse=True).weight.device.type == "cpu"


@pytest.mark.parametrize("init,says", [
    (lambda w: nn.init.uniform_(w, 0.0, 1.0), "symmetric"),
    (lambda w: nn.init.normal_(w, 1.0, 0.1), "mean 0"),
    (lambda w: nn.init.constant_(w, 0.5), "zeros"),
    (lambda w: w.data.copy_(torch.ones(10, 4)), "outside build"),
])
def test_an_initialisation_the_tables_cannot_start_from_is_refused_naming_it(init, says):
    with px.build():
        table = nn.Embedding(10, 4, sparse=True)
        with pytest.raises(parallax.Error, match=says) as e:
            init(table.weight)
    assert e.value.code == "INVALID_ARGUMENT"


def test_one_process_trains_like_plain_pytorch():
    px.init()
    data = batches()
    with px.build():
        net = Net()
    model = px.Model(net, sample=data)
    opt = px.Optimizer(model)
    initial = model.state_dict()
    assert initial["bag.weight"][3].abs().sum() == 0  # padding_idx reads as zeros
    plain = Net()
    plain.load_state_dict(initial)
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.01)  # the defaults without a job file
    for ids, bags, y in data:
        loss = model(ids, bags, y)
        opt.zero_grad()
        loss.backward()
        opt.step(loss)
        plain_loss = plain(ids, bags, y)
        plain_opt.zero_grad()
        plain_loss.backward()
        plain_opt.step()
        assert loss.item() == pytest.approx(plain_loss.item(), rel=1e-6)
    got, want = model.state_dict(), plain.state_dict()
    for key in want:
        assert torch.allclose(got[key], want[key], rtol=1e-5, atol=1e-6), key
    assert model.steps == len(data)
    assert model.plan == {"emb.weight": "allgather", "bag.weight": "allgather",
                          "fc.weight": "allreduce", "fc.bias": "allreduce"}
    assert torch.equal(model.read_table("emb.weight", 5, 2), got["emb.weight"][5:7])
    model.module.emb.prefetch(data[0][0])  # a local replica: nothing to pull, no error
    model.prefetch({model.module.emb: data[0][0], "bag.weight": data[0][1]})  # the same, both
    with pytest.raises(px.Error, match="'fc.weight' is not a sparse table; the tables are: "
                       "emb.weight, bag.weight"):
        model.prefetch({"fc.weight": data[0][0]})


def test_a_learning_rate_scheduler_drives_the_job_optimizer():
    model = wrapped()
    opt = px.Optimizer(model)
    assert [(g["name"], g["lr"]) for g in opt.param_groups] == [("sparse", 0.01), ("dense", 0.01)]
    plain = Net()
    plain.load_state_dict(model.state_dict())
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.01)
    schedulers = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
                  for o in (opt, plain_opt)]
    for ids, bags, y in batches(3):
        for m, o in ((model, opt), (plain, plain_opt)):
            loss = m(ids, bags, y)
            o.zero_grad()
            loss.backward()
            o.step()
        for s in schedulers:
            s.step()
    got, want = model.state_dict(), plain.state_dict()
    for key in want:
        assert torch.allclose(got[key], want[key], rtol=1e-5, atol=1e-6), key
    opt.param_groups[1]["lr"] = 0.0
    loss = model(*batches(1)[0])
    opt.zero_grad()
    loss.backward()
    with pytest.raises(parallax.Error, match="learning rate 0.0 of the 'dense' parameter group"):
        opt.step()


def test_sampling_consumes_neither_the_data_nor_the_random_numbers():
    px.init()
    data = batches()
    calls = []

    class Counting:
        def __iter__(self):
            calls.append(1)
            return iter(data)

    class Noisy(Net):
        def forward(self, ids, bags, y):  # draws random numbers while it runs
            torch.rand(100)
            np.random.rand(100)
            random.random()
            return super().forward(ids, bags, y)

    def seeded_net():
        torch.manual_seed(5)
        np.random.seed(5)
        random.seed(5)
        with px.build():
            return Noisy()

    seeded_net()
    want = (torch.rand(3), np.random.rand(3), random.random())
    net = seeded_net()
    source = Counting()
    px.Model(net, sample=source, sample_batches=2)
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[2] == want[2]
    assert calls == [1]  # one fresh iterator, not the caller's


def test_sampler_shards_each_global_batch_by_rank_and_starts_at_the_model_step(monkeypatch):
    shares = []
    for rank in range(2):
        monkeypatch.setenv("PARALLAX_RANK", str(rank))
        monkeypatch.setenv("PARALLAX_WORLD_SIZE", "2")
        _context.reset_for_tests()
        px.init()
        sampler = px.DistributedSampler(100, 8, seed=3)
        assert len(sampler) == 100 // 16
        shares.append(list(sampler))
    assert len(shares[0]) == len(shares[1]) == 6
    for b in range(6):
        union = shares[0][b] + shares[1][b]
        assert len(set(union)) == 16 and set(union) == set(sampler.global_batch_indices(b)
                                                           .tolist())
    assert shares[0][2] == sampler.global_batch_indices(2)[0::2].tolist()


# ---- misuse: each gets a parallax.Error naming the rank, the parameter, what to do ----------

def test_step_without_backward():
    model = wrapped()
    opt = px.Optimizer(model)
    model(*batches(1)[0])
    with pytest.raises(parallax.Error, match="rank 0: step\\(\\) without backward") as e:
        opt.step()
    assert e.value.code == "FAILED_PRECONDITION"


def test_backward_twice_before_step():
    model = wrapped()
    opt = px.Optimizer(model)
    batch = batches(1)[0]
    model(*batch).backward()
    model.module(*batch).backward()  # the inner module: the wrapper's forward would refuse
    with pytest.raises(parallax.Error, match="rank 0: the gradient of 'fc.bias' arrived twice"):
        opt.step()


def test_parameter_added_after_start():
    model = wrapped()
    model.module.extra = nn.Linear(2, 2)
    with pytest.raises(parallax.Error, match="rank 0: parameter 'extra.weight' was added"):
        model(*batches(1)[0])


def test_non_finite_loss_stops_like_a_built_in_model():
    model = wrapped()
    opt = px.Optimizer(model)
    loss = model(*batches(1)[0])
    loss.backward()
    with pytest.raises(parallax.Error, match="loss is NaN at step 0") as e:
        opt.step(float("nan"))
    assert e.value.code == "INVALID_ARGUMENT"


def test_non_finite_gradient_names_the_parameter_at_the_step():
    model = wrapped()
    opt = px.Optimizer(model)
    ids, bags, y = batches(1)[0]
    model(ids, bags, y * float("nan")).backward()  # a hook never raises inside backward()
    with pytest.raises(parallax.Error, match="rank 0: gradient of 'fc.bias'.*NaN") as e:
        opt.step()
    assert e.value.code == "INVALID_ARGUMENT"


@pytest.mark.parametrize("kwargs,says", [
    (dict(max_norm=1.0), "max_norm"),
    (dict(scale_grad_by_freq=True), "scale_grad_by_freq"),
])
def test_options_the_paths_cannot_honour_are_refused(kwargs, says):
    with pytest.raises(parallax.Error, match=f"'emb.weight' has {says}"):
        wrapped(**kwargs)


def test_tied_table_weights_are_refused():
    px.init()
    with px.build():
        net = Net()
    net.other = nn.Embedding(30, 4, sparse=True)
    net.other.weight = net.emb.weight
    with pytest.raises(parallax.Error, match="tied weights"):
        px.Model(net, sample=batches())


def test_a_table_built_outside_build_starts_from_its_own_values_and_gives_its_memory_back():
    px.init()
    torch.manual_seed(3)
    net = Net()
    initial = {k: v.clone() for k, v in net.state_dict().items()}
    model = px.Model(net, sample=batches())
    assert net.emb.weight.device.type == "meta" and net.bag.weight.device.type == "meta"
    ids = torch.tensor([[0, 29, 7]])
    assert torch.equal(net.emb(ids)[0], initial["emb.weight"][[0, 29, 7]])
    state = {k: v for k, v in model.state_dict().items()}
    for key, value in initial.items():
        assert torch.equal(state[key], value), key


def test_a_table_on_the_meta_device_not_built_by_build_is_refused():
    px.init()
    net = Net()
    net.emb.weight = nn.Parameter(torch.empty(30, 4, device="meta"))
    with pytest.raises(parallax.Error, match="not built inside parallax.torch.build"):
        px.Model(net, sample=batches())


def test_sample_must_not_be_a_one_shot_iterator_and_tables_need_it():
    px.init()
    with px.build():
        net = Net()
    with pytest.raises(parallax.Error, match="one-shot iterator"):
        px.Model(net, sample=iter(batches()))
    with pytest.raises(parallax.Error, match="no sample= batches"):
        px.Model(net)


def test_call_order_mistakes():
    with pytest.raises(parallax.Error, match="before parallax.torch.init"):
        px.Model(nn.Linear(2, 2))
    model = wrapped()
    with pytest.raises(parallax.Error, match="registered after"):
        px.register_state("late", bytes, print)
    with pytest.raises(parallax.Error, match="second parallax.torch.Model"):
        px.Model(nn.Linear(2, 2))
    with pytest.raises(parallax.Error, match="takes the parallax.torch.Model"):
        px.Optimizer(model.module)
    with pytest.raises(parallax.Error, match="init\\(\\) was called twice"):
        px.init()
