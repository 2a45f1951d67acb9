r"""The zero-gap table: per optimizer, the best correction of the one-step-delayed (2BW) run
and how far it stays above the synchronous run: the paired gap :math:`\bar d` ± :math:`s_d`
with its 95 % t-interval, the gap in units of sync's seed sd (``stats.in_sd_units``) and the
verdict of ``stats.verdict``. The project's goal is a row whose verdict is "within noise".
Generic over tiers: it reads the cells ``<opt>-sync`` and ``<opt>-<correction>`` wherever they
exist.

The best correction is chosen on common seeds only: with :math:`C` the corrections that share
at least two seeds with sync and :math:`K = K_\text{sync} \cap \bigcap_{c \in C} K_c`, it is
:math:`\arg\min_{c \in C} \frac{1}{|K|} \sum_{k \in K} L_{c,k}` — never a mean over seeds 0–4
against one over seeds 0–2, which mixes the seeds' spread into the choice. Where :math:`|K| <
2`, the correction with the fewest seeds shared with sync leaves :math:`C` until
:math:`|K| \ge 2` (:func:`choice_seeds`). The chosen correction's gap to sync then uses every
seed it shares with sync (a comparison of two cells on their common seeds).
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
    chosen_on: tuple[int, ...] = ()  # the seeds the choice compared the corrections on
    compared: int = 1  # how many corrections it compared

    @property
    def label(self) -> str:
        return MIT_LABEL[self.correction]


def choice_seeds(R, o: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(the corrections the choice compares, the seeds it compares them on) for optimizer
    ``o``: every correction sharing ≥ 2 seeds with sync, on the seeds sync and all of them
    have; while fewer than 2 such seeds remain, the correction sharing the fewest seeds with
    sync (the later in ``CORRECTIONS`` on a tie) is left out. ``((), ())`` without one."""
    s = vals(R, _tc.name(o, "sync"))
    seeds_of = {c: set(vals(R, _tc.name(o, c))) & set(s) for c in CORRECTIONS}
    cands = [c for c in CORRECTIONS if len(seeds_of[c]) >= 2]
    while cands:
        common = set.intersection(*(seeds_of[c] for c in cands))
        if len(common) >= 2:
            return tuple(cands), tuple(sorted(common))
        drop = min(reversed(cands), key=lambda c: len(seeds_of[c]))
        cands.remove(drop)
    return (), ()


def zero_gap_row(R, o: str) -> ZeroGapRow | None:
    """Optimizer ``o``'s best 2BW correction (chosen on :func:`choice_seeds`) against its
    synchronous run on every seed the two share (None without a synchronous run or a
    correction sharing two seeds with it)."""
    cands, seeds = choice_seeds(R, o)
    if not cands:
        return None
    mean = {c: sum(vals(R, _tc.name(o, c), seeds).values()) / len(seeds) for c in cands}
    c = min(cands, key=lambda x: mean[x])  # first in CORRECTIONS on a tie
    s = _tc.name(o, "sync")
    p = pair(R, _tc.name(o, c), s)
    vs = vals(R, s)
    return ZeroGapRow(o, c, p, stats.in_sd_units(p, stats.summary({k: vs[k] for k in p.seeds})),
                      seeds, len(cands))


def seeds_text(seeds) -> str:
    """"0–2" for a run of consecutive seeds, else "0, 2, 4"."""
    ks = sorted(seeds)
    if len(ks) > 2 and ks == list(range(ks[0], ks[-1] + 1)):
        return f"{ks[0]}–{ks[-1]}"
    return ", ".join(map(str, ks)) or "—"


def choice_text(z: ZeroGapRow) -> str:
    """"seeds 0–2, 5 corrections": the seeds the choice compared the corrections on."""
    what = "1 correction" if z.compared == 1 else f"{z.compared} corrections"
    return f"seeds {seeds_text(z.chosen_on)}, {what}"


def table_zero_gap(R, min_seeds: int = 2) -> str:
    """One row per optimizer with a synchronous run and a correction (see the module); a row
    of fewer than ``min_seeds`` paired seeds has its verdict pending."""
    rows = []
    for o in _tc.OPTIMIZERS:
        z = zero_gap_row(R, o)
        if z is None:
            continue
        rows.append([LABEL[o], f"{z.label} ({choice_text(z)})",
                     diff_val(R, _tc.name(o, "sync"), _tc.name(o, z.correction), z.paired.seeds),
                     interval_text(z.paired), agreeing(z.paired),
                     "—" if z.in_sd is None else f"{z.in_sd:+.1f}".replace("-", "−"),
                     verdict_of_at_least(z.paired, min_seeds)])
    if not rows:
        return "—"
    return grid(["optimizer", "best 2BW correction (chosen on)", "gap to sync",
                 "95 % interval", "seeds agreeing", "in sync's seed sd",
                 "verdict (difference, 95 % interval)"], rows)


def section_zero_gap(R, tier):
    return section("zero-gap", [
        "", "Per optimizer, the 2BW correction with the lowest mean final val loss (among "
        + ", ".join(MIT_LABEL[c] for c in CORRECTIONS) + ", where run) against the synchronous "
        "run, paired by seed. " + CHOICE_RULE + " \"In sync's seed sd\" divides the mean gap by "
        "the synchronous cell's seed standard deviation; the verdict is \"within noise\" when "
        "the 95 % interval contains zero.", "", table_zero_gap(R, min_seeds_of(tier.name)), ""]), []


CHOICE_RULE = ("The corrections are compared on the seeds every one of them and sync have "
               "(\"chosen on\"), never on means over different seed sets; the chosen "
               "correction's gap to sync uses every seed the two share.")
