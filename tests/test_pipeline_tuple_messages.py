"""Stages that pass a tuple of tensors (hidden states, position ids, a constant): the
schedules train exactly as with the whole model on one stage, in one process with several
stages and across two torchrun ranks, and the packing of a tuple message is lossless."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import tuple_model as tm
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncpp.optim import build_optimizer
from asyncpp.pipeline import PipelineExecutor, build_stages
from asyncpp.pipeline.runtime import messages

HERE = Path(__file__).parent

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool,
          torch.uint8]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(DTYPES),
                          st.lists(st.integers(0, 4), min_size=0, max_size=3)),
                min_size=1, max_size=5), st.booleans())
def test_pack_and_unpack_are_inverse(parts, as_dict):
    g = torch.Generator().manual_seed(0)
    msg = tuple((torch.randint(0, 2, s, generator=g).bool() if d is torch.bool else
                 (torch.randn(s, generator=g) * 100).to(d)) for d, s in parts)
    if as_dict:
        msg = {f"k{len(parts) - i}": t for i, t in enumerate(msg)}
    layout = messages.Layout.of(msg)
    buf = messages.pack(msg)
    assert buf.dtype == torch.uint8 and buf.numel() == layout.nbytes()
    back = messages.unpack(buf.clone(), layout)
    assert type(back) is type(msg) and len(back) == len(msg)
    if as_dict:
        assert list(back) == list(msg)
        msg, back = tuple(msg.values()), tuple(back.values())
    for a, b in zip(msg, back):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_the_header_carries_a_dicts_keys():
    from asyncpp.pipeline.runtime.transport import _key_text, _key_words

    for key in ("h", "position_ids", "attention_mask", "é", "x" * 32):
        assert _key_text(_key_words(key)) == key
    with pytest.raises(ValueError, match="at most 32 bytes"):
        _key_words("x" * 33)


def test_a_single_tensor_is_its_own_message():
    x = torch.randn(3, 4)
    assert messages.pack(x) is x or torch.equal(messages.pack(x), x)
    assert messages.unpack(x, messages.Layout.of(x)) is x


def train(schedule: str, P: int, m: int, optname: str = "adamw", steps: int = 4,
          as_dict: bool = False):
    """All P stages in this process (placement [[0..P-1]])."""
    mods = build_stages(tm.layers(4, as_dict=as_dict), P)
    stages = dict(enumerate(mods))
    hp = dict(lr=0.01, betas=(0.9, 0.95), weight_decay=0.1) if optname == "adamw" else \
        dict(lr=0.02, momentum=0.9, ns_dtype="float64", adamw_lr=0.01)
    opts = {s: build_optimizer(optname, mod.named_parameters(), **hp)
            for s, mod in stages.items()}
    ex = PipelineExecutor(stages, opts, schedule=schedule, num_microbatches=m,
                          loss_fn=tm.loss, placement=[list(range(P))])
    losses = ex.train_steps(tm.batches(steps))
    weights = {n: p.detach().clone() for mod in stages.values()
               for n, p in mod.named_parameters()}
    return losses, weights, ex


@pytest.mark.parametrize("schedule,optname,as_dict", [
    ("1f1b", "adamw", False), ("zb-h1", "muon", False), ("gpipe", "muon", False),
    ("1f1b", "muon", True), ("zb-h1", "adamw", True)])
def test_tuple_stages_train_as_one_stage(schedule, optname, as_dict):
    l1, w1, _ = train("1f1b", 1, 2, optname)  # the same model: dicts or tuples, one stage
    lp, wp, ex = train(schedule, 3, 2, optname, as_dict=as_dict)
    assert lp == l1
    assert w1.keys() == wp.keys()
    for k in w1:
        assert torch.equal(w1[k], wp[k]), k
    _, w0, _ = train("1f1b", 1, 2, optname, steps=1)
    assert any(not torch.equal(w0[k], w1[k]) for k in w1)  # the weights moved
    # evaluation passes tuples between the stages too
    ev = ex.evaluate(tm.batches(2))
    assert len(ev) == 2 and all(v > 0 for v in ev)


def test_a_stage_that_returns_no_floating_tensor_is_named():
    from torch import nn

    class IdsOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1, dtype=torch.float64))

        def forward(self, h, pos, scale):
            return (pos,)

    layers = tm.layers(1)
    layers.insert(2, ("ids", IdsOnly()))
    mods = build_stages(layers, 2, boundaries=[0, 3, 4])
    opts = {s: torch.optim.SGD(mod.parameters(), lr=0.1) for s, mod in enumerate(mods)}
    ex = PipelineExecutor(dict(enumerate(mods)), opts, schedule="1f1b", num_microbatches=1,
                          loss_fn=tm.loss, placement=[[0, 1]])
    with pytest.raises(ValueError, match="at least one floating-point tensor"):
        ex.train_steps(tm.batches(1))


def test_tuple_messages_across_two_torchrun_ranks(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent / "src"),
                                          os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(HERE / "tuple_worker.py"), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        for schedule, dev in got.items():
            assert dev["loss"] == 0.0 and dev["weights"] == 0.0, (r, schedule, dev)
            assert dev["moved"], (r, schedule)
