"""What pairing by seed removes from protocol v2's contrasts, what the chaos floor leaves, and
the seeds each primary endpoint needs with that floor in its power.

    python experiments/chaos.py --v2-report

Every paired test of the study is a one-sample t test of a per-seed contrast
:math:`d_k = \\sum_c w_c\\, y_{c,k}` (``contrast_weights``: a − b for a difference or an
equivalence; (none − corr) − s·(none − sync) for a share). Over the claims seeds three sds of
it are set side by side:

- **paired** — the sd of :math:`d_k` itself, what the test meets;
- **unpaired** — :math:`\\sqrt{\\sum_c w_c^2 s_c^2}` from each cell's seed sd :math:`s_c`: the
  sd :math:`d` would have if the cells shared nothing through their seed (initialisation,
  data order);
- **chaos floor** — :math:`\\sqrt{\\sum_c w_c^2 \\sigma_c^2}` from each cell's chaos sd
  :math:`\\sigma_c` (``protocol_v2_chaos.spread``: the spread of one seed's run nudged by float32
  ulps). Two runs one ulp apart already land :math:`\\sigma_c` apart, so no pairing by seed can
  bring the paired sd below it.

Pairing removed :math:`1 - \\text{paired}^2/\\text{unpaired}^2` of the contrast's variance and
could remove at most :math:`1 - \\text{floor}^2/\\text{unpaired}^2`. The seeds a test needs
(power at Holm's strictest level, the observed mean as the true effect; an equivalence at a
true gap of 0) are given at the paired sd and at the floor: the second is the fewest seeds any
pairing could make do with. A chaos sd rests on few runs (3 nudges and the claims run: 3
degrees of freedom), so the floor is itself an estimate and the table says so.
"""

from __future__ import annotations

import math
import statistics

from .. import report, spec
from ..planning import contrast_weights, per_seed
from ..power import seeds_for_power
from . import protocol_v2_chaos as v2c


def _seeds_for(ep: spec.Endpoint, effect: float, sd: float, alpha: float, power: float):
    # an equivalence is planned as the protocol plans it, at a true gap of 0
    true = 0.0 if ep.test == "equivalence" else effect
    return seeds_for_power(ep.test, true, sd, alpha, power, ep.alternative, ep.margin)


def pairing(study: spec.Study, chaos: spec.Study | None, seed: int = 0,
            power: float = 0.8, alpha: float = 0.05) -> list[dict]:
    """One row per primary endpoint with a contrast (module docstring); ``alpha`` is the
    family's, divided by the number of primaries for Holm's strictest level."""
    primaries = [ep for ep in study.endpoints if ep.primary]
    level = alpha / max(1, len(primaries))
    cells = report.cell_values(study)
    chaos_sd = {c: v2c.spread(study, chaos, c, seed)["chaos_sd"] for c in v2c.CELLS}
    rows = []
    for ep in primaries:
        w = contrast_weights(ep)
        if w is None:
            continue
        d = per_seed(ep, cells)
        row = {"name": ep.name, "weights": w, "n": len(d), "mean": None, "paired": None,
               "unpaired": None, "floor": None, "removed": None, "removable": None,
               "seeds_paired": None, "seeds_floor": None, "level": level}
        if len(d) >= 2:
            unpaired = math.sqrt(sum(
                wc ** 2 * statistics.variance([cells[c][k]["value"] for k in d])
                for c, wc in w.items()))
            row.update(mean=statistics.mean(d.values()), paired=statistics.stdev(d.values()),
                       unpaired=unpaired)
            if unpaired > 0:
                row["removed"] = 1 - row["paired"] ** 2 / unpaired ** 2
            if row["paired"] > 0:
                row["seeds_paired"] = _seeds_for(ep, row["mean"], row["paired"], level, power)
        if all(chaos_sd.get(c) is not None for c in w):
            floor = math.sqrt(sum(wc ** 2 * chaos_sd[c] ** 2 for c, wc in w.items()))
            row["floor"] = floor
            if row["unpaired"]:
                row["removable"] = 1 - floor ** 2 / row["unpaired"] ** 2
            if floor > 0 and row["mean"] is not None:
                row["seeds_floor"] = _seeds_for(ep, row["mean"], floor, level, power)
        rows.append(row)
    return rows


def _f(x, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def _seeds(row: dict, key: str) -> str:
    # no count: no sd yet, more than 200, or a mean the test cannot establish
    return "—" if row[key] is None else str(row[key])


def pairing_table(power: float, alpha: float, study_path=v2c.STUDY, chaos_path=v2c.CHAOS,
                  seed: int = 0) -> str:
    """``pairing`` as Markdown (``power`` and the family's ``alpha``: protocol-v2.toml's)."""
    study = spec.load(study_path)
    chaos = spec.load(chaos_path) if chaos_path.is_file() else None
    rows = pairing(study, chaos, seed, power, alpha)
    level = rows[0]["level"] if rows else alpha
    lines = [f"Seeds for power {power} at Holm's strictest level α = {level:.4f}, "
             "at the paired sd and at the chaos floor (the fewest any pairing allows; the "
             "floor rests on 3 degrees of freedom per cell; — where there is no sd yet, or no "
             "count: more than 200 seeds, or a mean the test cannot establish):", "",
             "| endpoint | seeds | mean | unpaired sd | paired sd | chaos floor | pairing "
             "removed | could remove | seeds needed (paired) | (floor) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['n']} | {_f(r['mean'], '+.4f')} | {_f(r['unpaired'], '.4f')} | "
            f"{_f(r['paired'], '.4f')} | {_f(r['floor'], '.4f')} | {_f(r['removed'], '.0%')} | "
            f"{_f(r['removable'], '.0%')} | {_seeds(r, 'seeds_paired')} | "
            f"{_seeds(r, 'seeds_floor')} |")
    return "\n".join(lines) + "\n"


__all__ = ["pairing", "pairing_table"]
