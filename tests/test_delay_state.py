"""DelayedOptimizer checkpoints, memory and bad input."""

from __future__ import annotations

import io
import math

import pytest
import torch

from asyncpp.delay import DelayedOptimizer, DelaySchedule
from asyncpp.optim import Muon, build_optimizer

pytestmark = pytest.mark.usefixtures("one_thread")

DATA = torch.randn(16, 6, generator=torch.Generator().manual_seed(1))
TARGET = torch.randn(16, 3, generator=torch.Generator().manual_seed(2))


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                               torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _make(name, seed, **wrap):
    model = _model(seed)
    opt = build_optimizer(name, model.named_parameters(), lr=0.02, weight_decay=0.05)
    return model, DelayedOptimizer(opt, **wrap)


def _train_step(model, opt):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(DATA), TARGET).backward()
    opt.step()


@pytest.mark.parametrize("name", ["muon", "adamw"])
@pytest.mark.parametrize(
    "wrap",
    [
        dict(delay=2, correction="ef"),
        dict(delay=1, correction="taylor", taylor_lambda=0.3),
        dict(delay=[1, 2, 0], correction="ef"),
        dict(delay=1, correction="ef", formulation="update"),
        dict(delay=2, correction="none", sync_cooldown=3, total_steps=12),
        dict(delay=2, correction="ef", ef_gamma=1.6),
        dict(delay=[1, 2, 0], correction="ef", ef_gamma="auto"),
        dict(delay=1, correction="ef", ef_gamma=0.5, formulation="update"),
    ],
    ids=["ef-d2", "taylor-d1", "ef-per-group", "ef-update", "cooldown", "efg-d2",
         "efg-auto-per-group", "efg-update"],
)
def test_state_dict_round_trip(name, wrap):
    def make(seed):
        if not isinstance(wrap["delay"], list):
            return _make(name, seed, **wrap)
        # One delay per parameter group: one group per Linear layer (stage-like).
        model = _model(seed)
        layers = [m for m in model if isinstance(m, torch.nn.Linear)]
        if name == "muon":
            opt = Muon([{"params": [m.weight]} for m in layers], lr=0.02, weight_decay=0.05)
        else:
            opt = torch.optim.AdamW([{"params": list(m.parameters())} for m in layers],
                                    lr=0.02, weight_decay=0.05)
        return model, DelayedOptimizer(opt, **wrap)

    model, opt = make(0)
    for _ in range(6):
        _train_step(model, opt)
    assert opt.pending() > 0 or wrap.get("sync_cooldown")
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)

    model2, opt2 = make(seed=123)  # a different initialisation, overwritten by the checkpoint
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["opt"])
    assert opt2.pending() == opt.pending() and opt2.step_count == opt.step_count
    for _ in range(6):
        _train_step(model, opt)
        _train_step(model2, opt2)
        for p, q in zip(model.parameters(), model2.parameters()):
            assert torch.equal(p, q)
    opt.flush()
    opt2.flush()
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)


def test_round_trip_includes_ef_memory_and_queue():
    model, opt = _make("adamw", 0, delay=2, correction="ef")
    for _ in range(4):
        _train_step(model, opt)
    sd = opt.state_dict()
    assert len(sd["queues"][0]) == 2 and sd["prev_update"][0] is not None
    fresh_model, fresh = _make("adamw", 0, delay=2, correction="none")
    with pytest.raises(ValueError, match="correction"):
        fresh.load_state_dict(sd)


def _bytes_per_param(steps=3, **wrap):
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 4))
    n = sum(p.numel() for p in model.parameters())
    opt = DelayedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), **wrap)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.ones(2, 10)).sum().backward()
        opt.step()
    return opt.extra_bytes() / n


def test_extra_bytes_per_parameter(capsys):
    """fp32: delay τ keeps τ gradient copies (4τ B/param); EF adds one update buffer (+4);
    Taylor adds one weight snapshot per pending gradient (+4τ); delay 0 keeps nothing."""
    table = {
        "delay 0": _bytes_per_param(delay=0),
        "delay 1": _bytes_per_param(delay=1),
        "delay 1 + EF": _bytes_per_param(delay=1, correction="ef"),
        "delay 1 + Taylor": _bytes_per_param(delay=1, correction="taylor"),
        "delay 2": _bytes_per_param(delay=2),
        "delay 2 + EF": _bytes_per_param(delay=2, correction="ef"),
        "delay 1, update formulation": _bytes_per_param(delay=1, formulation="update"),
        "delay 1 + EF, update formulation": _bytes_per_param(delay=1, correction="ef",
                                                              formulation="update"),
    }
    with capsys.disabled():
        print("\n[DelayedOptimizer extra bytes/param, fp32] "
              + ", ".join(f"{k}: {v:g}" for k, v in table.items()))
    assert table == {
        "delay 0": 0, "delay 1": 4, "delay 1 + EF": 8, "delay 1 + Taylor": 8,
        "delay 2": 8, "delay 2 + EF": 12, "delay 1, update formulation": 4,
        "delay 1 + EF, update formulation": 8,
    }


def _sgd():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)


@pytest.mark.parametrize("delay", [-1, [-2], 1.5, True])
def test_bad_delay(delay):
    with pytest.raises(ValueError, match=r"delay must be a non-negative integer, got "
                       + repr(delay if not isinstance(delay, list) else delay[0])
                       .replace("(", r"\(").replace(".", r"\.")):
        DelayedOptimizer(_sgd(), delay=delay)


def test_bad_settings():
    with pytest.raises(ValueError, match=r"'foo'; allowed: \('none', 'ef', 'taylor', 'nesterov'\)"):
        DelayedOptimizer(_sgd(), correction="foo")
    with pytest.raises(ValueError, match=r"'bar'; allowed: \('gradient', 'update'\)"):
        DelayedOptimizer(_sgd(), formulation="bar")
    with pytest.raises(ValueError, match="formulation='gradient'"):
        DelayedOptimizer(_sgd(), correction="taylor", formulation="update")
    with pytest.raises(ValueError, match="taylor_lambda.*nan"):
        DelayedOptimizer(_sgd(), correction="taylor", taylor_lambda=math.nan)
    with pytest.raises(ValueError, match="2 per-group delays for 1 parameter groups"):
        DelayedOptimizer(_sgd(), delay=[1, 2])
    with pytest.raises(ValueError, match="sync_cooldown needs total_steps"):
        DelayedOptimizer(_sgd(), sync_cooldown=3)
    with pytest.raises(ValueError, match="sync_start must be a non-negative integer, got -1"):
        DelayedOptimizer(_sgd(), sync_start=-1)
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        DelayedOptimizer(object())


def test_apply_stale_bad_input():
    with pytest.raises(ValueError, match="formulation='update'"):
        DelayedOptimizer(_sgd(), formulation="update").apply_stale(1)
    with pytest.raises(ValueError, match=r"non-negative integer delay.*got -1"):
        DelayedOptimizer(_sgd()).apply_stale(-1)
    with pytest.raises(ValueError, match="stale_params"):
        opt = DelayedOptimizer(_sgd(), correction="taylor")
        opt.param_groups[0]["params"][0].grad = torch.ones(2)
        opt.apply_stale(1)
    with pytest.raises(ValueError, match=r"non-negative update index at=, got -2"):
        DelayedOptimizer(_sgd()).apply_stale(1, at=-2)


def test_apply_stale_at_names_the_update_index():
    """A pipeline names each update's index: the statistics carry it and the count goes on from
    it, whatever order the updates were applied in."""
    opt = DelayedOptimizer(_sgd(), track_updates=True)
    p = opt.param_groups[0]["params"][0]
    for t in (4, 2):
        p.grad = torch.ones_like(p)
        opt.apply_stale(1, at=t)
        assert opt.step_count == t + 1
    assert [s["step"] for s in opt.stats] == [4, 2]
    p.grad = torch.ones_like(p)
    opt.apply_stale(1)
    assert opt.stats[-1]["step"] == 3


def test_schedule_windows():
    s = DelaySchedule.build([0, 2], 2, sync_start=2, sync_cooldown=3, total_steps=10)
    assert [s.delay_at(t, 1) for t in range(10)] == [0, 0, 2, 2, 2, 2, 2, 0, 0, 0]
    assert [s.delay_at(t, 0) for t in range(10)] == [0] * 10
    assert s.max_delay == 2


@pytest.mark.parametrize("name", ["soap", "adan", "lion", "mars"])
def test_state_dict_round_trip_baselines(name):
    """Any torch.optim.Optimizer: the baselines' own state (SOAP's eigenbases, Adan's previous
    gradient, MARS's last gradient) survives the checkpoint next to the delay queue."""
    model, opt = _make(name, 0, delay=1, correction="ef")
    for _ in range(5):
        _train_step(model, opt)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    model2, opt2 = _make(name, 7, delay=1, correction="ef")
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["opt"])
    for _ in range(4):
        _train_step(model, opt)
        _train_step(model2, opt2)
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)


# -- EF(γ) ---------------------------------------------------------------------------------------

def test_state_dict_carries_ef_gamma():
    model, opt = _make("muon", 0, delay=1, correction="ef", ef_gamma=[0.3, 2.0])
    for _ in range(3):
        _train_step(model, opt)
    sd = opt.state_dict()
    assert sd["config"]["ef_gamma"] == [0.3, 2.0]
    _, other = _make("muon", 0, delay=1, correction="ef", ef_gamma=[0.3, 2.1])
    with pytest.raises(ValueError, match="ef_gamma"):
        other.load_state_dict(sd)


def test_old_checkpoint_without_ef_gamma_loads_as_gamma_one():
    model, opt = _make("adamw", 0, delay=1, correction="ef")
    for _ in range(3):
        _train_step(model, opt)
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    del sd["config"]["ef_gamma"]  # a checkpoint written before EF(γ) existed
    model2, opt2 = _make("adamw", 0, delay=1, correction="ef", ef_gamma=1.0)
    model2.load_state_dict(model.state_dict())
    opt2.load_state_dict(sd)
    for _ in range(3):
        _train_step(model, opt)
        _train_step(model2, opt2)
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)
    _, opt3 = _make("adamw", 0, delay=1, correction="ef", ef_gamma=2.0)
    with pytest.raises(ValueError, match="ef_gamma"):
        opt3.load_state_dict(sd)


@pytest.mark.parametrize("gamma,match", [
    (-0.5, r"ef_gamma must be a finite number >= 0.*-0\.5"),
    (math.nan, r"finite number >= 0.*nan"),
    (math.inf, r"finite number >= 0.*inf"),
    (True, r"finite number >= 0.*True"),
    ("fast", r"or 'auto'; got 'fast'"),
    ([1.0, 2.0], r"2 per-group ef_gamma values for 1 parameter groups"),
    ([None], r"finite number >= 0.*None"),
])
def test_bad_ef_gamma(gamma, match):
    with pytest.raises(ValueError, match=match):
        DelayedOptimizer(_sgd(), correction="ef", ef_gamma=gamma)


def test_ef_gamma_needs_ef():
    for corr in ("none", "taylor"):
        with pytest.raises(ValueError, match="applies only to correction='ef'"):
            DelayedOptimizer(_sgd(), correction=corr, ef_gamma=2.0)
        with pytest.raises(ValueError, match="applies only to correction='ef'"):
            DelayedOptimizer(_sgd(), correction=corr, ef_gamma="auto")
        DelayedOptimizer(_sgd(), correction=corr, ef_gamma=1.0)  # the default is accepted


def test_ef_gamma_auto_needs_a_beta():
    class Bare(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": 0.1})

        def step(self, closure=None):
            return None

    with pytest.raises(ValueError, match="'momentum' or 'betas'"):
        DelayedOptimizer(Bare([torch.nn.Parameter(torch.zeros(2))]), correction="ef",
                         ef_gamma="auto")
