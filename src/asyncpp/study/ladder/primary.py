r"""The ladder's primary family: the endpoints protocol v2 declares primary
(``experiments/opt-180k/protocol-v2.toml``, ``[[endpoint]]``), each by its declared test on the
`opt-180k` results, Holm-adjusted across the family; every other part of the ladder's verdicts
is exploratory (its p unadjusted).

An endpoint with a ``contrast`` :math:`w` reads, per seed k common to its cells,
:math:`c_k = \sum_m w_m\,L_{m,k}` (e.g. 2BW − sync) and tests it as declared:

- "one-sided, H1: contrast > 0" — paired t, :math:`p = P(T_{n-1} \ge \bar c\sqrt n/s_c)`;
- "two-sided" — :math:`p = 2P(T_{n-1} \ge |\bar c|\sqrt n/s_c)`;
- "TOST at margins.…" — two one-sided tests within ±m (``asyncpp.study.stats.tost``).

The ``per_seed`` slope endpoint fits, per seed, the least-squares slope of its 2BW gap on
:math:`\log_2 k` over the token ladder's lengths k that seed ran (≥ 3 of them), and tests the
slopes with a one-sample t, one-sided, H1: slope < 0.

Holm over the M endpoints: :math:`\tilde p_{(i)} = \max_{j \le i}\min\{1, (M-j+1)p_{(j)}\}`
(``asyncpp.study.stats.holm``); an endpoint holds when :math:`\tilde p < \alpha`.

These are the old runs (seeds 0–4, learning rates chosen on seed 0) read by protocol v2's
family — not protocol v2's own verdict, which its runs (selection seeds apart) will give.
"""

from __future__ import annotations

import dataclasses
import math

import tomllib
from scipy import stats as _st

from .. import stats as study_stats
from . import stats
from .paths import EXPERIMENTS
from .report_common import vals
from .tables_opt import TOKEN_LADDER

PROTOCOL_V2 = EXPERIMENTS / "opt-180k" / "protocol-v2.toml"

#: the part of the ladder's verdicts (``ladder_verdicts``) each primary endpoint reads, by the
#: prediction and the part's text; P4 (Muon + EF against sync) is no part of L1–L10
PARTS = {
    "P1": ("L1", "`opt-180k`: AdamW's 2BW gap above zero"),
    "P2": ("L1", "`opt-180k`: Muon's 2BW gap is 0"),
    "P3": ("L3", "EF recovers ≥ 50 % of AdamW's gap"),
    "P5": ("L6", "AdamW's gap does not grow with training tokens"),
}


def typeset(text: str) -> str:
    """The study file's ASCII (``-``, ``!=``) as the pages print it (−, ≠)."""
    return text.replace("!=", "≠").replace(" - ", " − ")


@dataclasses.dataclass(frozen=True)
class Primary:
    """One primary endpoint: its declaration, its test's estimate, 95 % interval (the TOST's
    90 % one), p, the Holm-adjusted p and the verdict on it."""

    id: str
    what: str
    test: str
    estimate: float | None
    lo: float | None
    hi: float | None
    p: float | None
    n: int
    p_holm: float | None = None

    @property
    def verdict(self) -> str:
        if self.p_holm is None:
            return "pending"
        return "holds" if self.p_holm < study_stats.ALPHA else "not established"

    def text(self) -> str:
        """"+0.245 [+0.110, +0.379], p = 0.003, Holm p = 0.012 (5 seeds)"."""
        if self.p is None:
            return f"not measurable ({self.n} seeds)"
        level = "90 %" if "TOST" in self.test else "95 %"
        iv = f"{level} [{stats.endpoint(self.lo)}, {stats.endpoint(self.hi)}]"
        return (f"{self.estimate:+.3f}, {iv}, p = {_p(self.p)}, Holm p = {_p(self.p_holm)} "
                f"({self.n} seeds)").replace("-", "−")


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.0e}"


def protocol() -> dict:
    return tomllib.loads(PROTOCOL_V2.read_text())


def _contrast(R, e: dict) -> dict[int, float]:
    cells = {m: vals(R, f"{e['optimizer']}-{m}") for m in e["contrast"]}
    seeds = study_stats.common(*cells.values())
    return {k: math.fsum(w * cells[m][k] for m, w in e["contrast"].items()) for k in seeds}


def _seed_slopes(R, o: str) -> dict[int, float]:
    """seed → least-squares slope of its 2BW gap on log₂ tokens per parameter."""
    pts: dict[int, list[tuple[float, float]]] = {}
    for k in sorted((*TOKEN_LADDER, 20)):
        suffix = "" if k == 20 else f"-tpp{k}"
        s, a = vals(R, f"{o}-sync{suffix}"), vals(R, f"{o}-async{suffix}")
        for seed in set(s) & set(a):
            pts.setdefault(seed, []).append((math.log2(k), a[seed] - s[seed]))
    return {seed: study_stats.gap_slope(p).estimate for seed, p in sorted(pts.items())
            if len(p) >= 3}


def _one_sample(xs: list[float], test: str, margin: float | None) -> tuple:
    """(estimate, lo, hi, p) of the declared test on the values ``xs``."""
    zero = dict.fromkeys(range(len(xs)), 0.0)
    x = dict(enumerate(xs))
    if "TOST" in test:
        t = study_stats.tost(x, zero, margin)
        return t.estimate, t.lo, t.hi, t.p
    t = study_stats.paired_t(x, zero)
    if "two-sided" in test:
        return t.estimate, t.lo, t.hi, t.p
    m, sd = t.estimate, math.sqrt(sum((v - t.estimate) ** 2 for v in xs) / (len(xs) - 1))
    stat = m / (sd / math.sqrt(len(xs))) if sd > 0 else math.copysign(math.inf, m or 1.0)
    greater = "> 0" in test
    p = _st.t.sf(stat, len(xs) - 1) if greater else _st.t.cdf(stat, len(xs) - 1)
    return t.estimate, t.lo, t.hi, float(p)


def family(R) -> list[Primary]:
    """Every primary endpoint of protocol v2 on the results ``R`` (opt-180k's), with Holm's
    adjustment across those that could be tested."""
    proto = protocol()
    margin = proto["margins"]["muon_equivalence"]
    out = []
    for e in proto["endpoint"]:
        xs = list(_contrast(R, e).values()) if "contrast" in e else \
            list(_seed_slopes(R, e["optimizer"]).values())
        if len(xs) < 2:
            out.append(Primary(e["id"], typeset(e["what"]), e["test"], None, None, None, None,
                               len(xs)))
            continue
        est, lo, hi, p = _one_sample(xs, e["test"], margin)
        out.append(Primary(e["id"], typeset(e["what"]), e["test"], est, lo, hi, p, len(xs)))
    adj = study_stats.holm({q.id: q.p for q in out if q.p is not None})
    return [dataclasses.replace(q, p_holm=adj.get(q.id)) for q in out]


def tag_of(key: str, part_text: str, fam: list[Primary]) -> str:
    """"; **primary P2**: …, Holm p = …" for the part that is a primary endpoint, else
    "" (the part is exploratory)."""
    for q in fam:
        if PARTS.get(q.id) == (key, part_text):
            return f"; **primary {q.id}** ({q.test}): {q.text()}: **{q.verdict}**"
    return ""


__all__ = ["PARTS", "Primary", "family", "protocol", "tag_of"]
