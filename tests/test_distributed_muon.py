"""DistributedMuon: equal to single-process Muon, sharded state, no hang on missing grads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asyncpp.optim.distributed_muon import DistributedMuon, newton_schulz_cost
from asyncpp.optim.muon import Muon

WORKER = Path(__file__).with_name("distributed_muon_worker.py")
WORLD = 2
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Launch the worker on 2 gloo ranks once; return each rank's findings."""
    tmp = tmp_path_factory.mktemp("dmuon")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(r), str(WORLD), str(tmp / "store"), str(tmp)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for r in range(WORLD)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failed = [f"rank {r} (rc {p.returncode}):\n{log}"
              for r, (p, log) in enumerate(zip(procs, logs)) if p.returncode != 0]
    assert not failed, "\n".join(failed)
    return [torch.load(tmp / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]


@pytest.mark.multiprocess
def test_two_ranks_equal_single_process_muon(two_ranks):
    r0, r1 = two_ranks
    n_muon = r0["n_muon"]
    for out in two_ranks:
        # float64 trajectory (12 steps, 2-D and 3-D, missing grads) equals Muon's
        assert out["dev_params"] <= 1e-12
        assert out["dev_continue"] <= 1e-12
        # consolidated state == single-process Muon state; resumes are exact
        assert out["groups_equal"]
        assert out["dev_consolidated"] <= 1e-12
        for name in ("shard", "full", "muon"):
            assert out[f"dev_resume_{name}"] <= 1e-12, name
        assert out["dst_none_on_other"]
        # mixed gradient presence: same clear error on every rank, then training goes on
        assert out["mixed_error"] is not None and "1 of 2 ranks" in out["mixed_error"]
        assert out["after_error_ok"]
        # default bfloat16 Newton–Schulz in float32 matches Muon as well
        assert out["dev_fp32_bf16"] <= 1e-6
    assert r0["mixed_error"] == r1["mixed_error"]
    # replicas bitwise identical
    for a, b in zip(r0["params"], r1["params"]):
        assert torch.equal(a, b)
    # memory: each rank holds momentum only for its own matrices; the shards partition them
    owned0, owned1 = set(r0["owned"]), set(r1["owned"])
    assert owned0.isdisjoint(owned1) and owned0 | owned1 == set(range(n_muon))
    for out in two_ranks:
        assert 0 < out["n_momentum"] == len(out["owned"]) < n_muon
        assert out["n_adamw_state"] == out["n_adamw"]  # AdamW state is replicated
    assert max(r0["loads"]) <= 1.5 * min(r0["loads"])  # balanced by Newton–Schulz FLOPs


def _params(dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=gen, dtype=dtype) for s in [(6, 4), (2, 4, 4), (5,)]]


def _groups(ps):
    return [{"params": ps[:2]}, {"params": ps[2:], "use_muon": False}]


def test_single_process_is_plain_muon():
    a, b = _params(), _params()
    opt_a = DistributedMuon(_groups(a), ns_dtype="float64", weight_decay=0.1)
    opt_b = Muon(_groups(b), ns_dtype="float64", weight_decay=0.1)
    assert (opt_a.rank, opt_a.world_size) == (0, 1)
    for t in range(4):
        for x, y in zip(a, b):
            g = torch.randn(x.shape, generator=torch.Generator().manual_seed(t), dtype=x.dtype)
            x.grad, y.grad = g, g.clone()
        opt_a.step()
        opt_b.step()
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert opt_a.owned_params() == a[:2] and opt_a.owner(a[2]) == -1
    sd = opt_a.state_dict()
    assert sd["distributed_muon"] == {"rank": 0, "world_size": 1, "owners": [0, 0, -1]}
    # a full Muon state dict loads too; a shard of another layout is refused clearly
    DistributedMuon(_groups(_params()), ns_dtype="float64").load_state_dict(opt_b.state_dict())
    bad = dict(sd, distributed_muon=dict(sd["distributed_muon"], rank=1, world_size=2))
    with pytest.raises(ValueError, match="shard of rank 1 of a 2-rank"):
        opt_a.load_state_dict(bad)


def test_invalid_arguments_are_clear():
    with pytest.raises(ValueError, match="bucket_numel"):
        DistributedMuon(_groups(_params()), bucket_numel=0)
    with pytest.raises(ValueError, match="torch.distributed is not initialized"):
        DistributedMuon(_groups(_params()), process_group=object())
    with pytest.raises(ValueError, match="2-D matrices"):
        DistributedMuon([torch.zeros(3)])


def test_cost_model():
    assert newton_schulz_cost((8, 16), 5) == newton_schulz_cost((16, 8), 5)
    assert newton_schulz_cost((3, 8, 8), 5) == 3 * newton_schulz_cost((8, 8), 5)
    assert newton_schulz_cost((8, 8), 0) > 0
