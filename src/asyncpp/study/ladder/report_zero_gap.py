r"""The zero-gap table: per optimizer, the best correction of the one-step-delayed (2BW) run —
the lowest mean final val loss among its corrections — and how far it stays above the
synchronous run: the paired gap :math:`\bar d` ± :math:`s_d` with its 95 % t-interval, the
gap in units of sync's seed sd (``stats.in_sd_units``) and the verdict of ``stats.verdict``.
The project's goal is a row whose verdict is "within noise". Generic over tiers: it reads the
cells ``<opt>-sync`` and ``<opt>-<correction>`` wherever they exist.
"""

from __future__ import annotations

import dataclasses

from . import stats
from .report_common import (
    LABEL,
    MIT_LABEL,
    agreeing,
    diff_val,
    grid,
    interval_text,
    min_seeds_of,
    pair,
    section,
    vals,
    verdict_of_at_least,
)
from .report_common import tc as _tc

# The corrections of the 2BW run a tier may have (tables 1, 3, efg, opt-claims, opt-more): EF,
# EF(γ*), EF with a synchronous cooldown, a synchronous start or cooldown, Taylor compensation,
# the Nesterov correction.
CORRECTIONS = ("ef", "efg", "efcooldown", "syncstart", "cooldown", "taylor", "nag")


@dataclasses.dataclass(frozen=True)
class ZeroGapRow:
    opt: str
    correction: str
    paired: stats.Paired
    in_sd: float | None

    @property
    def label(self) -> str:
        return MIT_LABEL[self.correction]


def zero_gap_row(R, o: str) -> ZeroGapRow | None:
    """Optimizer ``o``'s best 2BW correction against its synchronous run (None without a
    synchronous run or a correction sharing two seeds with it)."""
    s = _tc.name(o, "sync")
    vs = vals(R, s)
    best = None
    for c in CORRECTIONS:
        cell = _tc.name(o, c)
        p = pair(R, cell, s)
        if p is None or p.n < 2:
            continue
        mean = sum(vals(R, cell, p.seeds).values()) / p.n
        if best is None or mean < best[0]:
            best = (mean, c, p)
    if best is None:
        return None
    _, c, p = best
    return ZeroGapRow(o, c, p, stats.in_sd_units(p, stats.summary({k: vs[k] for k in p.seeds})))


def table_zero_gap(R, min_seeds: int = 2) -> str:
    """One row per optimizer with a synchronous run and a correction (see the module); a row
    of fewer than ``min_seeds`` paired seeds has its verdict pending."""
    rows = []
    for o in _tc.OPTIMIZERS:
        z = zero_gap_row(R, o)
        if z is None:
            continue
        rows.append([LABEL[o], z.label, diff_val(R, _tc.name(o, "sync"), _tc.name(o, z.correction),
                                                 z.paired.seeds),
                     interval_text(z.paired), agreeing(z.paired),
                     "—" if z.in_sd is None else f"{z.in_sd:+.1f}".replace("-", "−"),
                     verdict_of_at_least(z.paired, min_seeds)])
    if not rows:
        return "—"
    return grid(["optimizer", "best 2BW correction", "gap to sync", "95 % interval",
                 "seeds agreeing", "in sync's seed sd", "verdict"], rows)


def section_zero_gap(R, tier):
    return section("zero-gap", [
        "", "Per optimizer, the 2BW correction with the lowest mean final val loss (among "
        + ", ".join(MIT_LABEL[c] for c in CORRECTIONS) + ", where run) against the synchronous "
        "run, paired by seed. \"In sync's seed sd\" divides the mean gap by the synchronous "
        "cell's seed standard deviation; the verdict is \"within noise\" when the 95 % "
        "interval contains zero.", "", table_zero_gap(R, min_seeds_of(tier.name)), ""]), []

