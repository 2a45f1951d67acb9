r"""Reading a finished (or stopped) run back as one whole model, whatever launched it.

A one-process run's checkpoint ``checkpoints/step-N.pt`` holds the model's state dict. A
``torchrun`` launch of dp·P ranks writes that file as a manifest (its ``distributed`` layout)
and one shard per rank, ``checkpoints/step-N.shards/rank-R.pt``, whose
``executor.versions[executor.newest]`` are the stage's current weights under full-model
parameter names (``tok_embeddings.weight``, ``layers.3.attention.wq.weight``, …). The whole
model is the union over the stages of data-parallel replica 0,

.. math::
    \theta = \bigcup_{s=0}^{P-1} \theta_s^{(v_s)},\qquad v_s = \text{newest version of stage } s,

which is the weights the next step would read after every queued update is applied: the
simulation's model at the same checkpoint (checkpoints are taken at drains).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from . import checkpoint as ckpt_io
from .config import Config, ConfigError, from_dict


@dataclass
class RestoredRun:
    """A run's configuration, its model at ``step`` (whole, on the CPU, eval mode), and one
    note per newer checkpoint that was skipped as damaged."""

    run_dir: Path
    cfg: Config
    model: torch.nn.Module
    step: int
    notes: list[str]
    ranks: int  # processes that wrote the checkpoint (1: a one-process run)


def merged_weights(run_dir: Path, step: int, layout: dict) -> dict[str, torch.Tensor]:
    """The newest weights of every stage of replica 0 of a torchrun checkpoint, merged by
    full-model name; ``ValueError`` naming the shard that is missing, damaged or foreign."""
    merged: dict[str, torch.Tensor] = {}
    for rank in range(int(layout["world_size"])):
        path = ckpt_io.shard_path(run_dir, step, rank)
        if not path.is_file():
            raise ValueError(f"checkpoint of step {step} lacks the shard {str(path)!r}")
        shard = ckpt_io.load_checkpoint(path)
        if int(shard.get("step", -1)) != step:
            raise ValueError(f"{str(path)!r} holds step {shard.get('step')}, not {step}")
        ex = shard["executor"]
        if int(ex.get("dp_rank", 0)) != 0:
            continue  # every replica holds the same weights
        stages = ex["stages"].values() if "stages" in ex else [ex]
        for st in stages:
            versions = st["versions"]
            newest = versions.get(st["newest"], versions.get(int(st["newest"])))
            if newest is None:
                raise ValueError(f"{str(path)!r} lacks its newest weight version")
            merged.update(newest)
    return merged


def restore_run(run_dir: str | os.PathLike) -> RestoredRun:
    """The model of ``run_dir``'s newest valid checkpoint (see the module docstring);
    ``ConfigError`` with the reason when there is none or it does not fit the model."""
    from ..models import build_model

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {str(run_dir)!r} does not exist")
    weights: dict[int, dict] = {}

    def accept(step: int, ckpt: dict) -> None:
        if "distributed" in ckpt:
            weights[step] = merged_weights(run_dir, step, ckpt["distributed"])
        elif "model" in ckpt:
            weights[step] = ckpt["model"]
        else:
            raise ValueError(f"checkpoint of step {step} holds no model weights")

    try:
        ckpt, notes = ckpt_io.load_newest_valid(run_dir, accept=accept)
    except ValueError as e:
        raise ConfigError(f"{e}; train the run (or resume it) until it writes a checkpoint"
                          if "no checkpoint in" in str(e) else str(e)) from None
    step = int(ckpt["step"])
    cfg = from_dict(ckpt["config"])
    model = build_model(cfg.model_config())
    state = weights[step]
    want = model.state_dict()
    missing = [k for k in want if k not in state]
    if cfg.model_config().tie_embeddings and "output.weight" in missing \
            and "tok_embeddings.weight" in state:
        missing.remove("output.weight")  # one tensor, saved under the embedding's name
    extra = [k for k in state if k not in want]
    if missing or extra:
        raise ConfigError(f"checkpoint of step {step} in {str(run_dir)!r} does not fit model "
                          f"{cfg.model.name!r}: missing {missing[:3]}, unexpected {extra[:3]}")
    model.load_state_dict({k: v for k, v in state.items()}, strict=False)
    model.eval()
    ranks = int(ckpt["distributed"]["world_size"]) if "distributed" in ckpt else 1
    return RestoredRun(run_dir, cfg, model, step, notes, ranks)
