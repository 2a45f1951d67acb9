"""Protocol v2's inputs and seed counts, computed from the results (nothing typed by hand).

    python experiments/protocol_v2.py [--write]

For each primary endpoint of ``experiments/opt-180k/protocol-v2.toml`` with a contrast: the
per-seed contrast over the claims seeds already run, its mean and sd, and the seeds that the
endpoint's test needs for the protocol's power at that sd (the mean as the true effect;
equivalence: a true gap of 0). Also the margin's two inputs: Muon's synchronous seed sd and
the chaos floor, ``CHAOS_RERUN`` (a re-run of one recorded run at its recorded commit).
Beside it, from protocol v2's own runs, what pairing by seed removed and the chaos floor
(``protocol_v2_pairing``), and what each unresolved ``opt-580k`` gap would need
(``unresolved_580k``). ``--write`` puts all three into
``experiments/opt-180k/protocol-v2-power.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import tomllib

from ..power import seeds_for_power
from . import protocol_v2_pairing as v2p
from .paths import EXPERIMENTS

TIER = EXPERIMENTS / "opt-180k"
PROTOCOL = TIER / "protocol-v2.toml"
#: the chaos floor: opt-180k/muon-nag-seed2 re-run from its record at its recorded commit
#: (c90df0b) ended at this val loss, against the recorded one (results/muon-nag-seed2.json)
CHAOS_RERUN = {"cell": "muon-nag", "seed": 2, "rerun_val_loss": 4.1992}


def _final(cell: str, seed: int, tier=TIER) -> dict | None:
    p = tier / "results" / f"{cell}-seed{seed}.json"
    return json.loads(p.read_text())["final"] if p.is_file() else None


def val(cell: str, seed: int, tier=TIER) -> float | None:
    f = _final(cell, seed, tier)
    if f is None:
        return None
    v = f.get("val_loss")
    return v if v is not None and math.isfinite(v) else math.inf


#: opt-580k's gaps left unresolved on its three seeds (the first protocol's runs): what each
#: would need, planned as protocol v2 plans opt-180k's (its tests, margin and Holm level)
UNRESOLVED_580K = (
    ("muon", "2BW - sync equivalent to 0 within the margin", "equivalence", "two-sided"),
    ("muon", "2BW - sync != 0", "difference", "two-sided"),
    ("adamw", "2BW - sync > 0", "difference", "greater"),
    ("soap", "2BW - sync > 0", "difference", "greater"),
)
TIER_580K = EXPERIMENTS / "opt-580k"


def unresolved_580k(alpha: float, power: float, margin: float, seeds=(0, 1, 2)) -> str:
    """The seeds and lane-hours each unresolved ``opt-580k`` gap would need (the observed
    mean as the true gap, an equivalence at a true gap of 0 as the protocol plans it), from
    the results and their wall times."""
    lines = ["## `opt-580k`: what stays unresolved, and what resolving it would cost", "",
             f"From the first protocol's {len(seeds)} seeds per cell, power {power} at "
             f"α = {alpha:.4f}; lane-hours for the seeds beyond those on disk, two cells each, "
             "at the cells' median wall time per run:", "",
             "| optimizer | gap | seeds | mean | sd | seeds needed | lane-hours more |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for opt, what, test, alt in UNRESOLVED_580K:
        pairs = [(val(f"{opt}-async", k, TIER_580K), val(f"{opt}-sync", k, TIER_580K))
                 for k in seeds]
        d = [a - b for a, b in pairs if a is not None and b is not None]
        walls = [f["wall_s"] for k in seeds for c in ("async", "sync")
                 if (f := _final(f"{opt}-{c}", k, TIER_580K)) and f.get("wall_s")]
        if len(d) < 2 or not walls:
            lines.append(f"| {opt} | {what} | {len(d)} | | | not measurable | |")
            continue
        m, sd = statistics.mean(d), statistics.stdev(d)
        n = seeds_for_power(test, 0.0 if test == "equivalence" else m, sd, alpha, power, alt,
                            margin)
        more = ("—" if n is None else
                f"{max(n - len(d), 0) * 2 * statistics.median(walls) / 3600:.1f}")
        wrong_side = test == "difference" and alt == "greater" and m <= 0
        none = "none: the mean is not above 0" if wrong_side else "more than 200"
        lines.append(f"| {opt} | {what} | {len(d)} | {m:+.4f} | {sd:.4f} | "
                     f"{none if n is None else n} | {more} |")
    return "\n".join(lines) + "\n"


def contrast_values(opt: str, contrast: dict, seeds) -> list[float]:
    out = []
    for s in seeds:
        vs = {m: val(f"{opt}-{m}", s) for m in contrast}
        if all(v is not None for v in vs.values()):
            out.append(sum(w * vs[m] for m, w in contrast.items()))
    return out


def seeds_needed(test: str, effect: float, sd: float, alpha: float, power: float,
                 margin: float | None) -> int | None:
    """``power.seeds_for_power`` for protocol-v2.toml's test descriptions."""
    if "TOST" in test:
        # the protocol plans its equivalence at a true gap of 0
        return seeds_for_power("equivalence", 0.0, sd, alpha, power, margin=margin)
    side = "two-sided" if "two-sided" in test else ("greater" if effect > 0 else "less")
    return seeds_for_power("difference", effect, sd, alpha, power, alternative=side)


def family() -> dict:
    """protocol-v2.toml's ``[family]``: α, power, seeds."""
    return tomllib.loads(PROTOCOL.read_text())["family"]


def pairing_section() -> str:
    """Protocol v2's own claims runs: what pairing removed and the seeds at the chaos floor
    (``protocol_v2_pairing``)."""
    fam = family()
    return ("## Protocol v2's own runs: pairing and the chaos floor\n\n"
            "From the claims runs of `protocol-v2/study.toml` and the chaos study "
            "`protocol-v2/chaos.toml` (`python experiments/chaos.py --v2-report`).\n\n"
            + v2p.pairing_table(fam["power"], fam["alpha"]))


def table() -> str:
    proto = tomllib.loads(PROTOCOL.read_text())
    fam = proto["family"]
    k = sum(1 for e in proto["endpoint"])
    # Holm's first (strictest) level: what every endpoint must be powered for
    alpha = fam["alpha"] / k
    margin = proto["margins"]["muon_equivalence"]
    sync = [v for s in fam["claims_seeds"] if (v := val("muon-sync", s)) is not None]
    rec = val(CHAOS_RERUN["cell"], CHAOS_RERUN["seed"])
    chaos = abs(CHAOS_RERUN["rerun_val_loss"] - rec) if rec is not None else float("nan")
    rule = math.ceil(100 * max(statistics.stdev(sync), 0.75 * chaos)) / 100
    if not math.isclose(rule, margin):
        raise SystemExit(f"protocol-v2.toml's margin {margin} is not its rule's {rule}")
    lines = [f"Muon synchronous seed sd over {len(sync)} seeds: {statistics.stdev(sync):.4f}; "
             f"chaos floor (one run re-run from its record): {chaos:.4f}; margin "
             f"{margin}.", "",
             f"Seeds for power {fam['power']} at Holm's strictest level α = "
             f"{fam['alpha']}/{k} = {alpha:.4f}, from the first ladder's claims seeds (its "
             "learning rates chosen on seed 0), the inputs protocol v2 was planned with:", "",
             "| endpoint | what | n so far | mean | sd | seeds needed |",
             "|---|---|---:|---:|---:|---:|"]
    for e in proto["endpoint"]:
        if "contrast" not in e:
            lines.append(f"| {e['id']} | {e['what']} | | | | {e['seeds_per_length']} per "
                         "length (fixed) |")
            continue
        xs = contrast_values(e["optimizer"], e["contrast"], fam["claims_seeds"])
        if len(xs) < 2:
            lines.append(f"| {e['id']} | {e['what']} | {len(xs)} | | | not yet measurable |")
            continue
        m, sd = statistics.mean(xs), statistics.stdev(xs)
        n = seeds_needed(e["test"], m, sd, alpha, fam["power"],
                         margin if "TOST" in e["test"] else None)
        lines.append(f"| {e['id']} | {e['what']} | {len(xs)} | {m:+.4f} | {sd:.4f} | "
                     f"{n if n is not None else '> 200'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write protocol-v2-power.md")
    args = ap.parse_args(argv)
    proto = tomllib.loads(PROTOCOL.read_text())
    fam, k = proto["family"], len(proto["endpoint"])
    text = (table() + "\n" + pairing_section() + "\n"
            + unresolved_580k(fam["alpha"] / k, fam["power"], proto["margins"]["muon_equivalence"]))
    print(text, end="")
    if args.write:
        out = TIER / "protocol-v2-power.md"
        tmp = out.with_suffix(".md.tmp")
        tmp.write_text("# Protocol v2: inputs and seed counts\n\nGenerated by "
                       "`python experiments/protocol_v2.py --write` from the results.\n\n"
                       + text)
        tmp.replace(out)
    return 0

