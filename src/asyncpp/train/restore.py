r"""Reading a finished (or stopped) run back as one whole model, whatever launched it.

A one-process run's checkpoint ``checkpoints/step-N.pt`` holds the model's state dict. A
``torchrun`` launch of dp·P ranks writes that file as a manifest (its ``distributed`` layout)
and one shard per rank, ``checkpoints/step-N.shards/rank-R.pt``, whose
``executor.versions[executor.newest]`` are the stage's current weights under full-model
parameter names (``tok_embeddings.weight``, ``layers.3.attention.wq.weight``, …). The whole
model is the union over the stages of data-parallel replica 0,

.. math::
    \theta = \bigcup_{s=0}^{P-1} \theta_s^{(v_s)},\qquad v_s = \text{newest version of stage } s,

which is the weights the next step would read after every queued update is applied. A
one-process run's checkpoint holds its model before the update it queued; that update is
applied here as a drain applies it (:func:`asyncpp.train.reshard.newest_weights`), so the two
backends restore the same model from the same state (at the end of a run nothing is queued).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from . import checkpoint as ckpt_io
from .config import Config, ConfigError, from_dict
from .reshard import newest_weights


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
            ckpt["shards"] = ckpt_io.load_shards(run_dir, step,
                                                 ckpt["distributed"]["world_size"])
        elif "model" not in ckpt:
            raise ValueError(f"checkpoint of step {step} holds no model weights")
        weights[step] = newest_weights(ckpt, from_dict(ckpt["config"]))

    try:
        ckpt, notes = ckpt_io.load_newest_valid(run_dir, accept=accept)
    except ValueError as e:
        raise ConfigError(f"{e}; train the run (or resume it) until it writes a checkpoint"
                          if "no checkpoint in" in str(e) else str(e)) from None
    step = int(ckpt["step"])
    cfg = from_dict(ckpt["config"])
    if cfg.model.external is not None:  # the composition of the model's layers
        from .external_model import full_model, rebased

        cfg = rebased(cfg, run_dir)

        model = full_model(cfg.model_config(), cfg.run.seed, "cpu")
    else:
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
                          f"{cfg.model_config().name!r}: missing {missing[:3]}, unexpected "
                          f"{extra[:3]}")
    model.load_state_dict({k: v for k, v in state.items()}, strict=False)
    model.eval()
    ranks = int(ckpt["distributed"]["world_size"]) if "distributed" in ckpt else 1
    return RestoredRun(run_dir, cfg, model, step, notes, ranks)
