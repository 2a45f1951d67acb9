"""One rank of the pipeline runs of property 6 (launched by ``verify/test_pipeline.py``).

Started with the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)::

    python verify/pipeline_worker.py CONFIG.json OUTDIR

Every rank builds its stage of the *pipeline problem* (``verify.problems.BlockMeasurements``
carried through the pipeline: the activation of a sample is its running residual followed by
the measurement matrices of the later stages; stage s adds ⟨A_{i,s}, X_s⟩ to the residual, the
last stage's loss is mean_i φ(r_i − y_i)), wraps production Muon in the production
``DelayedOptimizer`` with the schedule's delay, runs the production ``PipelineExecutor`` and
records, for every update, the gradient it applied and the stage's newest weights just before
applying it (via ``on_gradients``). Output: ``OUTDIR/rank{r}.json``.

Every microbatch holds the whole data set, so each gradient is the full gradient (σ = 0).
A scenario with ``"mutant": "wrong_version"`` runs with the executor patched
(``verify.mutants.patch_wrong_weight_version``) so that its forwards read the newest weights
instead of the version the schedule names; ``"off_by_one"`` patches stage 0 only, one version
too new (``verify.mutants.patch_stage_version_off_by_one``).

A scenario with ``"problem": "sign"`` runs the *sign-descent problem* instead: every stage holds
a 1×1 weight x_s and adds L x_s²/2 to the activation's first column (the loss is that column's
mean), so f = Σ_s L x_s²/2 is separable and each stage's production Muon (lr = η/s₀, s₀ = NS(1))
runs 1-D sign descent with its own delay: its iterates must follow the certified limit cycle of
``theory.muon_cycle`` exactly (property 6's orbit check).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asyncpp.delay import DelayedOptimizer  # noqa: E402
from asyncpp.optim import Muon  # noqa: E402
from asyncpp.pipeline import (  # noqa: E402
    ExecutorOptions,
    PipelineExecutor,
    PipelineTopology,
    init_distributed,
    stage_delay,
)
from verify.problems import _PHI, block_measurements  # noqa: E402


class MeasurementStage(nn.Module):
    r"""Stage s: :math:`r \leftarrow r + \langle A_{i,s}, X_s\rangle`; passes the later stages'
    measurement matrices on."""

    def __init__(self, x0: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(x0.clone())
        self.d = x0.numel()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = x[:, :1] + x[:, 1:1 + self.d] @ self.weight.reshape(-1, 1)
        return torch.cat([r, x[:, 1 + self.d:]], dim=1)


class SquareStage(nn.Module):
    r"""Stage s of the sign problem: :math:`r \leftarrow r + L x_s^2/2` (1×1 weight)."""

    def __init__(self, x0: float, L: float = 1.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((1, 1), float(x0), dtype=torch.float64))
        self.L = L

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = x[:, :1] + 0.5 * self.L * (self.weight ** 2).reshape(1, 1)
        return torch.cat([r, x[:, 1:]], dim=1)


def run_sign_scenario(topo, sc: dict) -> dict:
    """The sign problem (module docstring): x_s(0) = 0.3η on every stage."""
    from asyncpp.optim import newton_schulz

    P, s = topo.num_stages, topo.stage
    s0 = float(newton_schulz(torch.ones(1, 1, dtype=torch.float64), dtype=torch.float64))
    stage = SquareStage(0.3 * sc["eta"])
    opt = Muon([stage.weight], lr=sc["eta"] / s0, momentum=sc["beta"],
               nesterov=sc.get("nesterov", False), weight_decay=0.0, adjust_lr_fn="none",
               ns_dtype="float64")
    tau = stage_delay(sc["schedule"], P, s)
    dopt = DelayedOptimizer(opt, delay=tau, correction=sc["correction"])
    log = []

    def on_gradients(update, grads):
        log.append({"update": int(update), "x": stage.weight.detach().tolist(),
                    "g": grads["weight"].detach().tolist()})

    m = sc["m"]
    ex = PipelineExecutor(stage, dopt, schedule=sc["schedule"], num_microbatches=m, topology=topo,
                          loss_fn=lambda out, y: out[:, 0].mean(),
                          options=ExecutorOptions(timeout=120, on_gradients=on_gradients))
    x = torch.zeros(4, 1, dtype=torch.float64)
    y = torch.zeros(4, dtype=torch.float64)
    batch = (x.repeat(m, 1), y.repeat(m))
    per_batch = m if sc["schedule"] == "pipedream" else 1
    batches = [batch] * ((sc["steps"] + per_batch - 1) // per_batch)
    losses = ex.train_steps(batches)
    return {"stage": s, "tau": tau, "log": log, "losses": losses,
            "final_x": stage.weight.detach().tolist()}


def pipeline_data(prob) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (N, 1 + D): zero residual, then vec(A_{i,s}) for s = 0..P−1; targets y (N,)."""
    N = prob.As[0].shape[0]
    cols = [torch.zeros(N, 1, dtype=torch.float64)] + [A.reshape(N, -1) for A in prob.As]
    return torch.cat(cols, dim=1), prob.y.clone()


def run_scenario(topo, sc: dict) -> dict:
    P, s = topo.num_stages, topo.stage
    prob = block_measurements([tuple(x) for x in sc["shapes"]], count=sc["count"],
                              phi=sc["phi"], sigma=0.0, seed=sc["problem_seed"],
                              x0_scale=sc["x0_scale"])
    phi = _PHI[sc["phi"]][0]
    stage = MeasurementStage(prob.x0[s])
    opt = Muon([stage.weight], lr=sc["lr"], momentum=sc["beta"], nesterov=False,
               weight_decay=0.0, adjust_lr_fn="none", ns_dtype="float64")
    tau = stage_delay(sc["schedule"], P, s)
    dopt = DelayedOptimizer(opt, delay=tau, correction=sc["correction"])
    log = []

    def on_gradients(update, grads):
        log.append({"update": int(update),
                    "x": stage.weight.detach().tolist(),
                    "g": grads["weight"].detach().tolist()})

    m = sc["m"]
    ex = PipelineExecutor(stage, dopt, schedule=sc["schedule"], num_microbatches=m, topology=topo,
                          loss_fn=lambda out, y: phi(out[:, 0] - y).mean(),
                          options=ExecutorOptions(timeout=120, on_gradients=on_gradients))
    x, y = pipeline_data(prob)
    batch = (x.repeat(m, 1), y.repeat(m))   # every microbatch is the whole data set
    per_batch = m if sc["schedule"] == "pipedream" else 1
    batches = [batch] * ((sc["steps"] + per_batch - 1) // per_batch)
    losses = ex.train_steps(batches)
    return {"stage": s, "tau": tau, "log": log, "losses": losses}


@contextlib.contextmanager
def _mutant(name):
    """Apply a pipeline mutant of ``verify.mutants`` for the duration of one scenario."""
    if name is None:
        yield
        return
    if name not in ("wrong_version", "off_by_one"):
        raise ValueError(f"unknown pipeline mutant {name!r}")
    from asyncpp.pipeline import executor
    from verify.mutants import patch_stage_version_off_by_one, patch_wrong_weight_version

    original = executor.PipelineExecutor._forward
    if name == "wrong_version":
        patch_wrong_weight_version()
    else:
        patch_stage_version_off_by_one(0)
    try:
        yield
    finally:
        executor.PipelineExecutor._forward = original


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    result: dict = {}
    try:
        torch.set_num_threads(1)
        t0 = time.time()
        init_distributed("cpu", timeout=120)
        result["startup_s"] = time.time() - t0
    except Exception:
        result["crash"] = traceback.format_exc()
    for sc in cfg["scenarios"] if "crash" not in result else []:
        t0 = time.time()
        try:
            topo = PipelineTopology.create(num_stages=cfg["P"], timeout=120)
            with _mutant(sc.get("mutant")):
                run = run_sign_scenario if sc.get("problem") == "sign" else run_scenario
                result[sc["name"]] = run(topo, sc)
        except Exception:
            result[sc["name"]] = {"crash": traceback.format_exc()}
        result[sc["name"]]["seconds"] = time.time() - t0
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
