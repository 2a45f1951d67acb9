"""The runtime's own work per action, counted rather than timed: a steady-state step of a
one-stage executor runs the model's tensor operations plus a fixed, itemised few of its own,
walks no module tree per forward, and makes a bounded number of Python calls per action —
and what it computes is, bit for bit, what plain training of the same microbatches computes.

Counts are exact for a given torch: nothing here depends on timing or load."""

from __future__ import annotations

import collections
import gc
import sys

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from asyncpp.delay import DelayedOptimizer
from asyncpp.optim import build_optimizer
from asyncpp.pipeline import (
    ExecutorOptions,
    PipelineExecutor,
    StageModule,
    build_stage,
    stage_delay,
)

D = 6
mse = nn.functional.mse_loss


def layers(dtype=torch.float64):
    torch.manual_seed(0)
    return [(f"blocks.{i}", nn.Sequential(nn.Linear(D, D, dtype=dtype), nn.Tanh()))
            for i in range(3)]


def batches(n, rows, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(rows, D, generator=g, dtype=dtype),
             torch.randn(rows, D, generator=g, dtype=dtype)) for _ in range(n)]


def executor(schedule, m, dtype=torch.float64, **options):
    stage = build_stage(layers(dtype), 0, 1)
    dopt = DelayedOptimizer(build_optimizer("adamw", stage.named_parameters(), lr=0.01),
                            delay=stage_delay(schedule, 1, 0))
    return PipelineExecutor(stage, dopt, schedule=schedule, num_microbatches=m, loss_fn=mse,
                            options=ExecutorOptions(**options))


class AtenOps(TorchDispatchMode):
    """Counts every tensor operation dispatched while active, by name."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "aten":
            self.count[func.__name__.split(".")[0]] += 1
        return func(*args, **(kwargs or {}))


def python_calls(fn) -> collections.Counter:
    """Python function calls made while ``fn()`` runs, by (file, function); the collector is
    off so that no finalizer of an unrelated object runs inside the window."""
    calls = collections.Counter()

    def hook(frame, event, arg):
        if event == "call":
            code = frame.f_code
            calls[(code.co_filename.replace("\\", "/"), code.co_name)] += 1

    gc.collect()
    gc.disable()
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return calls


def steady_steps(ex, data, steps):
    """``steps`` steps after the two warm-up steps ``ex`` has run (one call, no drain inside)."""
    return lambda: list(ex.run_steps(iter(data[2:2 + steps]), steps))


SCHEDULES = ["1f1b", "gpipe", "2bw", "pipedream"]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_forward_walks_no_module_tree(schedule):
    """Running the stage on a version's weights resolves the parameter slots once, not per
    microbatch (``functional_call`` walks the tree twice per call)."""
    m, data = 4, batches(6, 8)
    ex = executor(schedule, m)
    ex.train_steps(data[:2])
    calls = python_calls(steady_steps(ex, data, 3))
    walks = {k: n for k, n in calls.items()
             if k[0].endswith(("torch/nn/utils/stateless.py",
                               "torch/nn/utils/_named_member_accessor.py"))
             or k[1] in ("named_modules", "named_parameters", "_named_members")}
    assert not walks, f"per-step module walks: {walks}"


@pytest.mark.parametrize("schedule", ["1f1b", "2bw"])
def test_python_calls_per_action_are_bounded(schedule):
    """All Python calls of a steady-state step — the runtime's, the module's ``__call__`` and
    the optimizer's — per action of the program (m forwards, m backwards, one update per step
    here): at most 110 (96 and 101 for 1F1B and 2BW with torch 2.13; 192 and 196 when every
    forward went through ``functional_call``). A new per-action cost shows up here first."""
    m, steps, data = 4, 3, batches(6, 8)
    ex = executor(schedule, m)
    ex.train_steps(data[:2])
    calls = python_calls(steady_steps(ex, data, steps))
    actions = steps * (2 * m + 1)
    per_action = sum(calls.values()) / actions
    top = ", ".join(f"{f.rsplit('/', 1)[-1]}:{n} ×{c}" for (f, n), c in calls.most_common(6))
    assert per_action <= 110, f"{per_action:.1f} Python calls per action (most: {top})"


def plain_ops(m, steps, data):
    """Tensor operations per step of plain training on the same microbatches: each one's
    loss backwarded, then the optimizer's step."""
    model = StageModule(layers())
    opt = DelayedOptimizer(build_optimizer("adamw", model.named_parameters(), lr=0.01), delay=0)

    def step(x, y):
        for xm, ym in zip(torch.tensor_split(x, m), torch.tensor_split(y, m)):
            mse(model(xm), ym).backward()
        opt.step()
        opt.zero_grad()

    step(*data[0])
    with AtenOps() as ops:
        for x, y in data[1:1 + steps]:
            step(x, y)
    return ops.count


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "2bw"])
def test_tensor_ops_beyond_plain_training_are_itemised(schedule):
    """Per step, the executor's tensor operations beyond plain training's are at most:
    2 per weight for the step's leaves (an empty tensor set onto the version's storage);
    none for the new version when the update runs in place (1F1B, GPipe: the replaced
    version's aliases carry over), else 3 per weight for its aliases (detach, empty, set)
    and n + 1 for moving the master to a spare buffer (2BW: each master read, one fused
    copy); and for the loss: per microbatch its float64 copy's detach and 1/m product, per
    microbatch but the first the sum — minus the ``ones_like`` seed plain training makes per
    microbatch, which the executor makes once. Before, each microbatch also paid
    ``loss * scale`` forward and backward and a reshape, and each update fresh aliases."""
    m, steps, data = 4, 3, batches(6, 8)
    ex = executor(schedule, m, track_grad_norm=False)
    ex.train_steps(data[:2])
    with AtenOps() as ops:
        steady_steps(ex, data, steps)()
    plain = plain_ops(m, steps, data)
    n = sum(1 for _ in ex.stage.parameters())
    extra = (sum(ops.count.values()) - sum(plain.values())) / steps
    budget = 2 * n + (4 * n + 1 if schedule == "2bw" else 0) + 2 * m + (m - 1) - m
    diff = {k: (ops.count[k] - plain[k]) / steps for k in set(ops.count) | set(plain)
            if ops.count[k] != plain[k]}
    assert extra <= budget, f"{extra} extra tensor ops per step (budget {budget}): {diff}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_gradient_equals_plain_training_bit_for_bit(schedule, dtype):
    """The first update's gradient equals plain training's — each microbatch's loss times
    1/m backwarded, in order — exactly, with m = 3 so that 1/m rounds: the cached seed
    ``ones · (1/m)`` and the weights put into the module's slots change no bit."""
    m, data = 3, batches(1, 9, dtype)
    got = {}
    ex = executor(schedule, m, dtype, on_gradients=lambda u, g: got.setdefault(
        u, {k: v.clone() for k, v in g.items()}))
    ex.train_steps(data)
    model = StageModule(layers(dtype))
    x, y = data[0]
    for xm, ym in zip(torch.tensor_split(x, m), torch.tensor_split(y, m)):
        (mse(model(xm), ym) * (1.0 / m)).backward()
    want = dict(model.named_parameters())
    assert set(got[0]) == set(want)
    for k, g in got[0].items():
        assert torch.equal(g, want[k].grad), k


class Tied(nn.Module):
    """Embedding and head sharing one weight, a bias-free layer, a buffer, and a switch that
    makes the call raise half-way."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 4, dtype=torch.float64)
        self.mid = nn.Linear(4, 4, bias=False, dtype=torch.float64)
        self.head = nn.Linear(4, 5, dtype=torch.float64)
        self.head.weight = self.emb.weight
        self.register_buffer("shift", torch.full((4,), 0.5, dtype=torch.float64))
        self.fail = False

    def forward(self, ids):
        h = self.mid(self.emb(ids) + self.shift)
        if self.fail:
            raise RuntimeError("stop")
        return self.head(h)


def test_on_weights_is_functional_call_with_its_slots_found_once():
    """Same output and gradients as ``functional_call`` — the tied head reads the embedding's
    tensor, the buffer stays the module's — and the module's own parameters are back after
    the call, also when it raises."""
    from torch.func import functional_call

    from asyncpp.pipeline.runtime.on_weights import OnWeights

    torch.manual_seed(0)
    mod = Tied()
    own = dict(mod.named_parameters(remove_duplicate=False))
    assert set(dict(mod.named_parameters())) == {"emb.weight", "mid.weight", "head.bias"}
    ids = torch.tensor([[0, 3, 4], [1, 1, 2]])
    grads = []
    for call in (lambda w: functional_call(mod, w, (ids,)), lambda w: OnWeights(mod)(w, (ids,))):
        w = {n: (p.detach() * 1.5).requires_grad_(True) for n, p in mod.named_parameters()}
        out = call(w)
        out.pow(2).sum().backward()
        grads.append((out.detach(), {n: t.grad for n, t in w.items()}))
    (o1, g1), (o2, g2) = grads
    assert torch.equal(o1, o2)
    assert g1.keys() == g2.keys() and all(torch.equal(g1[n], g2[n]) for n in g1)
    mod.fail = True
    with pytest.raises(RuntimeError, match="stop"):
        OnWeights(mod)({n: p.detach() * 2 for n, p in mod.named_parameters()}, (ids,))
    assert dict(mod.named_parameters(remove_duplicate=False)) == own
    assert all(type(p) is nn.Parameter for p in own.values())
