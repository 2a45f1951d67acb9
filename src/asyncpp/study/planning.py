r"""``asyncpp-study power``: the seeds each endpoint of a study needs, from the runs it has.

Every paired endpoint is a one-sample t test of a per-seed quantity :math:`d_k`
(:func:`per_seed`): a − b for a difference or an equivalence; the contrast
:math:`(\text{none}_k - \text{corr}_k) - s\,(\text{none}_k - \text{sync}_k)` for a share
(``contrast_weights``); the seed's own least-squares slope for a per-seed slope. From the
:math:`d_k` on disk — the claims results, or, before any claims run, the **selection runs at
each cell's chosen lr** (a pilot: same options, seeds kept apart from the claims) — its mean and
sd give the seeds the endpoint's test needs (``asyncpp.study.power.seeds_for_power``) at the
study's power, with the observed mean as the true effect (for an equivalence too: a mean
outside the margin gets no count, no seed number establishes it; a difference with a margin
at the mean beyond it). Primaries are planned at Holm's strictest
level :math:`\alpha/M` (M primaries: the first of them is tested there); the rest at α.
A pooled slope is not a one-sample test and gets no count. An sd from few seeds is itself
uncertain (2 pilot seeds: 1 degree of freedom), which the table says beside each count.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from . import runner
from .power import seeds_for_power
from .report import cell_values, slope_points
from .spec import Endpoint, Study
from .stats import TooFewSeeds, gap_slope


def contrast_weights(ep: Endpoint) -> dict[str, float] | None:
    """``{cell: w}`` of the per-seed contrast ``ep``'s paired test is a t test of; ``None``
    for a slope (a fit over many cells, not one contrast)."""
    if ep.test in ("difference", "equivalence"):
        return {ep.a: 1.0, ep.b: -1.0}
    if ep.test == "share":
        w = {ep.none: 1.0 - ep.s, ep.corr: -1.0}
        w[ep.sync] = w.get(ep.sync, 0.0) + ep.s
        return w
    return None


def per_seed(ep: Endpoint, cells: dict[str, dict[int, dict]]) -> dict[int, float] | None:
    """``{seed: d_k}`` (module docstring) on the seeds every cell of ``ep`` has; ``None`` for
    a pooled slope."""
    w = contrast_weights(ep)
    if w is not None:
        seeds = set.intersection(*(set(cells.get(c, {})) for c in w))
        return {k: math.fsum(wc * cells[c][k]["value"] for c, wc in w.items())
                for k in sorted(seeds)}
    if not ep.per_seed:
        return None
    pts = slope_points(ep, cells)
    out = {}
    for k, p in pts.items():
        try:
            out[k] = gap_slope(p).estimate
        except TooFewSeeds:
            continue
    return out


def pilot_cells(study: Study) -> dict[str, dict[int, dict]]:
    """``{cell: {seed: record}}`` of the selection runs made at each cell's chosen lr."""
    chosen = {c: ch["lr"] for c, ch in runner.chosen_lrs(study).items()}
    out: dict[str, dict[int, dict]] = {c: {} for c in study.cells}
    for r in runner.selection_runs(study):
        if r.cell in chosen and r.lr == chosen[r.cell] and runner.done(r):
            out[r.cell][r.seed] = runner.read_result(r.result)
    return out


@dataclasses.dataclass(frozen=True)
class Need:
    """One endpoint's planning row."""

    name: str
    test: str
    primary: bool
    level: float
    n: int
    mean: float | None
    sd: float | None
    needed: int | None  # None: not computable, or more than ``most``
    declared: int
    why: str = ""  # why there is no count

    def verdict(self) -> str:
        if self.needed is None:
            return self.why or "—"
        if self.declared >= self.needed:
            return "enough"
        return f"{self.needed - self.declared} more"


def needs(study: Study, source: str = "claims", power: float = 0.8, alpha: float = 0.05,
          most: int = 200) -> list[Need]:
    """The planning row of every endpoint (module docstring); ``source`` "claims" or
    "selection" (the pilot)."""
    cells = cell_values(study) if source == "claims" else pilot_cells(study)
    n_primary = sum(ep.primary for ep in study.endpoints)
    rows = []
    for ep in study.endpoints:
        level = alpha / n_primary if ep.primary else alpha
        declared = min(len(study.claims_of(c)) for c in ep.cells())
        d = per_seed(ep, cells)
        base = dict(name=ep.name, test=ep.test, primary=ep.primary, level=level,
                    declared=declared)
        if d is None:
            rows.append(Need(**base, n=0, mean=None, sd=None, needed=None,
                             why="a pooled slope: no one-sample count"))
            continue
        xs = list(d.values())
        if len(xs) < 2:
            rows.append(Need(**base, n=len(xs), mean=None, sd=None, needed=None,
                             why=f"{len(xs)} seed(s) with every cell: 2 needed"))
            continue
        m, sd = statistics.mean(xs), statistics.stdev(xs)
        effect = m
        if ep.test == "difference" and ep.margin:
            effect = math.copysign(max(abs(m) - ep.margin, 0.0), m)
        if sd == 0:
            rows.append(Need(**base, n=len(xs), mean=m, sd=sd, needed=None,
                             why="no spread over seeds"))
            continue
        kind = "equivalence" if ep.test == "equivalence" else "difference"
        n = seeds_for_power(kind, effect, sd, level, power, ep.alternative, ep.margin, most)
        why = ""
        if n is None:
            if kind == "equivalence":
                why = f"the mean lies outside ±{ep.margin:g}: no count establishes it"
            elif effect and (ep.alternative == "two-sided"
                             or (ep.alternative == "greater") == (effect > 0)):
                why = f"more than {most}"
            else:
                why = "the mean lies where the test cannot establish it"
        rows.append(Need(**base, n=len(xs), mean=m, sd=sd, needed=n, why=why))
    return rows


def table(rows: list[Need], source: str, power: float, alpha: float) -> str:
    """The rows as Markdown, with what they were computed from."""
    what = ("claims results" if source == "claims" else
            "selection runs at each cell's chosen lr (a pilot)")
    lines = [f"Seeds for power {power:g} from the {what}; primaries at Holm's strictest "
             f"level, α/M, the rest at α = {alpha:g}. The sd of n seeds has n − 1 degrees of "
             "freedom: a count from a few seeds is a rough one.", "",
             "| endpoint | test | level | seeds | mean | sd | seeds needed | declared | |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        mean = "—" if r.mean is None else f"{r.mean:+.4f}"
        sd = "—" if r.sd is None else f"{r.sd:.4f}"
        need = "—" if r.needed is None else str(r.needed)
        lines.append(f"| {r.name}{' (primary)' if r.primary else ''} | {r.test} | "
                     f"{r.level:.4f} | {r.n} | {mean} | {sd} | {need} | {r.declared} | "
                     f"{r.verdict()} |")
    return "\n".join(lines) + "\n"


__all__ = ["Need", "contrast_weights", "needs", "per_seed", "pilot_cells",
           "table"]
