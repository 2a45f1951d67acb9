"""Protocol v2's seed counts: opt-580k's unresolved gaps, from the committed results."""

from __future__ import annotations

import json
import statistics

from asyncpp.study.ladder import protocol_v2
from asyncpp.study.ladder.paths import EXPERIMENTS
from asyncpp.study.power import power_t, power_tost


def _final(cell: str, k: int) -> dict:
    return json.loads((EXPERIMENTS / "opt-580k" / "results" / f"{cell}-seed{k}.json")
                      .read_text())["final"]


def test_the_580k_rows_read_the_results_and_count_seeds_by_the_protocols_tests():
    text = protocol_v2.unresolved_580k(0.01, 0.8, 0.04)
    rows = {(r[1], r[2]): r for r in (line.split(" | ") for line in text.splitlines()
                                       if line.startswith("| muon") or line.startswith("| soap"))}
    d = [_final("muon-async", k)["val_loss"] - _final("muon-sync", k)["val_loss"]
         for k in range(3)]
    m, sd = statistics.mean(d), statistics.stdev(d)
    eq = rows[("2BW - sync equivalent to 0 within the margin", "3")]
    assert eq[3] == f"{m:+.4f}" and eq[4] == f"{sd:.4f}"
    n = int(eq[5])
    assert power_tost(n, 0.04, sd, 0.01) >= 0.8 > power_tost(n - 1, 0.04, sd, 0.01)
    walls = [_final(f"muon-{c}", k)["wall_s"] for k in range(3) for c in ("async", "sync")]
    assert eq[6].rstrip(" |") == f"{(n - 3) * 2 * statistics.median(walls) / 3600:.1f}"
    diff = rows[("2BW - sync != 0", "3")]
    n = int(diff[5])
    assert power_t(n, m, sd, 0.01, 2) >= 0.8 > power_t(n - 1, m, sd, 0.01, 2)
