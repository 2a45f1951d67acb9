"""Protocol v2's own runs as the pages quote them: ``asyncpp-study``'s report of
``experiments/opt-180k/protocol-v2/study.toml`` (learning rates chosen on the selection seeds,
the declared claims seeds, Holm over P1-P5), read from the result files committed beside it.

Markers (``opt-180k/KIND/ARGS`` in the pages, filled by ``report.py --fill-readme``):

- ``v2runs`` — "N of M": the claims results on disk of the M the study declares;
- ``v2sel`` — "N of M": the selection runs on disk of the M its grids ask for so far (a grid
  widened past an edge asks for more);
- ``v2family`` — the primary family: "pending (N of M runs of the primaries made)" until
  every declared run of P1-P5's cells is on disk, then "judged (Holm over K)";
- ``v2lr/CELL`` — the lr chosen for CELL on the selection seeds, or "selection under way";
- ``v2grid/CELL`` — CELL's mean final loss per grid lr on the selection seeds ("0.02: 4.270,
  0.04: 4.223, …"), what its lr was chosen from; "selection under way";
- ``v2/E`` — endpoint E's estimate, its interval (90 % for a one-sided test, as its one-sided
  95 % bound), p, Holm's p once the family is complete, and the seeds; "no claims run yet";
- ``v2share/E`` — share endpoint E's share with Fieller's 95 % interval, "69 % [62, 75]"
  (the report's, in percent), "no claims run yet";
- ``v2gapci/SYNC/ASYNC`` — the paired gap ASYNC − SYNC over the claims seeds both cells have,
  with its 95 % t-interval ("+0.085 [+0.069, +0.101]"), as the ladder's ``gapci``; "no claims
  run yet" below two common seeds;
- ``v2recfi/SYNC/ASYNC/EF`` — the share of that gap EF recovers with Fieller's 95 % interval
  on the seeds the three cells share ("87 % [68, 110]"), only where the gap's interval
  excludes 0 ("— (gap within noise)" otherwise), as the ladder's ``recfi``. Both are
  exploratory readings beside the declared endpoints (``stats.paired_t``,
  ``stats.fieller_share``), not tests of their own;
- ``v2vd/E`` — E's prediction: "holds" (the study's verdict establishes it; a two-sided
  difference adds the sign of a − b, "holds (> 0)"), "not established" (an equivalence
  adds its reverse reading, exploratory: "— beyond +m: 95 % [lo, hi], p = …" or
  "— inconclusive: …"),
  "pending: N runs to go" while its cells lack N declared runs, "pending: the other
  primaries' runs" while its family is incomplete (the report's rule: a test runs once).

The verdicts are the study report's (``asyncpp.study.report.judge``), not recomputed here.
"""

from __future__ import annotations

import functools
import re

from .. import report as study_report
from .. import runner, spec
from ..report import p_text, share_interval_text
from ..stats import TooFewSeeds, fieller_share, paired_t
from .paths import EXPERIMENTS

STUDY = EXPERIMENTS / "opt-180k" / "protocol-v2" / "study.toml"


@functools.lru_cache(maxsize=4)
def _state(path: str):
    s = spec.load(path)
    cells = study_report.cell_values(s)
    rows = {r["name"]: r for r in study_report.judge(s, cells)}
    return s, cells, rows


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:+.3f}".replace("-", "−")


def endpoint_text(row: dict) -> str:
    """"+0.245, 90 % [+0.140, +0.350], p = 0.004, Holm p = 0.018 (14 seeds)"."""
    if row.get("estimate") is None:
        return "no claims run yet"
    lvl = round(100 * row.get("interval_level", 0.95))
    iv = f"[{_num(row['lo'])}, {_num(row['hi'])}]"
    holm = "" if row.get("p_holm") is None else f", Holm p = {p_text(row['p_holm'])}"
    return f"{_num(row['estimate'])}, {lvl} % {iv}, p = {p_text(row['p'])}{holm} ({row['n']} seeds)"


def prediction_word(row: dict) -> str:
    """The study's verdict as the fate of the endpoint's prediction."""
    v = row.get("verdict", "")
    if row.get("missing"):
        n = row["missing"]
        return f"pending: {n} run{'' if n == 1 else 's'} to go"
    if v.startswith("pending"):
        return "pending: the other primaries' runs"
    if not v or v.startswith("too few seeds"):
        return "pending"
    if v == "not established":
        # an equivalence's reverse reading (report.reverse_reading), labelled exploratory
        return f"{v} — {row['reading']} (exploratory)" if row.get("reading") else v
    # a two-sided difference says which way it holds: the prediction does not
    m = re.fullmatch(r"(\S+) ([<>]) (\S+)", v)
    if m and row.get("alternative", "two-sided") == "two-sided":
        return f"holds ({m[2]} 0)"
    return "holds"


def marker(kind: str, args: tuple[str, ...], path=STUDY) -> str:
    """The value of marker ``kind/args`` (module docstring)."""
    s, cells, rows = _state(str(path))
    if kind == "v2runs":
        declared = sum(len(s.claims_of(c)) for c in s.cells)
        return f"{sum(len(v) for v in cells.values())} of {declared}"
    if kind == "v2family":
        prim = sorted({c for ep in s.endpoints if ep.primary for c in ep.cells()})
        made = sum(len(set(cells[c]) & set(s.claims_of(c))) for c in prim)
        declared = sum(len(s.claims_of(c)) for c in prim)
        if made < declared:
            return f"pending ({made} of {declared} runs of the primaries made)"
        return f"judged (Holm over {sum(ep.primary for ep in s.endpoints)})"
    if kind == "v2sel":
        runs = runner.selection_runs(s)
        return f"{sum(runner.done(r) for r in runs)} of {len(runs)}"
    if kind in ("v2lr", "v2grid"):
        if args[0] not in s.cells:
            raise KeyError(f"protocol v2 has no cell {args[0]!r}")
        ch = runner.chosen_lrs(s).get(args[0])
        if ch is None:
            return "selection under way"
        if kind == "v2grid":
            return ", ".join(f"{float(lr):g}: {v:.3f}" for lr, v in ch["means"].items())
        return f"{ch['lr']:g}"
    if kind in ("v2gapci", "v2recfi"):
        want = 2 if kind == "v2gapci" else 3
        if len(args) != want or any(c not in s.cells for c in args):
            raise KeyError(f"{kind} takes {want} of protocol v2's cells, got {args}")
        sync, late, *ef = ({k: r["value"] for k, r in cells[c].items()} for c in args)
        try:
            gap = paired_t(late, sync)
        except TooFewSeeds:
            return "no claims run yet"
        if kind == "v2gapci":
            return f"{gap.estimate:+.3f} [{gap.lo:+.3f}, {gap.hi:+.3f}]"
        if gap.lo <= 0 <= gap.hi:
            return "— (gap within noise)"
        sh = fieller_share(late, ef[0], sync)
        return share_interval_text(sh.estimate, sh.lo, sh.hi)
    if args[0] not in rows:
        raise KeyError(f"protocol v2 has no endpoint {args[0]!r} ({', '.join(rows)})")
    row = rows[args[0]]
    if kind == "v2share":
        if row["test"] != "share":
            raise KeyError(f"protocol v2's {args[0]} is not a share endpoint")
        if "share" not in row:
            return "no claims run yet"
        sh = row["share"]
        return share_interval_text(sh["estimate"], sh["lo"], sh["hi"])
    return prediction_word(row) if kind == "v2vd" else endpoint_text(row)


__all__ = ["STUDY", "endpoint_text", "marker", "prediction_word"]
