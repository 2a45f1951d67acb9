"""The executor in one process (P = 1, no process group): the weight-version machinery, the
delay core and checkpoints, against ``DelayedOptimizer`` — plus partitioning and errors."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from asyncpp.delay import DelayedOptimizer
from asyncpp.optim import build_optimizer
from asyncpp.pipeline import (
    ExecutorOptions,
    PipelineExecutor,
    StageModule,
    balanced_boundaries,
    build_stage,
    build_stages,
    partition,
    stage_delay,
)

D = 6
mse = nn.functional.mse_loss


def layers(seed=0):
    torch.manual_seed(seed)
    return [(f"blocks.{i}", nn.Sequential(nn.Linear(D, D, dtype=torch.float64), nn.Tanh()))
            for i in range(3)]


def batches(n=8, rows=8):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(rows, D, generator=g, dtype=torch.float64),
             torch.randn(rows, D, generator=g, dtype=torch.float64)) for _ in range(n)]


def reference(schedule, optname, hp, m, data, **dkw):
    model = StageModule(layers())
    delay = {"2bw": 1, "pipedream": 0}.get(schedule, 0)
    dopt = DelayedOptimizer(build_optimizer(optname, model.named_parameters(), **hp),
                            delay=delay, **dkw)
    losses = []
    for x, y in data:
        if schedule == "pipedream":  # P = 1: delay 0, one step per microbatch
            tot = 0.0
            for xm, ym in zip(torch.tensor_split(x, m), torch.tensor_split(y, m)):
                loss = mse(model(xm), ym)
                loss.backward()
                dopt.step()
                dopt.zero_grad()
                tot += loss.item() / m
            losses.append(tot)
            continue
        loss = mse(model(x), y)
        loss.backward()
        dopt.step()
        dopt.zero_grad()
        losses.append(loss.item())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    dopt.flush()
    return losses, before, dict(model.named_parameters())


def executor(schedule, optname, hp, m, **dkw):
    stage = build_stage(layers(), 0, 1)
    opt = build_optimizer(optname, stage.named_parameters(), **hp)
    dopt = DelayedOptimizer(opt, delay=stage_delay(schedule, 1, 0), **dkw)
    return PipelineExecutor(stage, dopt, schedule=schedule, num_microbatches=m, loss_fn=mse)


@pytest.mark.parametrize("schedule", ["2bw", "gpipe", "1f1b", "pipedream"])
@pytest.mark.parametrize("optname, hp, dkw", [
    ("muon", dict(lr=0.02, ns_dtype="float64"), dict(correction="ef")),
    ("adamw", dict(lr=0.01, weight_decay=0.1), dict(correction="taylor", taylor_lambda=3.0)),
])
def test_single_stage_equals_delayed_optimizer(schedule, optname, hp, dkw):
    data = batches()
    losses_ref, before, after = reference(schedule, optname, hp, 4, data, **dkw)
    ex = executor(schedule, optname, hp, 4, **dkw)
    losses = ex.train_steps(data[:3]) + ex.train_steps(data[3:])
    assert max(abs(a - b) for a, b in zip(losses, losses_ref)) < 1e-12
    w = ex.weights()
    for n, p in ex.stage.named_parameters():
        assert torch.allclose(w[n], before[n], atol=1e-12, rtol=0)
        assert torch.allclose(p.detach(), after[n].detach(), atol=1e-12, rtol=0)
    held = 2 if schedule == "2bw" else 1
    assert len(ex.live_versions()) == held


def test_2bw_keeps_versions_as_separate_storage():
    ex = executor("2bw", "adamw", dict(lr=0.1), 2)
    ex.train_steps(batches(3))
    v_old, v_new = ex.live_versions()
    a, b = ex.weights(v_old), ex.weights(v_new)
    name = next(iter(a))
    assert a[name].untyped_storage().data_ptr() != b[name].untyped_storage().data_ptr()
    p = dict(ex.stage.named_parameters())[name]
    assert b[name].untyped_storage().data_ptr() == p.untyped_storage().data_ptr()
    assert not torch.equal(a[name], b[name])


def test_sync_windows_and_checkpoint_round_trip():
    data = batches(10)
    dkw = dict(correction="ef", sync_start=2, sync_cooldown=2, total_steps=10)
    hp = dict(lr=0.02, ns_dtype="float64")
    losses_ref, before, after = reference("2bw", "muon", hp, 2, data, **dkw)
    ex = executor("2bw", "muon", hp, 2, **dkw)
    ex.train_steps(data[:4])
    buf = io.BytesIO()
    torch.save(ex.state_dict(), buf)
    buf.seek(0)
    ex2 = executor("2bw", "muon", hp, 2, **dkw)
    ex2.load_state_dict(torch.load(buf, weights_only=True))
    assert ex2.next_step == 4 and ex2.live_versions() == ex.live_versions()
    losses = ex2.train_steps(data[4:])
    assert max(abs(a - b) for a, b in zip(losses, losses_ref[4:])) < 1e-12
    for n, p in ex2.stage.named_parameters():
        assert torch.allclose(p.detach(), after[n].detach(), atol=1e-12, rtol=0)
    wrong = executor("gpipe", "muon", hp, 2)
    buf.seek(0)
    with pytest.raises(ValueError, match="checkpoint is for"):
        wrong.load_state_dict(torch.load(buf, weights_only=True))


def test_evaluate_and_callback():
    seen = []
    stage = build_stage(layers(), 0, 1)
    ex = PipelineExecutor(stage, torch.optim.SGD(stage.parameters(), lr=0.1), schedule="gpipe",
                          num_microbatches=2, loss_fn=mse,
                          options=ExecutorOptions(max_grad_norm=0.05,
                                                  on_gradients=lambda u, g: seen.append(u)))
    data = batches(3)
    ex.train_steps(data)
    assert seen == [0, 1, 2] and ex.last_grad_norm is not None
    with torch.no_grad():
        want = [float(mse(stage(x), y)) for x, y in data]
    assert ex.evaluate(data) == pytest.approx(want, abs=1e-12)


def test_executor_errors():
    stage = build_stage(layers(), 0, 1)
    opt = build_optimizer("adamw", stage.named_parameters(), lr=0.1)
    with pytest.raises(ValueError, match="unknown pipeline schedule"):
        PipelineExecutor(stage, opt, schedule="zb", num_microbatches=2)
    with pytest.raises(ValueError, match="delay=1"):
        PipelineExecutor(stage, DelayedOptimizer(opt, delay=2), schedule="2bw",
                         num_microbatches=2)
    with pytest.raises(ValueError, match="formulation='gradient'"):
        PipelineExecutor(stage, DelayedOptimizer(opt, delay=1, formulation="update"),
                         schedule="2bw", num_microbatches=2)
    other = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="not in this stage"):
        PipelineExecutor(stage, torch.optim.SGD(other.parameters(), lr=1), schedule="gpipe",
                         num_microbatches=2)
    with pytest.raises(ValueError, match="needs a process group"):
        PipelineExecutor(stage, opt, schedule="2bw", num_microbatches=2,
                         options=ExecutorOptions(num_stages=2))
    ex = PipelineExecutor(stage, opt, schedule="2bw", num_microbatches=3, loss_fn=mse)
    with pytest.raises(ValueError, match="divisible by 3"):
        ex.train_steps(batches(1, rows=8))
    with pytest.raises(ValueError, match="pair"):
        ex.train_steps([torch.zeros(3, D)])


def test_partition_balanced_explicit_and_tied():
    torch.manual_seed(0)
    emb = nn.Embedding(50, 4)
    head = nn.Linear(4, 50, bias=False)
    head.weight = emb.weight
    ls = [("embed", emb), *[(f"layers.{i}", nn.Linear(4, 4)) for i in range(6)],
          ("norm", nn.LayerNorm(4)), ("head", head)]
    # Balanced by parameter count: the 200-parameter embedding and head sit alone.
    assert [list(r) for r in partition(ls, 3)] == [[0], [1, 2, 3, 4, 5, 6, 7], [8]]
    assert [list(r) for r in partition(ls, 3, balance="layers")] == [[0, 1, 2], [3, 4, 5],
                                                                    [6, 7, 8]]
    assert [list(r) for r in partition(ls, 2, boundaries=[4])] == [[0, 1, 2, 3],
                                                                 [4, 5, 6, 7, 8]]
    assert balanced_boundaries([1, 1, 1, 10], 2) == [0, 3, 4]
    stages = build_stages(ls, 2, boundaries=[4])
    assert stages[0].tied_parameters == {"embed.weight": "embed.weight"}
    assert stages[1].tied_parameters == {"head.weight": "embed.weight"}
    names = [n for n, _ in stages[1].named_parameters()]
    assert names[0] == "layers.3.weight" and names[-1] == "head.weight"
    x = torch.randint(0, 50, (2, 3))
    ref = head(ls[7][1](ls[6][1](ls[5][1](ls[4][1](ls[3][1](ls[2][1](ls[1][1](emb(x)))))))))
    assert torch.equal(stages[1](stages[0](x)), ref)
    with pytest.raises(ValueError, match="at most 9 stages"):
        partition(ls, 10)
    with pytest.raises(ValueError, match="boundaries"):
        partition(ls, 2, boundaries=[0])
    with pytest.raises(ValueError, match="unknown balance"):
        partition(ls, 2, balance="flops")
