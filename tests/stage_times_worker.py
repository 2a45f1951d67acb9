"""Stage times of the executor on 2 gloo ranks: a stage made slower, and two stages per rank.

    torchrun --standalone --nproc-per-node=2 tests/stage_times_worker.py OUTDIR

``slow``: 2BW, one stage per rank, m = 2; the last stage's forward sleeps ``SLEEP_S`` per
microbatch, so the first stage spends most of each step waiting for its gradients.
``looped``: looped 1F1B, 4 stages on 2 ranks (stage s on rank s mod 2). Every rank writes
``OUTDIR/rank{r}.json``: ``PipelineExecutor.stage_times()`` of each case, as dicts.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch import nn

from asyncpp.pipeline import (
    ExecutorOptions,
    PipelineExecutor,
    PipelineTopology,
    init_distributed,
    looped_devices,
)

SLEEP_S = 0.03
STEPS, M, ROWS, D = 12, 2, 4, 8


class Sleep(nn.Module):
    """Identity that takes ``seconds`` of wall time (a stage made slower)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return x


def _block(slow: bool = False) -> nn.Module:
    return nn.Sequential(*([Sleep(SLEEP_S)] if slow else []),
                         nn.Linear(D, D, dtype=torch.float64), nn.Tanh())


def _batches():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(ROWS, D, generator=g, dtype=torch.float64),
             torch.randn(ROWS, D, generator=g, dtype=torch.float64)) for _ in range(STEPS)]


def _mse(out, y):
    return ((out - y) ** 2).mean()


def slow(topo) -> list[dict]:
    stage = _block(slow=topo.stage == 1)
    ex = PipelineExecutor(stage, torch.optim.SGD(stage.parameters(), lr=0.01), schedule="2bw",
                          num_microbatches=M, topology=topo, loss_fn=_mse,
                          options=ExecutorOptions(timeout=60))
    ex.train_steps(_batches())
    return [t.to_dict() for t in ex.stage_times()]


def looped(topo) -> list[dict]:
    placement = looped_devices(4, 2)
    mine = placement[topo.stage]
    stages = {s: _block() for s in mine}
    opts = {s: torch.optim.SGD(m.parameters(), lr=0.01) for s, m in stages.items()}
    ex = PipelineExecutor(stages, opts, schedule="1f1b", num_microbatches=M, topology=topo,
                          loss_fn=_mse, placement=placement, options=ExecutorOptions(timeout=60))
    ex.train_steps(_batches())
    return [t.to_dict() for t in ex.stage_times()]


def main() -> None:
    outdir = sys.argv[1]
    torch.set_num_threads(1)
    init_distributed("cpu", timeout=120)
    rank = dist.get_rank()
    topo = PipelineTopology.create(2, timeout=60)
    results: dict = {}
    code = 0
    try:
        results["slow"] = slow(topo)
        results["looped"] = looped(topo)
    except Exception:
        results["crash"] = traceback.format_exc()
        code = 1
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    if code:
        os._exit(code)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
