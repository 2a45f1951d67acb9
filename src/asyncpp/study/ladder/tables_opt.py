r"""The compute-optimal ladder: the paper's claims at 20 tokens per parameter on data that never
repeats (experiments/README.md, "Compute-optimal ladder"; predictions written there first).

Two tiers on the debdocs-v1 corpus (30.3M unique training tokens, sha256-pinned): ``opt-180k``
(width 32, 4 layers, 180,512 parameters) and ``opt-580k`` (width 64, 4 layers, 582,208
parameters; 3.2× the first), parameters counted as ``asyncpp-train`` counts them, tied
embeddings included. Every run reads 16 × 128 tokens a step for
:math:`S = \mathrm{round}(k N / 2048)` steps at k tokens per parameter (k = 20 unless a
table says otherwise), under one epoch.

Tables (one declaration each, :data:`TABLES`):

- ``opt-lr`` — the learning rate of every (optimizer, mode), seed 0, at full length, on a
  ×2 grid: :math:`\{c/2, c, 2c\}` around a centre ``c`` (:data:`CENTRE` on the smallest tier;
  on a larger tier the smaller tier's choice, *the transfer rule*), extended by one point
  beyond an edge while the best finished point sits on that edge (at most
  :data:`MAX_EXTEND` times). Muon's AdamW side (embeddings, norms) is scaled with it.
  Every tier but ``opt-180k`` is a larger tier (``opt-580k``, the ``gpu`` rung); the choices
  it transfers are read from ``experiments/opt-180k/results``, or from the folder named by
  the environment variable ``ASYNCPP_LR_TRANSFER`` (:func:`transfer_source`).
- ``opt-claims`` — Muon, AdamW, SOAP × sync / 2BW / 2BW + EF / 2BW + EF(γ*), three seeds,
  each mode at its own chosen lr. SOAP keeps the vocabulary side of the embedding one-sided,
  as at the paper's vocabulary (:data:`SOAP_AS_THE_PAPER`).
- ``opt-more`` (smallest tier) — Adan, Lion, MARS × sync / 2BW / 2BW + EF; the Nesterov
  correction; synchronous start and cooldown (10 % of the steps, at 2BW's lr); original
  PipeDream at P = 4 (stage delays 3, 2, 1, 0; one update per microbatch of 8) and its
  *equal-updates control* (batch 32 in 2 microbatches for half the steps: as many updates,
  and tokens per update, as 2BW), both at 2BW's lr.
- ``opt-tokens`` (smallest tier) — Muon and AdamW × sync / 2BW / 2BW + EF at 5, 10, 40 and
  80 tokens per parameter (20 is ``opt-claims``), two seeds, at the 20-tokens lr.
"""

from __future__ import annotations

import json
import math
import os

from asyncpp.train.config import from_dict, merge, parse_overrides, read_toml

from . import tables_cells as tc
from .paths import EXPERIMENTS
from .tables_cells import MUON_ADAMW_LR, Cell, Table
from .tiers import get_tier

HERE = EXPERIMENTS
TOKENS_PER_STEP = 16 * 128
MAIN_OPTIMIZERS = ("muon", "adamw", "soap")
MORE_OPTIMIZERS = ("adan", "lion", "mars")
# the synchronous lr* of the short-training tiers, the centre of the first grid
CENTRE = {"muon": 0.02, "adamw": 0.01, "soap": 0.01, "adan": 0.01, "lion": 0.001, "mars": 0.01}
MAX_EXTEND = 3
OPT_MODES = {**tc.MODES, "efg": tc.GPU_MODES["efg"],
             "nag": {**tc.MODES["async"], "delay.correction": "nesterov"}}
# (optimizer, mode) pairs whose lr is tuned, per tier kind
TUNED_MAIN = [(o, m) for o in MAIN_OPTIMIZERS for m in ("sync", "async", "ef", "efg")]
TUNED_MORE = [(o, m) for o in MORE_OPTIMIZERS for m in ("sync", "async", "ef")] + [
    ("muon", "nag"), ("adamw", "nag")]
TOKEN_LADDER = (5, 10, 40, 80)
UNTIED = {"model.tie_embeddings": "false"}
SMALLEST = "opt-180k"
# where the transfer rule reads opt-180k's lr results, when not its own folder
TRANSFER_ENV = "ASYNCPP_LR_TRANSFER"


def lr_overrides(opt: str, lr: float) -> dict[str, str]:
    out = {"optimizer.lr": repr(lr)}
    if opt == "muon":  # the whole step: Muon's AdamW side at the same multiple of its default
        out["optimizer.adamw_lr"] = repr(MUON_ADAMW_LR * lr / CENTRE["muon"])
    return out


# SOAP as the paper ran it: its 49,152-token vocabulary is longer than SOAP's default
# max_precondition_dim (10,000), so the embedding's vocabulary side keeps the identity basis
# and every other side (≤ 2,560) is preconditioned. Our 4,096-token vocabulary is shorter
# than the default, and preconditioning it costs a 4,096 × 4,096 eigenbasis refresh
# (benchmarks/bench_soap.py times both). 1,024 reproduces the paper's split: the vocabulary
# side one-sided, every other side (≤ 352 on every tier) preconditioned.
SOAP_AS_THE_PAPER = {"optimizer.soap_max_precondition_dim": "1024"}


def opt_cell(tier, name: str, opt: str, overrides: dict) -> Cell:
    extra = SOAP_AS_THE_PAPER if opt == "soap" else {}
    return Cell(name, tier.base, opt, {"optimizer.name": opt, **extra, **overrides})


def lr_cell_name(opt: str, mode: str, lr: float) -> str:
    return f"lr-{opt}-{mode}-{lr:g}"


def _val(tier, name: str, seed: int = 0) -> float | None:
    """Final val loss of a finished run (+inf when diverged); None when not run yet."""
    p = tc.result_path(tier.results, name, seed)
    if not p.is_file():
        return None
    v = json.loads(p.read_text())["final"].get("val_loss")
    return v if v is not None and math.isfinite(v) else math.inf


def transfer_source():
    """The tier whose lr choices a larger tier's grids are centred on: ``opt-180k``, reading
    its results from :data:`TRANSFER_ENV` when that is set (a stand-in folder of seed-0 lr
    results, e.g. the GPU runbook's dry run), else from ``experiments/opt-180k/results``."""
    src = get_tier(SMALLEST)
    return src.at(results=os.environ[TRANSFER_ENV]) if os.environ.get(TRANSFER_ENV) else src


def _centre(tier, opt: str, mode: str) -> float:
    if tier.name == SMALLEST:
        return CENTRE[opt]
    src = transfer_source()  # the smaller tier's choice: the transfer rule
    choice = lr_choice(src, opt, mode)
    if choice is None:
        raise ValueError(f"{tier.name}: the lr of {opt}/{mode} transfers from {SMALLEST} "
                         f"({src.results}), whose grid is not settled; run `sweep.py --tier "
                         f"{SMALLEST} --tables opt-lr` first")
    return choice[0]


def lr_grid(tier, opt: str, mode: str) -> list[float]:
    """The grid of (opt, mode) as far as the finished runs extend it (module docstring)."""
    c = _centre(tier, opt, mode)
    grid = [c / 2, c, 2 * c]
    for _ in range(MAX_EXTEND):
        vals = [_val(tier, lr_cell_name(opt, mode, lr)) for lr in grid]
        if any(v is None for v in vals):
            break
        best = min(range(len(grid)), key=lambda i: vals[i])
        if best == 0:
            grid.insert(0, grid[0] / 2)
        elif best == len(grid) - 1:
            grid.append(grid[-1] * 2)
        else:
            break
    return grid


def lr_choice(tier, opt: str, mode: str) -> tuple[float, bool] | None:
    """(lr*, interior) of (opt, mode): the grid's argmin of the seed-0 final val loss, and
    whether it is interior; None while a grid point is unfinished."""
    grid = lr_grid(tier, opt, mode)
    vals = [_val(tier, lr_cell_name(opt, mode, lr)) for lr in grid]
    if any(v is None for v in vals):
        return None
    best = min(range(len(grid)), key=lambda i: vals[i])
    return grid[best], 0 < best < len(grid) - 1


def _tuned(tier) -> list[tuple[str, str]]:
    return TUNED_MAIN + (TUNED_MORE if tier.name == SMALLEST else [])


def _lr_priority(pair: tuple[str, str]) -> tuple[int, int]:
    """Muon and AdamW before SOAP, sync / 2BW / EF before EF(γ*), the other optimizers last:
    the order in which the claims become measurable."""
    o, m = pair
    return ({"muon": 0, "adamw": 0, "soap": 1}.get(o, 3),
            {"sync": 0, "async": 0, "ef": 0, "efg": 2}.get(m, 3))


def _opt_lr(tier):
    # the grids' centres first, then their low and high points, then extensions: a lane that
    # stops early has measured every (optimizer, mode) once before any twice
    pairs = sorted(_tuned(tier), key=_lr_priority)
    if tier.name != SMALLEST:  # a pair's grid exists once the smaller tier's has settled
        ready = [(o, m) for o, m in pairs if settled_lr(transfer_source(), o, m) is not None]
        if not ready:  # nothing can transfer yet: say so (the first pair's error)
            _centre(tier, *pairs[0])
        pairs = ready
    out = []
    for rank in range(3 + MAX_EXTEND):
        for o, m in pairs:
            g = lr_grid(tier, o, m)
            c = _centre(tier, o, m)
            order = sorted(g, key=lambda lr: (abs(math.log2(lr / c)), lr < c))
            if rank < len(order):
                lr = order[rank]
                out.append(opt_cell(tier, lr_cell_name(o, m, lr), o,
                                 {**OPT_MODES[m], **lr_overrides(o, lr)}))
    return out


def settled_lr(tier, opt: str, mode: str) -> float | None:
    """lr* of (opt, mode) once its grid is settled (every point finished, the best interior or
    the grid at its widest); None before — or while the smaller tier it transfers from is."""
    try:
        choice = lr_choice(tier, opt, mode)
        if choice is None or (not choice[1] and len(lr_grid(tier, opt, mode)) < 3 + MAX_EXTEND):
            return None
    except ValueError:  # a larger tier whose centre has not transferred yet
        return None
    return choice[0]


def chosen_lr(tier, opt: str, mode: str) -> float:
    """lr* of (opt, mode); a clear error while its grid is unsettled."""
    lr = settled_lr(tier, opt, mode)
    if lr is None:
        raise ValueError(f"{tier.name}: the lr grid of {opt}/{mode} is not settled yet; run "
                         f"`sweep.py --tier {tier.name} --tables opt-lr` (again) first")
    return lr


# The tables below that read a chosen lr list the cells of the (optimizer, mode) pairs whose
# grid has settled, and grow as the grids do: a lane trains the claims of Muon and AdamW
# while another still tunes SOAP.
def _opt_claims(tier):
    return [opt_cell(tier, tc.name(o, m), o, {**OPT_MODES[m], **lr_overrides(o, lr)})
            for o in MAIN_OPTIMIZERS for m in ("sync", "async", "ef", "efg")
            if (lr := settled_lr(tier, o, m)) is not None]


def _opt_more(tier):
    out = [opt_cell(tier, tc.name(o, m), o, {**OPT_MODES[m], **lr_overrides(o, lr)})
           for o, m in TUNED_MORE if (lr := settled_lr(tier, o, m)) is not None]
    S = tier.steps
    for o in ("muon", "adamw"):
        if settled_lr(tier, o, "async") is None:
            continue
        lr = lr_overrides(o, chosen_lr(tier, o, "async"))
        out += [opt_cell(tier, tc.name(o, k), o, {**tc.mitigations(S)[k], **lr})
                for k in ("syncstart", "cooldown")]
        # PipeDream gives its first and last stage different delays, so a tied embedding and
        # head cannot be updated consistently: the three P = 4 cells untie them (one more
        # 4096 × D matrix) and train 20 tokens per parameter of that model
        S4 = steps_at(tier, 20, **UNTIED)
        p4 = {"pipeline.stages": "4", "pipeline.simulate": "true", **UNTIED,
              "train.steps": str(S4), **lr}
        pd = {"pipeline.schedule": "pipedream", "pipeline.microbatches": "2", **p4}
        out.append(opt_cell(tier, f"{o}-pipedream-P4", o, pd))
        out.append(opt_cell(tier, f"{o}-pipedream-P4-equal", o, {
            **pd, "train.batch_size": "32", "train.steps": str(round(S4 / 2)),
            "train.eval_every": str(tier_eval_every(tier) // 2)}))
        out.append(opt_cell(tier, f"{o}-async-P4", o, {
            "pipeline.schedule": "2bw", "pipeline.microbatches": "4", **p4}))
    return out


def tier_eval_every(tier) -> int:
    return int(read_toml(HERE / "configs" / tier.base)["train"]["eval_every"])


def steps_at(tier, k: float, **overrides: str) -> int:
    """Steps of k tokens per parameter on ``tier`` (16 × 128 tokens a step), the model as
    ``overrides`` (configuration keys, e.g. ``model.tie_embeddings="false"``) makes it."""
    cfg = from_dict(merge(read_toml(HERE / "configs" / tier.base), parse_overrides(
        [("pipeline.schedule", "1f1b"), *overrides.items()])))
    return round(k * cfg.model_config().num_params() / TOKENS_PER_STEP)


def _opt_tokens(tier):
    out = []
    for k in TOKEN_LADDER:
        S = steps_at(tier, k)
        for o in ("muon", "adamw"):
            for m in ("sync", "async", "ef"):
                if (lr := settled_lr(tier, o, m)) is None:
                    continue
                out.append(opt_cell(tier, f"{o}-{m}-tpp{k}", o, {
                    **OPT_MODES[m], **lr_overrides(o, lr),
                    "train.steps": str(S), "train.eval_every": str(max(50, S // 8))}))
    return out


def tables():
    """The declarations of the compute-optimal ladder, for tables.TABLES."""
    pred = "Compute-optimal ladder"
    return (
        Table("opt-lr", "Learning rates per (optimizer, mode) at full length (seed 0)",
              _opt_lr, (0,), prediction=pred),
        Table("opt-claims", "The paper's claims at 20 tokens per parameter", _opt_claims,
              (0, 1, 2), prediction=pred),
        # added after the 3-seed verdicts (experiments/README.md, "seeds 3 and 4"): every
        # claims cell of the smallest tier, alike; the 3-seed verdicts stay reported
        Table("opt-claims5", "The claims at 20 tokens per parameter, seeds 3 and 4",
              lambda tier: _opt_claims(tier) if tier.name == SMALLEST else [], (3, 4),
              prediction=pred),
        Table("opt-more", "Claim 2's ordering, mitigations and PipeDream at 20 tokens per "
              "parameter", _opt_more, (0, 1, 2), prediction=pred),
        Table("opt-tokens", "The gap against training tokens", _opt_tokens, (0, 1),
              prediction=pred),
    )


__all__ = ["CENTRE", "chosen_lr", "lr_choice", "lr_grid", "settled_lr", "steps_at", "tables"]
