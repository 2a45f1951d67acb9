"""The backward split into its input and weight halves, and the zero-bubble schedule ZB-H1 on
it: valid programs, a shorter simulated pipeline than 1F1B, training bit-equal to 1F1B (the
same math, float64, every stage of the pipeline on one process), and a weight half that does
not walk the graph a second time."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from asyncpp.optim import build_optimizer
from asyncpp.pipeline import PipelineExecutor, build, build_stages, simulate
from asyncpp.pipeline.actions import BackwardInput, BackwardWeight, from_str, kind_of, to_str
from asyncpp.pipeline.simulator import default_devices, simulate_devices

D, ROWS = 6, 8


@settings(max_examples=40, deadline=None)
@given(P=st.integers(1, 6), m=st.integers(1, 9), steps=st.integers(1, 3))
def test_zb_h1_programs_are_valid_and_split_every_backward(P, m, steps):
    sched = build("zb-h1", P, m, steps)  # build() runs check(): messages, order, versions
    for s, acts in enumerate(sched.actions):
        kinds = [kind_of(a) for a in acts if kind_of(a) in "FBIW"]
        assert kinds.count("F") == kinds.count("I") == kinds.count("W") == m * steps
        assert "B" not in kinds
        halves = [(a.step, a.mb) for a in acts if isinstance(a, BackwardWeight)]
        assert halves == sorted(halves)  # weight halves in microbatch order: same sums
        for a in acts:
            assert from_str(to_str(a, s)) == (a if a.stage is not None else a)


def test_the_text_form_of_the_halves():
    assert to_str(BackwardInput(2, 3, 1, stage=1)) == "1I2.3@v1"
    assert from_str("0W2.3@v1") == BackwardWeight(2, 3, 1, stage=0)


def test_check_rejects_a_weight_half_before_its_input_half():
    sched = build("zb-h1", 2, 2)
    acts = list(sched.actions[1])
    i = next(k for k, a in enumerate(acts) if isinstance(a, BackwardInput))
    w = next(k for k, a in enumerate(acts) if isinstance(a, BackwardWeight))
    acts[i], acts[w] = acts[w], acts[i]
    bad = type(sched)(sched.name, 2, 2, 1, 0, (sched.actions[0], tuple(acts)),
                      sched.next_versions)
    with pytest.raises(ValueError, match="weight half of .* without its input half"):
        bad.check()


@pytest.mark.parametrize("P,m", [(2, 2), (4, 4), (4, 8), (8, 8)])
def test_zb_h1_is_shorter_than_1f1b_when_the_backward_is_twice_the_forward(P, m):
    one = simulate(build("1f1b", P, m, 2), t_forward=1, t_backward=2)
    zb = simulate(build("zb-h1", P, m, 2), t_forward=1, t_backward=2)
    assert zb.makespan < one.makespan
    assert sum(zb.busy) == pytest.approx(sum(one.busy))  # same work, less idle time


@pytest.mark.parametrize("R,m", [(2, 4), (4, 8), (4, 16)])
def test_zb_v_on_r_devices_is_shorter_than_zb_h1_and_1f1b(R, m):
    """ZB-V's 2R half-size stages in a V on R devices against ZB-H1 and 1F1B on R stages."""
    one = simulate(build("1f1b", R, m, 2), t_forward=1, t_backward=2)
    h1 = simulate(build("zb-h1", R, m, 2), t_forward=1, t_backward=2)
    sched = build("zb-v", 2 * R, m, 2)
    assert default_devices(sched) == [[d, 2 * R - 1 - d] for d in range(R)]
    v = simulate_devices(sched, default_devices(sched), t_forward=0.5, t_backward=1)
    assert v.makespan < h1.makespan < one.makespan


@given(P=st.integers(2, 6), m=st.integers(2, 8), w=st.floats(0.0, 2.0))
@settings(max_examples=40, deadline=None)
def test_a_measured_weight_part_moves_time_between_the_halves_not_the_work(P, m, w):
    """t_weight splits one backward (t_b = 2) into t_b − t_w and t_w: the work done is the
    same at every split, and ZB-H1's steady step lies between the work m(t_f + t_b) and
    1F1B's; at the published bubble (P − 1)(t_f + t_b − t_w) or below (with no update to
    wait for, a stage's next forward may start before its neighbour's last weight half; the
    exact published step, with an update, is checked in the at-scale benchmark's test)."""
    a = simulate_devices(build("zb-h1", P, m, 2), None, t_forward=1, t_backward=2, t_weight=w,
                         weight_memory=False)
    b = simulate_devices(build("zb-h1", P, m, 3), None, t_forward=1, t_backward=2, t_weight=w,
                         weight_memory=False)
    one = simulate(build("1f1b", P, m, 2), t_forward=1, t_backward=2)
    assert sum(a.busy) == pytest.approx(sum(one.busy))
    one_b = simulate(build("1f1b", P, m, 3), t_forward=1, t_backward=2)
    step = b.makespan - a.makespan
    assert m * 3 - 1e-9 <= step <= m * 3 + (P - 1) * (3 - w) + 1e-9
    assert step <= one_b.makespan - one.makespan + 1e-9


def test_a_weight_part_outside_the_backward_is_refused():
    with pytest.raises(ValueError, match="t_weight must lie in"):
        simulate_devices(build("zb-h1", 2, 2, 1), None, t_backward=2, t_weight=2.5)


def test_zb_v_needs_an_even_number_of_stages():
    with pytest.raises(ValueError, match="two per device in a V"):
        build("zb-v", 3, 4)


def _mlp(P, seed=0):
    torch.manual_seed(seed)
    layers = []
    for j in range(2 * P):
        lin = nn.Linear(D, D, dtype=torch.float64)
        layers.append((f"blocks.{j}", nn.Sequential(lin, nn.Tanh())))
    return layers


def _train(schedule, P, m, steps=4, optname="adamw"):
    """All P stages on one process (placement [[0..P-1]]); returns losses and weights."""
    mods = build_stages(_mlp(P), P)
    stages = dict(enumerate(mods))
    hp = dict(lr=0.01, betas=(0.9, 0.95), weight_decay=0.1) if optname == "adamw" else \
        dict(lr=0.02, momentum=0.9, ns_dtype="float64", adamw_lr=0.01)
    opts = {s: build_optimizer(optname, mod.named_parameters(), **hp) for s, mod in stages.items()}
    ex = PipelineExecutor(stages, opts, schedule=schedule, num_microbatches=m,
                          loss_fn=nn.functional.mse_loss, placement=[list(range(P))])
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(ROWS, D, generator=g, dtype=torch.float64),
                torch.randn(ROWS, D, generator=g, dtype=torch.float64)) for _ in range(steps)]
    losses = ex.train_steps(batches)
    weights = {f"{s}.{n}": p.detach().clone() for s, mod in stages.items()
               for n, p in mod.named_parameters()}
    return losses, weights


@pytest.mark.parametrize("schedule,P,m,optname", [
    ("zb-h1", 2, 2, "adamw"), ("zb-h1", 3, 4, "muon"), ("zb-h1", 4, 8, "adamw"),
    ("zb-v", 4, 4, "adamw"), ("zb-v", 4, 8, "muon")])
def test_zero_bubble_trains_bit_equal_to_1f1b(schedule, P, m, optname):
    l1, w1 = _train("1f1b", P, m, optname=optname)
    lz, wz = _train(schedule, P, m, optname=optname)
    assert lz == l1
    assert w1.keys() == wz.keys()
    for k in w1:
        assert torch.equal(w1[k], wz[k]), k
    # not vacuous: the weights moved
    _, w0 = _train("1f1b", P, m, steps=1, optname=optname)
    assert any(not torch.equal(w0[k], w1[k]) for k in w1)


class _CountingTanh(torch.autograd.Function):
    calls = 0

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        _CountingTanh.calls += 1
        (y,) = ctx.saved_tensors
        return g * (1 - y * y)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D, dtype=torch.float64)

    def forward(self, x):
        return _CountingTanh.apply(self.lin(x))


def test_the_weight_half_does_not_walk_the_graph_again():
    """Every activation's backward runs once per microbatch with the split, as without it
    (a weight half that re-ran the backward from the output would run them twice)."""
    P, m = 2, 4
    torch.manual_seed(0)
    layers = [(f"b{j}", _Block()) for j in range(4)]
    stages = dict(enumerate(build_stages(layers, P)))
    opts = {s: torch.optim.SGD(mod.parameters(), lr=0.1) for s, mod in stages.items()}
    ex = PipelineExecutor(stages, opts, schedule="zb-h1", num_microbatches=m,
                          loss_fn=nn.functional.mse_loss, placement=[[0, 1]])
    x = torch.randn(ROWS, D, dtype=torch.float64)
    _CountingTanh.calls = 0
    ex.train_steps([(x, torch.zeros_like(x))])
    # the first stage's input needs no gradient: its first block's tanh still needs one
    assert _CountingTanh.calls == 4 * m


class _MatmulFlops(TorchDispatchMode):
    """Counts the floating-point operations of every matrix product run under it."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.mm.default:
            a, b = args[0], args[1]
        elif func is torch.ops.aten.addmm.default:
            a, b = args[1], args[2]
        else:
            return out
        self.flops += 2 * a.shape[0] * a.shape[1] * b.shape[1]
        return out


@pytest.mark.parametrize("P,m", [(2, 4), (3, 4)])
def test_the_split_backward_does_the_matrix_products_of_one_backward(P, m):
    """ZB-H1 runs exactly 1F1B's matrix products: the weight half computes only the weight
    products (a re-walk from the output would add the hidden layers' input products again)."""
    counts = {}
    for name in ("1f1b", "zb-h1"):
        with _MatmulFlops() as mode:
            _train(name, P, m, steps=1)
        counts[name] = mode.flops
    assert counts["zb-h1"] == counts["1f1b"] > 0


TRAIN_ARGS = ["--model.name", "tiny", "--data.max_documents", "60", "--data.seq_len", "16",
              "--train.steps", "3", "--train.batch_size", "4", "--train.eval_every", "3",
              "--train.eval_batches", "1", "--optimizer.name", "adamw", "--optimizer.lr",
              "0.01", "--pipeline.stages", "2", "--pipeline.microbatches", "2",
              "--run.threads", "1", "--log.progress", "false", "--log.plot", "false",
              "--log.tensorboard", "off"]


@pytest.mark.multiprocess
def test_zb_h1_through_asyncpp_train_on_two_ranks_equals_1f1b(tmp_path):
    """``asyncpp-train --pipeline.schedule zb-h1`` on 2 ranks (started as torchrun starts
    them): every train and validation loss equals the 1F1B run's, bit for bit."""
    import json
    import os
    import sys
    from pathlib import Path

    from asyncpp.pipeline.launch import run_ranks

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(os.environ, OMP_NUM_THREADS="1", ASYNCPP_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    losses = {}
    for name in ("1f1b", "zb-h1"):
        run_dir = tmp_path / name
        codes = run_ranks([sys.executable, "-m", "asyncpp.train.cli", *TRAIN_ARGS,
                           "--pipeline.schedule", name, "--run.dir", str(run_dir)], 2,
                          tmp_path / f"logs-{name}", deadline=240, env=env,
                          log_name="rank{rank}.log")
        assert codes == [0, 0], (tmp_path / f"logs-{name}" / "rank0.log").read_text()[-3000:]
        recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        losses[name] = [(r["step"], r["train_loss"], r.get("val_loss"), r.get("grad_norm"))
                        for r in recs]
    assert [r[0] for r in losses["1f1b"]] == [1, 2, 3]
    assert losses["1f1b"][-1][2] is not None  # a validation loss was compared too
    assert losses["zb-h1"] == losses["1f1b"]
