"""Multi-process checks (gloo, float64) of the Nesterov delay correction and of the WPipe
schedule against the single-process delay core; helpers shared with ``pipeline_worker.py``.

    torchrun --standalone --nproc-per-node=4 tests/extras_worker.py nesterov OUTDIR

Every rank writes ``OUTDIR/rank{r}.json`` (same fields as ``pipeline_worker.py``).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline_worker import ADAMW, MUON, check, mlp_layers, mse  # noqa: E402

from asyncpp.pipeline import PipelineTopology, init_distributed  # noqa: E402


def scenario_nesterov(results):
    """P = 4: the Nesterov look-ahead through the executor equals the delay core, with one
    delay (2BW, τ = 1) and per-stage delays (PipeDream, τ_s = 3 − s)."""
    topo = PipelineTopology.create(4, timeout=60)
    for name, schedule, optname, hp in [("2bw_adamw", "2bw", "adamw", ADAMW),
                                        ("2bw_muon", "2bw", "muon", MUON),
                                        ("pipedream_adamw", "pipedream", "adamw", ADAMW),
                                        ("pipedream_muon", "pipedream", "muon", MUON)]:
        key, out = check(topo, f"P4_{name}_nesterov", mlp_layers, schedule, optname, hp, 4, mse,
                         correction="nesterov")
        results[key] = out


SCENARIOS = {"nesterov": scenario_nesterov}


def main() -> None:
    scenario, outdir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    init_distributed("cpu", timeout=120)
    rank = dist.get_rank()
    results: dict = {}
    t0 = time.time()
    code = 0
    try:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; use one of {sorted(SCENARIOS)}")
        SCENARIOS[scenario](results)
    except Exception:
        results["crash"] = traceback.format_exc()
        code = 1
    results["wall_s"] = time.time() - t0
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    if code:
        os._exit(code)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
