r"""The paper's claims, one verdict each per tier, from the committed result files only.

For every tier that has ``experiments/<tier>/results/*.json`` this module forms, per claim of
the paper (``/work/shared/PAPER.md``, the numbered claims of ``experiments/README.md``), the
paired comparison over seeds that tests it (:func:`stats.paired`: mean difference
:math:`\bar d`, its 95 % t-interval :math:`\bar d \pm t_{0.975,n-1} s_d/\sqrt n`) and a verdict
by the project's rule: "reproduced" or "not reproduced" only when the interval excludes zero;
otherwise "within noise".

A claimed *share* of the gap is EF's share as the study statistics define it, the ratio of the
mean paired gaps over the n seeds common to the synchronous, 2BW and EF cells
(:math:`S_k, A_k, E_k`):

.. math::
    \rho = \frac{\bar N}{\bar D}, \qquad N_k = A_k - E_k, \quad D_k = A_k - S_k,

with Fieller's 95 % interval (``protocol.fieller_share``, which reads
``asyncpp.study.stats.fieller_share``): the :math:`\rho` with
:math:`(\bar N - \rho \bar D)^2 \le t^2_{0.975,n-1} (v_{NN} - 2\rho v_{ND} + \rho^2 v_{DD})`.
It is "reproduced" when that interval lies wholly inside the paper's range, "not reproduced"
when wholly outside it, "within noise" when it overlaps an end; the interval is unbounded
exactly when the gap :math:`\bar D` itself is not established, and then no share is stated.

Each verdict carries its **regime**, read from the results' own configuration: parameters
(``final.params``, embeddings included, as ``asyncpp-train`` counts them), training tokens
:math:`T = \text{steps} \times \text{batch} \times \text{seq}`, tokens per parameter
:math:`T/N` and epochs :math:`T / T_\text{corpus}` (``final.epochs`` when the result records
it; otherwise the training split of the run's corpus, loaded as the trainer loads it). A tier
is *in the paper's regime* when :math:`19 \le T/N \le 21` and it makes at most one epoch;
:func:`tiers` lists those first (the compute-optimal ``opt-*`` tiers once their results
exist), then the short-training tiers by size.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import SimpleNamespace

from asyncpp.data import load_data

from . import protocol, stats
from .paths import EXPERIMENTS
from .plotting import pyplot

HERE = EXPERIMENTS
PAPER_TOKENS_PER_PARAM = 20.0
REGIME_TPP = (19.0, 21.0)  # the paper's 20 tokens/parameter, ± 1


@dataclasses.dataclass(frozen=True)
class Regime:
    """Where a tier's runs sit against the paper's 20 tokens/parameter, one epoch or less."""

    tier: str
    params: int
    tokens: int
    steps: int
    epochs: float | None

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params

    @property
    def paper_regime(self) -> bool:
        lo, hi = REGIME_TPP
        return lo <= self.tokens_per_param <= hi and (self.epochs is None or self.epochs <= 1.0)

    def describe(self) -> str:
        """``"0.13M parameters, 2.3 tokens/parameter, 0.18 epochs"``."""
        ep = "epochs unknown" if self.epochs is None else f"{self.epochs:.2f} epochs"
        return (f"{self.params / 1e6:.2g}M parameters, {self.tokens_per_param:.2g} "
                f"tokens/parameter, {ep}")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One claim tested on one tier."""

    claim: str  # the claim's key in CLAIMS
    tier: str
    word: str  # "reproduced", "not reproduced", "within noise", "not run", "too few seeds"
    evidence: str  # what was compared, with its numbers
    paired: stats.Paired | None = None
    regime: Regime | None = None  # of the cells compared (the tier's, or the deep model's)
    cell: str | None = None  # the front page's short form (None: from ``paired``)


@dataclasses.dataclass(frozen=True)
class Claim:
    key: str
    short: str  # the claim in a few words (the figure's axis)
    number: str  # the paper's claim number (PAPER.md)
    statement: str  # the paper's claim, as the reader meets it
    shown_in: str  # the table of the Experiments page that shows the evidence
    test: Callable[[dict], Verdict | None]
    cell: str | None = None  # whose configuration gives the regime (None: the tier's)


# -- reading the results ------------------------------------------------------------------------
def load(tier: str, root: Path = HERE) -> dict[str, dict[int, dict]]:
    """``{cell: {seed: record}}`` of the finished runs of ``root/<tier>/results``."""
    out: dict[str, dict[int, dict]] = {}
    for path in sorted((root / tier / "results").glob("*.json")):
        rec = json.loads(path.read_text(encoding="utf-8"))
        if rec.get("status") != "ok" or not rec.get("final"):
            continue
        v = rec["final"].get("val_loss")
        if v is None or not math.isfinite(v):
            continue
        out.setdefault(rec["cell"], {})[int(rec["seed"])] = rec
    return out


def vals(R: dict, cell: str) -> dict[int, float]:
    """``{seed: final validation loss}`` of one cell (empty when it has no results)."""
    return {k: r["final"]["val_loss"] for k, r in R.get(cell, {}).items()}


@cache
def _corpus_train_tokens(data_json: str, vocab: int) -> int:
    """Training tokens of the corpus a run read, loaded as the trainer loads it (cached)."""
    bundle = load_data(SimpleNamespace(**json.loads(data_json)), vocab)
    return int(sum(len(a) for a in bundle.train.arrays))


def regime(tier: str, R: dict, cell: str | None = None) -> Regime | None:
    """The regime of a tier, from ``cell``'s configuration (default: its synchronous Muon,
    else AdamW, else any run)."""
    cells = (cell,) if cell else ("muon-sync", "adamw-sync")
    recs = [r for c in cells for r in R.get(c, {}).values()]
    if not recs and cell is None:
        recs = [r for runs in R.values() for r in runs.values()]
    if not recs:
        return None
    rec = recs[0]
    cfg, fin = rec["config"], rec["final"]
    tokens = int(fin.get("tokens") or cfg["train"]["steps"] * cfg["train"]["batch_size"]
                 * cfg["data"]["seq_len"])
    epochs = fin.get("epochs")
    if epochs is None:
        try:
            epochs = tokens / _corpus_train_tokens(json.dumps(cfg["data"], sort_keys=True),
                                                   int(cfg["model"]["vocab_size"]))
        except (ImportError, OSError, ValueError, AttributeError):
            epochs = None  # the corpus is not available here: said so, never guessed
    return Regime(tier, int(fin["params"]), tokens, int(cfg["train"]["steps"]), epochs)


def tiers(root: Path = HERE) -> list[str]:
    """Tiers with results, the paper's regime first (by size), then the others by size."""
    found = []
    for d in sorted(p for p in root.iterdir() if (p / "results").is_dir()):
        R = load(d.name, root)
        reg = regime(d.name, R)
        if reg is not None:
            found.append((not reg.paper_regime, reg.params, d.name))
    return [name for *_, name in sorted(found)]


# -- the tests of the claims ---------------------------------------------------------------------
def _word(p: stats.Paired, claimed_sign: int) -> str:
    """The rule: a verdict word only when the 95 % interval excludes zero."""
    if p.lo is None:
        return "too few seeds"
    if not p.excludes_zero:
        return "within noise"
    return "reproduced" if (p.mean > 0) == (claimed_sign > 0) else "not reproduced"


def _gap(R: dict, sync: str, other: str) -> dict[int, float]:
    s, o = vals(R, sync), vals(R, other)
    return {k: o[k] - s[k] for k in s.keys() & o.keys()}


def _signed_test(a: dict, b: dict, claimed_sign: int, what: str, tier: str, key: str
                 ) -> Verdict | None:
    if not (a.keys() & b.keys()):
        return None
    p = stats.paired(a, b)
    return Verdict(key, tier, _word(p, claimed_sign), f"{what} {p.fmt()}", p)


def _adamw_gap(R, tier):
    return _signed_test(vals(R, "adamw-async"), vals(R, "adamw-sync"), +1,
                        "AdamW async − sync:", tier, "adamw-gap")


def _muon_small(R, tier):
    return _signed_test(_gap(R, "adamw-sync", "adamw-async"), _gap(R, "muon-sync", "muon-async"),
                        +1, "AdamW's gap − Muon's gap:", tier, "muon-small")


def _momentum(R, tier):
    hi = _gap(R, "muon-sync-beta0.98", "muon-async-beta0.98")
    lo = _gap(R, "muon-sync-beta0.8", "muon-async-beta0.8")
    return _signed_test(hi, lo, -1, "Muon's gap at β = 0.98 − at β = 0.8:", tier, "momentum")


def _ef(opt: str, label: str):
    def test(R, tier):
        return _signed_test(vals(R, f"{opt}-ef"), vals(R, f"{opt}-async"), -1,
                            f"{label} EF − async:", tier, f"{opt}-ef")
    return test


def _share_size(opt: str, label: str, lo: float, hi: float):
    """EF's share :math:`\rho = \bar N/\bar D` (2BW − EF over 2BW − sync, the ratio of the
    mean paired gaps) with Fieller's 95 % interval, against the paper's range [lo, hi]; no
    share is stated while the interval is unbounded (the gap 2BW − sync not established)."""
    def test(R, tier):
        s, a, e = (vals(R, f"{opt}-{m}") for m in ("sync", "async", "ef"))
        sh = protocol.fieller_share(s, a, e)
        if sh.n < 2:
            return None
        seeds = set(s) & set(a) & set(e)
        if sh.share is None or sh.lo is None:
            gap = stats.paired({k: a[k] for k in seeds}, {k: s[k] for k in seeds})
            ev = (f"{label}'s gap itself is within noise ({gap.fmt()}): no share of it is "
                  f"stated (n = {gap.n}; the paper's {100 * lo:.0f}–{100 * hi:.0f} %)")
            return Verdict(f"{opt}-share", tier, "within noise", ev,
                           cell="no share of a gap within noise")
        a_, b_ = sh.lo / 100, sh.hi / 100
        word = ("reproduced" if lo <= a_ and b_ <= hi else
                "not reproduced" if b_ < lo or a_ > hi else "within noise")
        short = sh.text()
        ev = (f"{label} EF share (2BW − EF)/(2BW − sync) on the mean gaps {short} (Fieller's "
              f"95 % interval, n = {sh.n}) against the paper's {100 * lo:.0f}–{100 * hi:.0f} %")
        return Verdict(f"{opt}-share", tier, word, ev, cell=short.replace("-", "−"))
    return test


def _mitigation(opt: str, label: str):
    def test(R, tier):
        alts = [c for c in (f"{opt}-syncstart", f"{opt}-cooldown", f"{opt}-taylor")
                if vals(R, c)]
        if not alts or not vals(R, f"{opt}-ef"):
            return None
        best = min(alts, key=lambda c: stats.summary(vals(R, c)).mean)
        return _signed_test(vals(R, f"{opt}-ef"), vals(R, best), -1,
                            f"{label} EF − {best.split('-', 1)[1]} (the best other):", tier,
                            f"{opt}-mitigation")
    return test


def _pipedream(R, tier):
    v = _signed_test(vals(R, "deep-pipedream-P16"), vals(R, "deep-2bw-P16"), +1,
                     "PipeDream − 2BW at P = 16:", tier, "pipedream")
    if v is None:
        return None
    return dataclasses.replace(v, evidence=v.evidence + " (PipeDream made more, smaller updates "
                               "than 2BW here: the comparison is confounded by the update count)")


PAPER = "the paper"
CLAIMS: tuple[Claim, ...] = (
    Claim("adamw-gap", "AdamW's gap > 0", "2",
          "AdamW degrades under a one-step delay (+0.278 at 360M)", "Table 1", _adamw_gap),
    Claim("muon-small", "Muon's gap < AdamW's", "2",
          "Muon degrades far less than AdamW (+0.012 against +0.278)", "Table 1", _muon_small),
    Claim("momentum", "higher β, smaller gap", "2", "Higher momentum gives Muon a smaller gap",
          "Table 2", _momentum),
    Claim("muon-ef", "EF narrows Muon's gap", "3", "Error Feedback narrows Muon's gap",
          "Table 1", _ef("muon", "Muon")),
    Claim("muon-share", "Muon's EF share", "3", "… by 50–70 % of it", "Table 1",
          _share_size("muon", "Muon", 0.50, 0.70)),
    Claim("adamw-ef", "EF narrows AdamW's gap", "3", "Error Feedback narrows AdamW's gap",
          "Table 1", _ef("adamw", "AdamW")),
    Claim("adamw-share", "AdamW's EF share", "3", "… by 85–90 % of it", "Table 1",
          _share_size("adamw", "AdamW", 0.85, 0.90)),
    Claim("muon-mitigation", "EF best fix, Muon", "4",
          "For Muon, EF beats synchronous start, synchronous cooldown and Taylor compensation",
          "Table 3", _mitigation("muon", "Muon")),
    Claim("adamw-mitigation", "EF best fix, AdamW", "4", "… and for AdamW", "Table 3",
          _mitigation("adamw", "AdamW")),
    Claim("pipedream", "PipeDream worse, P = 16", "5",
          "PipeDream degrades sharply at depth 16, 2BW does not", "Table 4", _pipedream,
          cell="deep-sync"),
)


def verdicts(tier: str, root: Path = HERE, R: dict | None = None
             ) -> tuple[Regime | None, list[Verdict]]:
    """The regime of ``tier`` and the verdict of every claim its results can test (``R``: the
    tier's :func:`load`, when the caller has it)."""
    R = load(tier, root) if R is None else R
    reg = regime(tier, R)
    out = []
    for c in CLAIMS:
        v = c.test(R, tier)
        if v is not None:
            out.append(dataclasses.replace(v, regime=regime(tier, R, c.cell) if c.cell else reg))
    return reg, out


def t2_drift(tier: str = "tiny", root: Path = HERE) -> dict:
    """What the results say about T2's drift: the range of Muon's spectral drift
    :math:`\\bar\\delta` over its delayed runs that measured it (T2's ceiling is 2), the share
    of Muon's gap EF recovers, and Lion's gap without and with EF."""
    R = load(tier, root)
    deltas = [r["drift"]["spectral_mean"] for c, recs in R.items()
              if c.startswith("muon-async") for r in recs.values()
              if r.get("drift", {}).get("spectral_mean") is not None]
    share_muon, _ = stats.share(vals(R, "muon-sync"), vals(R, "muon-async"), vals(R, "muon-ef"))
    lion_async = _gap(R, "lion-sync", "lion-async")
    lion_ef = _gap(R, "lion-sync", "lion-ef")
    mean = lambda d: sum(d.values()) / len(d) if d else None
    return {"delta_min": min(deltas) if deltas else None,
            "delta_max": max(deltas) if deltas else None, "delta_runs": len(deltas),
            "muon_share": share_muon, "lion_gap": mean(lion_async), "lion_gap_ef": mean(lion_ef)}


# -- the intro's first screen ---------------------------------------------------------------------
PAPER_REGIME = "20 tokens/parameter, each token seen once"


def _short(v: Verdict) -> str:
    if v.cell is not None:
        return f"**{v.word}**: {v.cell}"
    p = v.paired
    if p is None or p.lo is None:
        return f"**{v.word}**"
    return f"**{v.word}**: {p.mean:+.3f} {p.interval(3)}".replace("-", "−")


def cell_of(results_of_tier: tuple[Regime | None, list[Verdict]], claim: str) -> str:
    """A summary table's cell: the verdict of ``claim`` with its difference or share and
    interval, "not run" when the tier cannot test it."""
    v = next((v for v in results_of_tier[1] if v.claim == claim), None)
    return "not run" if v is None else _short(v)


def claim_key(tier: str, claim: str) -> str:
    """The marker key of a summary cell in ``experiments/numbers.json`` (``report_markers``'
    kind ``claim``)."""
    return f"{tier}/claim/{claim}"


def _verdict_table(names: list[str], results: dict, marked: bool = False) -> list[str]:
    """One MyST table: a row per claim, a column per tier of ``names`` (each cell a marker
    ``<!--n:TIER/claim/KEY-->…<!--/n-->`` when ``marked``)."""
    def head(t):
        reg = results[t][0]
        return f"`{t}`: {reg.params / 1e6:.2g}M, {reg.tokens_per_param:.2g} tokens/param"

    table = ["| claim of the paper | " + " | ".join(head(t) for t in names) + " |",
             "| :-- | " + " | ".join(":--" for _ in names) + " |"]
    for c in CLAIMS:
        cells = []
        for t in names:
            value = cell_of(results[t], c.key)
            cells.append(f"<!--n:{claim_key(t, c.key)}-->{value}<!--/n-->" if marked else value)
        table.append(f"| {c.number}. {c.statement} ({c.shown_in}) | " + " | ".join(cells)
                     + " |")
    table.append("| 7. The gap does not grow with scale (10B MoE, 200B tokens) | "
                 + " | ".join("not run" for _ in names) + " |")
    return table


def summary_md(root: Path = HERE, marked: bool = False) -> str:
    """The verdict of every claim on every tier as MyST: first a table of the tiers in the
    paper's regime, then, under its own heading line, a table of the tiers outside it (for
    contrast: their answers do not transfer), a column per tier headed by its size and
    tokens/parameter, so that each table fits the page. A cell gives the verdict and the
    paired difference with its 95 % interval (nats of validation loss; for a share, EF's share
    of the mean gaps (2BW − EF)/(2BW − sync) with Fieller's 95 % interval, or none when that
    interval is unbounded: the gap itself within noise).
    A tier none of whose claims has its cells yet gets no column (its regime line says how
    many runs it has finished). Then each tier's full regime (parameters, tokens/parameter,
    epochs, steps) and whether it is the paper's.

    ``marked``: each verdict cell is a marker (``claim_key``), so that the page can quote the
    values ``experiments/numbers.json`` records instead of these."""
    names = tiers(root)
    if not names:
        return "No result files exist yet in `experiments/<tier>/results/`."
    loaded = {t: load(t, root) for t in names}
    results = {t: verdicts(t, root, loaded[t]) for t in names}
    shown = [t for t in names if results[t][1]]
    inside = [t for t in shown if results[t][0].paper_regime]
    outside = [t for t in shown if not results[t][0].paper_regime]
    parts = []
    if inside:
        parts += ["**In the paper's regime** (" + PAPER_REGIME + "):", "",
                  *_verdict_table(inside, results, marked), ""]
    else:
        parts += ["No tier in the paper's regime (" + PAPER_REGIME + ") has run a claim yet.",
                  ""]
    if outside:
        parts += ["**Outside the paper's regime**, for contrast (these answers need not "
                  "transfer):", "", *_verdict_table(outside, results, marked), ""]
    lines = []
    for t in names:
        reg = results[t][0]
        where = ("the paper's regime" if reg.paper_regime else
                 f"**not the paper's regime** ({PAPER_REGIME})")
        # "claims" here are the paper's: a tier may have run its own claims table's SOAP
        # cells (no claim of the paper reads them) and still have none of these
        runs = sum(len(recs) for recs in loaded[t].values())
        todo = ("" if results[t][1] else
                f"; none of the paper's claims has its cells yet ({runs} run"
                f"{'' if runs == 1 else 's'} finished)")
        lines.append(f"- `{t}`: {reg.describe()}, {reg.steps} steps — {where}{todo}.")
    for t in names:
        for v in results[t][1]:
            if v.regime is not None and v.regime != results[t][0]:
                num = next(c.number for c in CLAIMS if c.key == v.claim)
                lines.append(f"- `{t}`, claim {num}: the deep model, {v.regime.describe()}.")
    return "\n".join(parts) + "\n" + "\n".join(lines)


# The paper's final validation losses at 360M, 20 tokens/parameter (sync, async, async + EF;
# /work/shared/PAPER.md, "Numbers reported"): quoted beside ours, never compared as equals.
PAPER_360M = {"muon": (2.578, 2.590, 2.583), "adamw": (2.612, 2.890, 2.640)}
LABEL = {"muon": "Muon", "adamw": "AdamW"}


PAPER_ROWS = ("final loss, synchronous", "final loss, one-step delay (2BW)",
              "final loss, 2BW + EF", "gap async − sync [95 % interval]", "gap, the paper (360M)",
              "share of the gap EF recovers [95 % interval]", "share, the paper (360M)")


def paper_columns(tier: str, root: Path = HERE) -> tuple[list[tuple[str, list[str]]], set[int]]:
    """The columns of :func:`paper_table_md`, ``[(optimizer, a cell per PAPER_ROWS)]``, and
    the seed counts of their cells."""
    R = load(tier, root)
    cols, n = [], set()
    for o in PAPER_360M:
        s, a, e = (vals(R, f"{o}-{m}") for m in ("sync", "async", "ef"))
        if not (s and a and e):
            continue
        n |= {len(s), len(a), len(e)}
        gap = stats.paired(a, s)
        share = protocol.fieller_share(s, a, e)
        ps, pa, pe = PAPER_360M[o]
        cells = [stats.summary(s).fmt(), stats.summary(a).fmt(), stats.summary(e).fmt(),
                 f"{gap.mean:+.3f}" if gap.lo is None else f"{gap.mean:+.3f} {gap.interval(3)}",
                 f"{pa - ps:+.3f}",
                 "—" if share.share is None and share.n < 2 else
                 "none: the gap is within noise" if share.lo is None else share.text(),
                 f"{100 * (pa - pe) / (pa - ps):.0f} %"]
        cols.append((o, [c.replace("+-", "-").replace("-", "−") for c in cells]))
    return cols, n


def paper_cell_key(tier: str, optimizer: str, row: int) -> str:
    """The marker key of one cell of :func:`paper_table_md` (``report_markers``' kind
    ``papertab``: row ``row`` of PAPER_ROWS, the optimizer's column)."""
    return f"{tier}/papertab/{optimizer}/{row}"


def paper_table_md(tier: str, root: Path = HERE, marked: bool = False) -> str:
    """Muon and AdamW on ``tier`` beside the paper's 360M numbers, one column per optimizer
    (so it fits the page): the three final losses (mean ± sd over n seeds), the gap async − sync
    and the share of it EF recovers (the ratio of the mean gaps with Fieller's 95 % interval;
    none when that interval is unbounded, the gap within noise), each with the paper's value.
    ``marked``: each cell is a marker (``paper_cell_key``) for ``experiments/numbers.json``."""
    cols, n = paper_columns(tier, root)
    if not cols:
        return f"No Muon or AdamW results in `{tier}` yet."
    seeds = "/".join(str(k) for k in sorted(n))
    out = [f"The `{tier}` tier, {seeds} seeds per cell:", "",
           "| | " + " | ".join(LABEL[o] for o, _ in cols) + " |",
           "| :-- | " + " | ".join("--:" for _ in cols) + " |"]
    for i, r in enumerate(PAPER_ROWS):
        cells = [f"<!--n:{paper_cell_key(tier, o, i)}-->{c[i]}<!--/n-->" if marked else c[i]
                 for o, c in cols]
        out.append(f"| {r} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def figure(path: Path, root: Path = HERE) -> Path | None:
    """One panel per claim tested by a loss difference: the paired difference of each tier
    with its 95 % t-interval, zero marked (a verdict word needs the interval off zero)."""
    plt = pyplot(force=False)
    if plt is None:
        return None
    names = tiers(root)
    rows = [c for c in CLAIMS if "share" not in c.key]
    data = {t: {v.claim: v for v in verdicts(t, root)[1]} for t in names}
    if not names:
        return None
    fig, ax = plt.subplots(figsize=(7.0, 0.36 * len(rows) + 1.3), dpi=100)
    colours = {"reproduced": "tab:green", "not reproduced": "tab:red"}
    markers = "osD^v"
    step = 0.5 / max(1, len(names))
    for i, c in enumerate(rows):
        for j, t in enumerate(names):
            v = data[t].get(c.key)
            if v is None or v.paired is None or v.paired.lo is None:
                continue
            p = v.paired
            y = -i + (j - (len(names) - 1) / 2) * step
            ax.errorbar(p.mean, y, xerr=[[p.mean - p.lo], [p.hi - p.mean]],
                        fmt=markers[j % len(markers)], color=colours.get(v.word, "tab:grey"),
                        capsize=2, ms=5)
    ax.set_yticks([-i for i in range(len(rows))],
                  [f"{c.number}: {c.short}" for c in rows], fontsize=10)
    for j, t in enumerate(names):  # the tier legend, in black whatever the verdict
        ax.plot([], [], markers[j % len(markers)], color="black", label=t)
    handles, labels = ax.get_legend_handles_labels()
    keep = [(h, lab) for h, lab in zip(handles, labels) if lab in names][-len(names):]
    ax.legend(*zip(*keep), fontsize=10, loc="center right", title="tier", title_fontsize=10)
    ax.set_title("green: reproduced · red: not reproduced · grey: within noise", fontsize=10)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("paired difference, nats of validation loss (95 % interval)", fontsize=10)
    ax.tick_params(axis="x", labelsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


__all__ = ["CLAIMS", "PAPER_360M", "PAPER_ROWS", "Claim", "Regime", "Verdict", "cell_of",
           "claim_key", "figure", "load", "paper_cell_key", "paper_columns",
           "paper_table_md", "regime", "summary_md", "t2_drift", "tiers", "vals", "verdicts"]
