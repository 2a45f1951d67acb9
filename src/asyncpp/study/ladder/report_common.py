r"""What every table of the report shares: reading the results, one cell's seed values, and the
three ways a table states a number, all through ``stats``:

- a cell's final validation loss, mean ± sd over its seeds; the column header carries n
  (a cell whose n differs from its column's says so: "(n=1)");
- a paired difference of two cells, :math:`\bar d` ± :math:`s_d` with its 95 % t-interval,
  how many seeds go the way of the mean, and the verdict of ``stats.verdict``;
- the share of a gap a correction recovers, ``stats.share`` on the seed means (the seeds' own
  shares in parentheses).

A diverged run counts as +∞: a cell with one shows "diverged (k/n)", a difference with one
shows "—".
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

from . import protocol, stats, tables
from . import tables_cells as tc
from .paths import EXPERIMENTS

HERE = EXPERIMENTS

PAPER_360M = {  # the paper's 360M results, final val loss (sync, async, async+EF)
    "muon": (2.578, 2.590, 2.583),
    "adamw": (2.612, 2.890, 2.640),
    "soap": (2.581, 2.608, 2.590),
    "adan": (2.641, 2.651, None),
}
LABEL = {"adamw": "AdamW", "muon": "Muon", "soap": "SOAP", "adan": "Adan", "lion": "Lion",
         "mars": "MARS"}
MIT_LABEL = {"async": "async (no mitigation)", "syncstart": "sync start (10 %)",
             "cooldown": "sync cooldown (10 %)", "taylor": "Taylor (λ = 0.1)",
             "ef": "EF", "efcooldown": "EF + sync cooldown", "efg": "EF(γ*)",
             "nag": "Nesterov"}


def load_results(results: Path) -> dict[str, dict[int, dict]]:
    """cell → seed → record (all statuses)."""
    out: dict[str, dict[int, dict]] = {}
    for f in sorted(results.glob("*.json")):
        try:
            r = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if "cell" in r and "seed" in r:
            out.setdefault(r["cell"], {})[int(r["seed"])] = r
    return out


def _val(rec: dict) -> float:
    v = rec.get("final", {}).get("val_loss")
    return v if (rec.get("status") == "ok" and v is not None) else math.inf


def vals(R, cell: str, seeds=None) -> dict[int, float]:
    """seed → final val loss (inf if diverged) of ``cell`` (restricted to ``seeds``)."""
    got = R.get(cell, {})
    return {s: _val(r) for s, r in got.items() if seeds is None or s in seeds}


def minus(text: str) -> str:
    """Typographic minus, and no negative zero ("−0 %" reads as a loss)."""
    if re.fullmatch(r"-0(\.0+)?( %)?", text):
        text = text[1:]
    return text.replace("-", "−")


def _finite(xs) -> bool:
    return all(math.isfinite(x) for x in xs)


# -- values that carry their n ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Val:
    """A table entry over n seeds; :func:`grid` moves n into the column header."""

    text: str
    n: int | None = None

    def __str__(self) -> str:
        return self.text if self.n is None else f"{self.text} (n={self.n})"


def summary_text(xs: list[float], digits: int = 3) -> str:
    """mean ± sd of ``xs`` (``stats.summary``); "—" empty, "diverged (k/n)" with a +∞."""
    if not xs:
        return "—"
    if not _finite(xs):
        return f"diverged ({sum(not math.isfinite(x) for x in xs)}/{len(xs)})"
    return minus(stats.summary(xs).fmt(digits))


def values(xs: list[float], digits: int = 3) -> Val:
    return Val(summary_text(xs, digits), len(xs) or None)


def loss(R, cell: str, seeds=None, digits: int = 3) -> Val:
    """The final val loss of ``cell``, mean ± sd over its seeds."""
    return values(list(vals(R, cell, seeds).values()), digits)


def grid(head: list[str], rows: list[list]) -> str:
    """A Markdown table; a column of :class:`Val` gets the n most of its entries have in its
    header ("sync (n=3)"), an entry with another n keeps its own."""
    ncols = len(head)
    head = list(head)
    common: list[int | None] = [None] * ncols
    for j in range(ncols):
        ns = [r[j].n for r in rows if isinstance(r[j], Val) and r[j].n is not None]
        if ns:
            common[j] = max(set(ns), key=lambda k: (ns.count(k), k))
            head[j] = f"{head[j]} (n={common[j]})"
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * ncols]
    for r in rows:
        out = []
        for j, x in enumerate(r):
            if isinstance(x, Val):
                out.append(x.text if x.n in (None, common[j]) else str(x))
            else:
                out.append(str(x))
        lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines)


# -- a table on a narrow page -------------------------------------------------------------------
NBSP = "\u00a0"
SHORT_CELL = 24  # characters: a label or value this short reads as one unit, on one line
_KEEP_TOGETHER = (  # the parts of one value, which a line break would split
    (re.compile(r"(?<=\d) ± (?=\d)"), f"{NBSP}±{NBSP}"),        # mean ± sd
    (re.compile(r"(?<=\d), (?=[+−]?\d[\d.]*\])"), f",{NBSP}"),    # [lo, hi]
    (re.compile(r"(?<=\d) (?=%)"), NBSP),                         # 27 %
    (re.compile(r"(?<=[τκβγηλP]) = (?=\S)"), f"{NBSP}={NBSP}"),    # τ = 1
)


def _cell_for_page(cell: str) -> str:
    shown = re.sub(r"[*`]", "", cell).strip()
    if len(shown) <= SHORT_CELL and "$" not in cell and "](" not in cell:
        return cell.strip().replace(" ", NBSP).join((" ", " "))
    for pat, rep in _KEEP_TOGETHER:
        cell = pat.sub(rep, cell)
    return cell


COLUMN_PX = 650  # the page's content column (about 688 px), less a margin for the estimate
# 16-px text (bold in a header); a long cell wraps to about WRAPPED_PX
CHAR_PX, HEAD_CHAR_PX, CELL_PAD_PX, WRAPPED_PX = 8.2, 9.2, 16, 140


def _width_px(cell: str, head: bool = False) -> float:
    """A generous estimate of the width a cell needs: a short one on one line, a long one
    (which wraps) about :data:`WRAPPED_PX`."""
    shown = re.sub(r"[*`]", "", cell).strip()
    if len(shown) > SHORT_CELL:
        return WRAPPED_PX + CELL_PAD_PX
    return len(shown) * (HEAD_CHAR_PX if head else CHAR_PX) + CELL_PAD_PX


def _is_label(column: list[str]) -> bool:
    """A column that names its row (optimizer, β, P, a comparison) rather than holding values:
    no n in its header, and no mean ± sd, interval, share, signed difference or "—" below."""
    return "(n=" not in column[0] and all(
        len(c.strip()) <= SHORT_CELL and not re.search(r"±|\[|%|—|/|diverged|^\s*[+−]", c)
        for c in column[1:])


def _split_wide(rows: list[list[str]]) -> list[list[list[str]]]:
    """``rows`` (header first) as one or more tables of at most :data:`COLUMN_PX` estimated
    width: the leading label columns are repeated, the value columns distributed in order."""
    ncols = len(rows[0])
    cols = [[r[j] if j < len(r) else "" for r in rows] for j in range(ncols)]
    width = [max(_width_px(c, head=i == 0) for i, c in enumerate(col)) for col in cols]
    if sum(width) <= COLUMN_PX:
        return [rows]
    nlab = 1
    while nlab < ncols - 1 and _is_label(cols[nlab]):
        nlab += 1
    values, room = list(range(nlab, ncols)), COLUMN_PX - sum(width[:nlab])
    chunks = [values]  # one value column (or none fits): the table as it is
    for parts in range(2, len(values) + 1):  # the fewest tables of near-equal column counts
        size = -(-len(values) // parts)
        chunks = [values[i:i + size] for i in range(0, len(values), size)]
        if all(sum(width[k] for k in c) <= room for c in chunks):
            break
    return [[[r[k] for k in [*range(nlab), *chunk]] for r in rows] for chunk in chunks]


# A page's shorter headers for tables.md's (the page's text says what they stand for).
PAGE_HEAD = {"async (2BW, τ = 1)": "async", "EF recovers (per seed)": "EF recovers",
             "seeds agreeing": "seeds"}
_N_SUFFIX = re.compile(r"\s*\(n=\d+\)\s*$")


def _compact(rows: list[list[str]]) -> list[list[str]]:
    """Short headers (:data:`PAGE_HEAD`), and a difference and its 95 % interval in one cell
    ("+0.161 ± 0.025 [+0.100, +0.222]"; ``COMPARE_HEAD``'s first two columns)."""
    head = []
    for h in rows[0]:
        base, n = _N_SUFFIX.sub("", h).strip(), _N_SUFFIX.search(h)
        head.append(f" {PAGE_HEAD.get(base, base)}{n.group(0) if n else ''} ")
    rows = [head, *rows[1:]]
    bases = [_N_SUFFIX.sub("", h).strip() for h in head]
    for j in range(len(bases) - 1):
        if bases[j] == COMPARE_HEAD[0] and bases[j + 1] == COMPARE_HEAD[1]:
            n = _N_SUFFIX.search(head[j])
            merged = [f" difference [95 % CI]{n.group(0) if n else ''} "]
            for r in rows[1:]:
                d, ci = r[j].strip(), r[j + 1].strip()
                merged.append(f" {d} " if ci == "—" else f" {d} {ci} ")
            return [[*r[:j], m, *r[j + 2:]] for r, m in zip(rows, merged)]
    return rows


def _table_for_page(lines: list[str]) -> list[str]:
    rows = _compact([[c for c in ln.strip()[1:-1].split("|")] for ln in lines if
                     not re.fullmatch(r"[|\s:-]+", ln.strip())])
    head, body = rows[0], rows[1:]
    out: list[str] = []
    for part in _split_wide([head, *body]):
        if out:
            out.append("")
        out.append("|" + "|".join(_cell_for_page(c) for c in part[0]) + "|")
        out.append("|" + " --- |" * len(part[0]))
        out += ["|" + "|".join(_cell_for_page(c) for c in r) + "|" for r in part[1:]]
    return out


def page_md(md: str) -> str:
    """``md`` for a page about 700 px wide. In its tables a short cell (a label, a value,
    ≤ :data:`SHORT_CELL` characters) is kept on one line by no-break spaces, and in a longer
    one the parts of each value (mean ± sd, an interval [lo, hi], a percentage, τ = 1) are kept
    together, so a narrow column breaks between the words of a sentence, never inside a label
    or a number; headers are shortened and a difference shares its cell with its interval
    (:func:`_compact`); a table still too wide for the column is split into tables that fit,
    each repeating the row labels (the leading label columns). Text outside tables is unchanged,
    and ``tables.md`` keeps its tables whole."""
    out: list[str] = []
    block: list[str] = []
    for line in [*md.splitlines(), ""]:
        body = line.strip()
        if body.startswith("|") and body.endswith("|"):
            block.append(line)
            continue
        if len(block) >= 2 and re.fullmatch(r"[|\s:-]+", block[1].strip()):
            out += _table_for_page(block)
        else:
            out += block
        block = []
        out.append(line)
    out.pop()
    return "\n".join(out) + ("\n" if md.endswith("\n") else "")


# -- paired differences ------------------------------------------------------------------------
def pair(R, x: str, y: str, seeds=None) -> stats.Paired | None:
    """The paired difference x − y of two cells' final val losses over the seeds both have
    (restricted to ``seeds``); None when they share no seed or one diverged."""
    vx, vy = vals(R, x, seeds), vals(R, y, seeds)
    common = set(vx) & set(vy)
    if not common or not _finite([vx[k] for k in common] + [vy[k] for k in common]):
        return None
    return stats.paired(vx, vy)


def seed_gaps(R, s: str, a: str) -> dict[int, float]:
    """seed → a − s over the seeds both cells have (finite ones)."""
    vs, va = vals(R, s), vals(R, a)
    return {k: va[k] - vs[k] for k in set(vs) & set(va)
            if math.isfinite(va[k]) and math.isfinite(vs[k])}


def diffs(R, base: str, other: str, seeds=None) -> list[float]:
    """Per-seed other − base over the seeds both have (restricted to ``seeds``; seed order)."""
    vb, vo = vals(R, base, seeds), vals(R, other, seeds)
    return [vo[s] - vb[s] for s in sorted(set(vb) & set(vo))]


def diff_val(R, base: str, other: str, seeds=None, digits: int = 3) -> Val:
    """other − base, paired by seed: signed mean ± sd (n)."""
    d = diffs(R, base, other, seeds)
    if not d:
        return Val("—")
    if not _finite(d):
        return Val(f"diverged ({sum(not math.isfinite(x) for x in d)}/{len(d)})", len(d))
    s = stats.summary(d)
    sd = "" if s.sd is None else f" ± {s.sd:.{digits}f}"
    return Val(minus(f"{s.mean:+.{digits}f}{sd}"), s.n)


def interval_text(p: stats.Paired | None, digits: int = 3) -> str:
    """"[lo, hi]" of the paired 95 % t-interval; "—" without one (n < 2)."""
    if p is None or p.lo is None:
        return "—"
    return minus(p.interval(digits))


def agreeing(p: stats.Paired | None) -> str:
    """How many seeds go the way of the mean, "3/3"."""
    if p is None:
        return "—"
    k = p.negative if p.mean < 0 else p.positive
    return f"{k}/{p.n}"


def verdict(p: stats.Paired | None, margin: float = 0.0) -> str:
    """``stats.verdict`` of x − y (lower loss is better): "better" (x lower), "worse", "within
    noise", "too few seeds"; "—" without a comparison."""
    return "—" if p is None else stats.verdict(p, margin)


def verdict_of_at_least(p: stats.Paired | None, min_seeds: int) -> str:
    """:func:`verdict`, but "pending (n of k seeds)" while fewer than ``min_seeds`` seeds are
    paired: the compute-optimal ladder's rule gives a verdict only on ≥ 3 seeds, though two
    seeds already make an interval."""
    if p is not None and p.lo is not None and p.n < min_seeds:
        return f"pending ({p.n} of {min_seeds} seeds)"
    return verdict(p)


COMPARE_HEAD = ["difference", "95 % interval", "seeds agreeing", "verdict"]


def compare_cells(R, x: str, y: str, seeds=None, digits: int = 3, min_seeds: int = 2) -> list:
    """The four entries of :data:`COMPARE_HEAD` for x − y (:func:`verdict_of_at_least`)."""
    p = pair(R, x, y, seeds)
    return [diff_val(R, y, x, seeds, digits), interval_text(p, digits), agreeing(p),
            verdict_of_at_least(p, min_seeds)]


# -- shares ------------------------------------------------------------------------------------
def share(R, s: str, a: str, c: str, seeds=None) -> tuple[float | None, dict[int, float]]:
    """(% on the seed means, % per seed) of the gap a − s that c recovers (``stats.share``);
    (None, {}) when a cell diverged or the gap is zero."""
    vs, va, vc = (vals(R, x, seeds) for x in (s, a, c))
    common = set(vs) & set(va) & set(vc)
    if not common or not _finite([v[k] for v in (vs, va, vc) for k in common]):
        return None, {}
    on_means, per = stats.share(vs, va, vc)
    per = {k: 100.0 * x for k, x in per.items() if abs(va[k] - vs[k]) >= 1e-12}
    if on_means is None or abs(_mean(va, common) - _mean(vs, common)) < 1e-12:
        return None, per
    return 100.0 * on_means, per


def _mean(v: dict, keys) -> float:
    return sum(v[k] for k in keys) / len(keys)


def paper_share(o: str) -> float | None:
    """The paper's EF share of optimizer ``o`` in % (``stats.share`` on its 360M numbers);
    None where the paper gives no EF number."""
    s, a, e = PAPER_360M[o]
    if e is None:
        return None
    on_means, _ = stats.share({0: s}, {0: a}, {0: e})
    return 100.0 * on_means


def share_val(R, s: str, a: str, c: str, seeds=None) -> Val:
    """The share c recovers of the gap a − s as every page states it: the ratio of the mean
    gaps with Fieller's 95 % interval, "54 % [35, 81]", or "41 % [interval unbounded]" while
    the gap itself is not established, "50 % (1 seed)" on a single seed; with n."""
    x, _ = share(R, s, a, c, seeds)
    if x is None:
        return Val("—")
    sh = protocol.fieller_share(*(vals(R, v, seeds) for v in (s, a, c)))
    if sh.share is None:
        # one common seed: the share on it, and no interval to put beside it
        return Val(minus(f"{x:.0f} % (1 seed)") if sh.n == 1 else "—", sh.n)
    text = sh.text() if sh.lo is not None else f"{sh.share:.0f} % [interval unbounded]"
    return Val(minus(text), sh.n)


def min_seeds_of(tier: str) -> int:
    """Seeds a verdict needs: 3 on the compute-optimal ladder (its pre-registered rule, the
    ``opt-*`` tiers and their ``gpu`` rung), 2 (an interval) elsewhere."""
    return 3 if tier.startswith("opt-") or tier == "gpu" else 2


def no_share_reason(R, s: str, a: str, min_seeds: int = 2) -> str | None:
    """Why no share of the paired gap a − s is stated, or None when one may be: "no gap yet"
    (no seed has both cells), "too few seeds" (one paired seed, so no interval), "n of k
    seeds" (fewer than ``min_seeds``: the verdict on the gap is pending), "within noise"
    (the interval holds zero: a share of such a gap is a ratio of noise)."""
    p = pair(R, a, s)
    if p is None:
        return "no gap yet"
    if p.lo is None:
        return "too few seeds"
    if p.n < min_seeds:
        return f"{p.n} of {min_seeds} seeds"
    return None if p.excludes_zero else "within noise"


def no_share_text(why: str | None) -> str | None:
    """What a table prints instead of a share, for a reason of :func:`no_share_reason`
    ("— (gap within noise)", "— (too few seeds)", "—" without a gap); None when a share may
    be printed."""
    if why is None:
        return None
    if why == "no gap yet":
        return "—"
    return f"— (gap {why})" if why == "within noise" else f"— ({why})"


def share_diff(R, s: str, a: str, c1: str, c2: str, seeds=None):
    """c2's share of the gap a − s minus c1's, in points (``protocol.fieller_share_gain``:
    the difference of the two ratio-of-means shares :func:`share` states, Fieller's
    interval); None without 2 seeds common to the four cells or with a diverged one."""
    vs, va, v1, v2 = (vals(R, x, seeds) for x in (s, a, c1, c2))
    common = set(vs) & set(va) & set(v1) & set(v2)
    if len(common) < 2 or not _finite([v[k] for v in (vs, va, v1, v2) for k in common]):
        return None
    g = protocol.fieller_share_gain(vs, va, v1, v2)
    return None if g.pp is None else g


def pct(x: float | None) -> str:
    return "—" if x is None else minus(f"{x:.0f} %")


def lr_of(R, cell: str) -> str:
    for r in R.get(cell, {}).values():
        return f"{r['config']['optimizer']['lr']:g}"
    return "—"


def drift(R, cell: str) -> list[float]:
    """ρ̄ (``drift.mean``) of the finished runs of ``cell``."""
    return [r["drift"]["mean"] for r in R.get(cell, {}).values()
            if r.get("status") == "ok" and r.get("drift", {}).get("mean") is not None]


def spectral_drift(R, cell: str) -> list[float]:
    """T2's drift δ̄ (``drift.spectral_mean``: mean over updates of max over matrices of
    ‖u_n/η_n − u_(n−1)/η_(n−1)‖₂) of the finished runs of ``cell`` that logged it."""
    return [r["drift"]["spectral_mean"] for r in R.get(cell, {}).values()
            if r.get("status") == "ok" and r.get("drift", {}).get("spectral_mean") is not None]


def section(t: str, body: list[str]) -> list[str]:
    """A tables.md section: the declared title of table ``t`` and its body."""
    return [f"## {tables.TABLES[t].title}", *body]


__all__ = ["COMPARE_HEAD", "LABEL", "MIT_LABEL", "PAPER_360M", "Val",
           "compare_cells", "diffs", "diff_val", "drift", "grid",
           "interval_text", "min_seeds_of", "no_share_reason",
           "load_results", "loss", "lr_of",
           "minus", "page_md", "pair", "pct", "section", "share", "share_diff", "share_val",
           "spectral_drift", "summary_text", "tc", "values", "vals", "verdict"]
