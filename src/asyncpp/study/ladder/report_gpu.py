"""The gpu tier's page (experiments/gpu/run.sh): the compute-optimal ladder's tables for its
1.26M rung — the same sections as the opt-* tiers (``report_opt``: opt-lr with the transfer
rule, opt-claims with the zero-gap table), each with the regime read from the results — the
gap against parameters across the ladder, and the speed of each cell on the GPU.
``table_gpu_tier`` renders the earlier protocol's table (table ``gpu``: every mode at the
`small` tier's lr) wherever such results exist."""

from __future__ import annotations

import statistics

from .report_common import (
    COMPARE_HEAD,
    LABEL,
    compare_cells,
    grid,
    loss,
    share_val,
)
from .report_common import tc as _tc


def table_gpu_tier(R) -> str:
    """The gpu tier's Table 1: sync / async / async + EF / async + EF(γ*) per optimizer, the
    shares, and the paired comparisons."""
    losses, cmp = [], []
    for o in _tc.GPU_OPTIMIZERS:
        s, a, e, g = (_tc.name(o, m) for m in _tc.GPU_MODES)
        losses.append([LABEL[o], loss(R, s), loss(R, a), loss(R, e), loss(R, g)])
        cmp += [[LABEL[o], "async − sync", "—", *compare_cells(R, a, s)],
                [LABEL[o], "EF − async", share_val(R, s, a, e), *compare_cells(R, e, a)],
                [LABEL[o], "EF(γ*) − async", share_val(R, s, a, g), *compare_cells(R, g, a)]]
    return "\n\n".join([
        grid(["optimizer", "sync", "async (2BW)", "async + EF", "async + EF(γ*)"], losses),
        grid(["optimizer", "comparison", "share recovered (per seed)", *COMPARE_HEAD], cmp)])


def table_gpu_speed(R) -> str:
    """Per gpu-tier cell: runs, tokens per run and per parameter, steady tokens/s, MFU, first
    step (compile) and wall time, medians over seeds."""
    lines = ["| cell | runs | tokens/run | tokens/param | steady tokens/s | MFU | first step | "
             "wall |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    # the claims' cells ({opt}-{mode}) and the lr grids' ({lr-opt-mode-lr}): every finished
    # run counts, the lr runs being most of a first call's work
    # the claims' cells and the lr grids' (lr-{opt}-{mode}-{lr}): every finished run counts,
    # the lr runs being all of a first call's work
    cells = [_tc.name(o, m) for o in _tc.GPU_OPTIMIZERS for m in _tc.GPU_MODES]
    cells += sorted(c for c in R if c.startswith("lr-"))
    for cell in cells:
        recs = [r for r in R.get(cell, {}).values() if r.get("status") == "ok"]
        if not recs:
            continue

        def med(k, recs=recs):
            xs = [r["final"][k] for r in recs if r["final"].get(k) is not None]
            return statistics.median(xs) if xs else None
        f = recs[0]["final"]
        if not f.get("params"):
            lines.append(f"| {cell} | {len(recs)} | — | — | — | — | — | — |")
            continue
        tps, mfu, first = med("steady_tokens_per_s"), med("mfu"), med("first_step_s")
        lines.append(
            f"| {cell} | {len(recs)} | {f.get('tokens', 0):,} | "
            f"{f.get('tokens', 0) / f['params']:.1f} | "
            f"{'—' if tps is None else f'{tps:,.0f}'} | "
            f"{'—' if mfu is None else f'{100 * mfu:.2f} %'} | "
            f"{'—' if first is None else f'{first:.1f} s'} | {med('wall_s'):.0f} s |")
    return "\n".join(lines)
