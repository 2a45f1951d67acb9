r"""The vocabulary of the experiment tables: training modes, grids and the names of cells, made
in one place and read by the sweep (``sweep``, which runs them), the declarations
(``tables``) and the report (``report``, which reads their results).

A *cell* is one training configuration: a base TOML of ``experiments/configs/`` plus
``--section.key`` overrides, what ``asyncpp-train --config BASE --k v ...`` runs. Its name is
the file stem of its results, ``<tier>/results/<name>-seed<k>.json``; :func:`name` and
:func:`deep_name` are the only places that spell one.

Stage delays are not written here: the schedule registry computes them
(:func:`stage_delays`, ``asyncpp.pipeline.registry``): 2BW's :math:`\tau_s = 1`, PipeDream's
:math:`\tau_s = P - 1 - s`, WPipe's first group 1 and its second 0.

Nothing here imports torch; only :func:`load_lrs` reads a TOML (through asyncpp's reader).
A *table* (:class:`Table`) is a declared set of cells and seeds (``tables``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

from asyncpp.pipeline.registry import get_spec
from asyncpp.train.config import read_toml

OPTIMIZERS = ("adamw", "muon", "soap", "adan", "lion", "mars")
MODES = {
    "sync": {"pipeline.schedule": "1f1b"},
    "async": {"pipeline.schedule": "2bw", "pipeline.simulate": "true"},
    "ef": {"pipeline.schedule": "2bw", "pipeline.simulate": "true", "delay.correction": "ef"},
}
# Table 1's modes and EF(gamma*) (the theory-tuned EF: --delay.ef_gamma auto).
GPU_MODES = {**MODES, "efg": {**MODES["ef"], "delay.ef_gamma": "auto"}}
# The corrections of the deep-model tables (nag, wpipe, efg-depth), added to a schedule.
NAG_CORRECTIONS = {"none": {}, "ef": {"delay.correction": "ef"},
                   "efg": {"delay.correction": "ef", "delay.ef_gamma": "auto"},
                   "nag": {"delay.correction": "nesterov"}}
SPECTRAL = {"delay.spectral_drift": "true"}  # T2's drift δ (the why-the-gap tables)

BETAS = (0.8, 0.9, 0.95, 0.98)
DEFAULT_BETA = {"muon": 0.95, "adamw": 0.9}
BETA_KEY = {"muon": "optimizer.momentum", "adamw": "optimizer.beta1"}
DEPTHS = (2, 4, 8, 16)
DEPTH_OPT = "muon"  # the optimizer of the depth tables; its deep cells carry no optimizer tag
BASE_BATCH = 16  # train.batch_size of base.toml and small.toml
BATCHES = (8, BASE_BATCH, 32)
BATCH_OPT = "adamw"
LOWER_LR = {"adamw": 0.003, "muon": 0.01}  # table 7: the second-best synchronous lr
H1_OPTIMIZERS = ("adamw", "muon", "adan", "soap")
LR_FRACTIONS = (0.125, 0.25, 0.5)  # table h1: lr* × f (f = 1 is Table 1's cell)
H3_FACTORS = (0.5, 1.0, 2.0)  # table h3-tune: the synchronous lr per β, lr* × f
H4_LENGTHS = (1, 2, 4)  # table h4: multiples of the tier's steps (1 is Table 1's cells)
MUON_ADAMW_LR = 3e-3  # optimizer.adamw_lr's default: Muon's AdamW side in every table
NAG_P = 4  # the deep model cut in 4 (tables nag and wpipe)
# Table h5: Adan's β's (β₁, β₂, β₃ in the torch convention) and the lr grid of each setting.
H5_GRIDS = {"b98": (("0.98", "0.92", "0.99"), (0.003, 0.01, 0.03)),
            "alg1": (("0.02", "0.08", "0.01"), (0.001, 0.003))}
EFG_OPTIMIZERS = ("muon", "adamw", "soap")
GPU_OPTIMIZERS = ("muon", "adamw", "soap")


class Cell:
    """One configuration: ``base`` TOML + ``overrides``; ``opt`` takes its lr from the tier's lr
    file unless the overrides set one."""

    def __init__(self, name: str, base: str, opt: str, overrides: dict[str, str]):
        self.name, self.base, self.opt, self.overrides = name, base, opt, dict(overrides)

    def __repr__(self) -> str:
        return f"Cell({self.name!r})"


@dataclasses.dataclass(frozen=True)
class Table:
    """One experiment table (see the module docstring)."""

    id: str
    title: str
    cells: Callable[..., list[Cell]] | None
    seeds: tuple[int, ...] = ()
    extra_seeds: tuple[int, ...] = ()
    prediction: str | None = None
    reads: tuple[str, ...] = ()


def name(opt: str, mode: str, *, tag: str | None = None, beta: float | None = None,
         batch: int | None = None, lr: float | None = None, lr_factor: float | None = None,
         steps: int | None = None, long: bool = False, tuned: bool = False) -> str:
    """The name of a cell of the base (or small) model: ``<opt>-<mode>`` and, in this order,
    ``-<tag>``, ``-beta<β>``, ``-bs<batch>``, ``-lr<lr>``, ``-lrx<factor>``, ``-steps<n>``,
    ``-long``, ``-tuned`` for the variants given (``None``: the table's default, no suffix)."""
    out = f"{opt}-{mode}"
    for part in (tag, None if beta is None else f"beta{beta:g}",
                 None if batch is None else f"bs{batch}", None if lr is None else f"lr{lr:g}",
                 None if lr_factor is None else f"lrx{lr_factor:g}",
                 None if steps is None else f"steps{steps}", "long" if long else None,
                 "tuned" if tuned else None):
        if part is not None:
            out += f"-{part}"
    return out


def beta_variant(opt: str, b: float) -> float | None:
    """``b`` unless it is ``opt``'s default momentum (whose cells are Table 1's: no suffix)."""
    return None if b == DEFAULT_BETA[opt] else b


def lr_name(opt: str, lr: float) -> str:
    """A cell of the synchronous lr sweep (table lr)."""
    return f"lr-{opt}-{lr:g}"


def h1_name(opt: str, mode: str, f: float) -> str:
    """The cell of ``opt``, ``mode`` at lr = f × lr* (f = 1: Table 1's cell)."""
    return name(opt, mode, lr_factor=None if f == 1 else f)


def h4_name(opt: str, mode: str, n: int, steps: int) -> str:
    """The cell of ``opt``, ``mode`` at n × the tier's ``steps`` (n = 1: Table 1's cell)."""
    return name(opt, mode, steps=None if n == 1 else n * steps)


def deep_name(opt: str, sched: str, P: int | None = None, corr: str = "none") -> str:
    """A cell of the deep model: ``deep[-<opt>]-sync`` (the synchronous reference, P = 2) or
    ``deep[-<opt>]-<sched>-P<P>[-<corr>]``; the optimizer tag is left out for
    :data:`DEPTH_OPT` (Table 4's cells)."""
    pre = "deep" if opt == DEPTH_OPT else f"deep-{opt}"
    if sched == "sync":
        return f"{pre}-sync"
    return f"{pre}-{sched}-P{P}" + ("" if corr == "none" else f"-{corr}")


def gpu135_name(opt: str, mode: str) -> str:
    return f"gpu135-{opt}-{mode}"


def stage_delays(sched: str, P: int) -> tuple[int, ...]:
    """τ_s per stage of schedule ``sched`` on P stages, from the schedule registry (its
    ``stage_delays``: the delay each stage's update waits)."""
    return tuple(get_spec(sched).stage_delays(P))


def mitigations(steps: int) -> dict[str, dict[str, str]]:
    """Table 3's variants of the async run; windows are 10 % of the tier's steps."""
    return {
        "syncstart": {**MODES["async"], "delay.sync_start": str(steps // 10)},
        "cooldown": {**MODES["async"], "delay.sync_cooldown": str(steps // 10)},
        "taylor": {**MODES["async"], "delay.correction": "taylor"},
        "ef": MODES["ef"],
        "efcooldown": {**MODES["ef"], "delay.sync_cooldown": str(steps // 10)},
    }


def scaled_lr(opt: str, lrs: dict, f: float) -> dict[str, str]:
    """The lr overrides of lr* × f (Muon's AdamW side scaled with it: the whole step)."""
    out = {"optimizer.lr": repr(lrs[opt] * f)}
    if opt == "muon":
        out["optimizer.adamw_lr"] = repr(MUON_ADAMW_LR * f)
    return out


def result_path(results: Path, cell: str, seed: int) -> Path:
    return results / f"{cell}-seed{seed}.json"


def load_lrs(path: Path) -> dict[str, float]:
    """Per-optimizer peak lr chosen by the synchronous sweep (a tier's ``lrs_file``, e.g.
    configs/lrs.toml)."""
    if not path.is_file():
        raise ValueError(f"{path} does not exist; run `python experiments/sweep.py --tables lr` "
                         "and then `--pick-lrs` first")
    return {k: float(v) for k, v in read_toml(path)["lr"].items()}


def h3_tune_name(opt: str, b: float, f: float) -> str:
    return name(opt, "sync", beta=b, lr_factor=f)


def h3_choice(o: str, b: float, tier) -> float:
    """H3's lr factor for (optimizer, beta): argmin over H3_FACTORS of the synchronous seed-0
    final validation loss in ``tier``'s results (table h3-tune; diverged = +inf)."""
    scored = []
    for f in H3_FACTORS:
        path = result_path(tier.results, h3_tune_name(o, b, f), 0)
        if not path.is_file():
            raise ValueError(f"table h3 needs h3-tune's {path.name}; run --tables h3-tune first")
        v = json.loads(path.read_text())["final"].get("val_loss")
        scored.append((v if v is not None and math.isfinite(v) else math.inf, f))
    return min(scored)[1]
