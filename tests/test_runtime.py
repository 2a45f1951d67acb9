"""The runtime's hot path, in one process: the retired weight version's buffer is reused (no
clone per update in steady state), the gradient norm is computed only when read, and the
results do not change."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from asyncpp.delay import DelayedOptimizer
from asyncpp.pipeline import ExecutorOptions, PipelineExecutor, build_stage, stage_delay

D = 6


def _layers(seed=0):
    torch.manual_seed(seed)
    return [(f"blocks.{i}", nn.Sequential(nn.Linear(D, D, dtype=torch.float64), nn.Tanh()))
            for i in range(3)]


def _batches(n=8, rows=8):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(rows, D, generator=g, dtype=torch.float64),
             torch.randn(rows, D, generator=g, dtype=torch.float64)) for _ in range(n)]


def _executor(schedule="2bw", m=2, **kw):
    stage = build_stage(_layers(), 0, 1)
    opt = torch.optim.AdamW(stage.parameters(), lr=0.01)
    dopt = DelayedOptimizer(opt, delay=stage_delay(schedule, 1, 0))
    return PipelineExecutor(stage, dopt, schedule=schedule, num_microbatches=m,
                            loss_fn=nn.functional.mse_loss, **kw)


@pytest.fixture
def clones(monkeypatch):
    """Counts ``Tensor.clone`` calls made from the runtime's stage context."""
    count = {"n": 0}
    orig = torch.Tensor.clone

    def clone(self, *a, **k):
        if "pipeline/runtime/context.py" in sys._getframe(1).f_code.co_filename:
            count["n"] += 1
        return orig(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "clone", clone)
    return count


def test_2bw_reuses_the_retired_version_buffer(clones):
    ex = _executor()
    n_params = len(list(ex.stage.parameters()))
    for b in _batches(8):  # one call per step: every update keeps the version it replaces
        ex.train_steps([b])
    # only the first copy of the master allocates; later ones reuse the retired version
    assert clones["n"] == n_params
    assert len(ex.live_versions()) == 2


def test_results_do_not_depend_on_buffer_reuse_or_the_norm(clones, monkeypatch):
    data = _batches(8)
    a = _executor()
    ref = [a.train_steps([b])[0] for b in data]
    from asyncpp.pipeline.runtime import context

    monkeypatch.setattr(context.StageContext, "retire",
                        lambda self, v: self.versions.pop(v))  # never a spare: always a clone
    b = _executor(options=ExecutorOptions(track_grad_norm=False))
    got = []
    for x in data:
        outs = list(b.run_steps([x], 1))
        assert outs[0].grad_sq is None
        got.append(float(outs[0].loss))
    assert got == ref
    assert all(torch.equal(p, q) for p, q in zip(a.stage.parameters(), b.stage.parameters()))
    assert all(torch.equal(a.weights()[n], b.weights()[n]) for n in a.weights())


def test_the_norm_is_computed_when_clipping_reads_it():
    ex = _executor(options=ExecutorOptions(track_grad_norm=False, max_grad_norm=0.1))
    outs = list(ex.run_steps(_batches(3), 3))
    assert all(o.grad_sq is not None and o.grad_sq.shape == (1,) for o in outs)
    assert ex.last_grad_norm is not None and ex.last_grad_norm > 0
