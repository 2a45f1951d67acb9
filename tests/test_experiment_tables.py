"""The table declarations (experiments/tables.py) and the report's renderers: the plans the
sweep runs are the ones the experiments were run with (cell names and overrides pinned), every
declared renderer exists, and the verdict rule decides the words the tables print."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from asyncpp.study.ladder import report, report_markers, sections, sweep, tables
from asyncpp.study.ladder import report_common as rc
from asyncpp.study.ladder import report_zero_gap as zg
from asyncpp.study.ladder import tables_cells as tc

EXP = Path(__file__).resolve().parents[1] / "experiments"


TINY, SMALL = sweep.get_tier("tiny"), sweep.get_tier("small")


def _cells(table, tier=TINY):
    return {c.name: c for c in sweep.table_cells(table, tier)}


def test_cell_names_of_the_run_tables_are_pinned():
    """Names the committed results carry; a renamed cell would orphan them."""
    expect = {
        "1": ({"adamw-sync", "muon-async", "lion-ef", "mars-ef"}, 18),
        "2": ({"muon-sync-beta0.8", "adamw-async-beta0.98", "muon-sync", "adamw-async"}, 16),
        "3": ({"adamw-syncstart", "muon-efcooldown", "muon-taylor", "adamw-ef"}, 10),
        "4": ({"deep-sync", "deep-pipedream-P16", "deep-2bw-P2"}, 9),
        "5": ({"adamw-sync-bs8", "adamw-async", "adamw-async-bs32"}, 6),
        "7": ({"adamw-ef-lr0.003", "muon-sync-lr0.01"}, 6),
        "efg": ({"muon-efg", "adamw-efg", "soap-efg"}, 3),
        "efg-beta": ({"muon-ef-beta0.8", "muon-efg", "muon-efg-beta0.98"}, 8),
        "efg-depth": ({"deep-pipedream-P4-ef", "deep-pipedream-P8-efg"}, 4),
        "nag": ({"deep-adamw-sync", "deep-2bw-P4-nag", "deep-adamw-pipedream-P4-efg",
                 "deep-2bw-P4"}, 17),
        "wpipe": ({"deep-wpipe-P4", "deep-adamw-wpipe-P4-ef"}, 4),
        "h1": ({"muon-ef-lrx0.125", "soap-sync-lrx0.5"}, 36),
        "h3-tune": ({"muon-sync-beta0.95-lrx1", "adamw-sync-beta0.8-lrx0.5"}, 24),
        "h4": ({"adamw-sync-steps600", "muon-ef-steps1200"}, 12),
        "h5": ({"adan-sync-b98-lr0.03", "adan-ef-alg1-lr0.001"}, 15),
        "lr": ({"lr-lion-0.0003", "lr-muon-0.05", "lr-adamw-0.03"}, 23),
    }
    for table, (names, n) in expect.items():
        got = _cells(table)
        assert names <= set(got), (table, names - set(got))
        assert len(got) == n, table
    assert set(_cells("flat", SMALL)) == {"adamw-sync-long", "muon-sync-long"}
    assert set(_cells("gpu", sweep.get_tier("gpu"))) == {
        tc.name(o, m) for o in ("muon", "adamw", "soap") for m in ("sync", "async", "ef", "efg")}


def test_overrides_of_pinned_cells():
    c4 = _cells("4")
    assert c4["deep-pipedream-P16"].overrides["pipeline.microbatches"] == "2"
    assert c4["deep-2bw-P16"].overrides["pipeline.microbatches"] == "16"
    assert c4["deep-sync"].base == TINY.deep and c4["deep-sync"].overrides == {
        "optimizer.name": "muon", "pipeline.schedule": "1f1b", "pipeline.stages": "2",
        "pipeline.microbatches": "2"}
    efgd = _cells("efg-depth")["deep-pipedream-P8-efg"].overrides
    assert (efgd["delay.correction"], efgd["delay.ef_gamma"], efgd["pipeline.stages"]) == (
        "ef", "auto", "8")
    h1 = _cells("h1")["muon-ef-lrx0.125"].overrides
    lr = sweep.load_lrs(TINY.lrs_file)["muon"]
    assert h1["optimizer.lr"] == repr(lr * 0.125)
    assert h1["optimizer.adamw_lr"] == repr(tc.MUON_ADAMW_LR * 0.125)
    assert h1["delay.spectral_drift"] == "true"
    h5 = _cells("h5")["adan-ef-alg1-lr0.003"].overrides
    assert (h5["optimizer.beta1"], h5["optimizer.adan_beta2"], h5["optimizer.adan_beta3"]) == (
        "0.02", "0.08", "0.01")
    assert _cells("5")["adamw-sync-bs32"].overrides["train.eval_batches"] == "4"
    assert _cells("2")["muon-sync-beta0.8"].overrides["optimizer.momentum"] == "0.8"
    assert _cells("2")["muon-sync"].overrides["optimizer.momentum"] == "0.95"
    assert SMALL.mitigations["syncstart"]["delay.sync_start"] == "50"


def test_seeds_and_plan_come_from_the_declarations():
    assert sweep.SEEDS["2"] == (0, 1) and sweep.EXTRA_SEEDS["2"] == (2,)
    assert sweep.SEEDS["4"] == (0,) and sweep.EXTRA_SEEDS["4"] == (1, 2)
    assert "6" not in sweep.SEEDS and "zero-gap" not in sweep.SEEDS  # report-only tables
    todo = sweep.plan(["4"], None, None, TINY)
    assert [s for _, s in todo] == [0] * 9 + [1] * 9 + [2] * 9  # extra seeds after the seeds
    assert [c.name for c, _ in todo[:3]] == ["deep-sync", "deep-pipedream-P16", "deep-2bw-P16"]
    with pytest.raises(ValueError, match="unknown table 'nope'"):
        sweep.plan(["nope"], None, None, TINY)


def test_every_tier_table_is_declared_and_every_renderer_exists():
    for tier in sweep.TIERS.values():
        for t in tier.table_order:
            assert tables.TABLES[t].cells is not None, (tier.name, t)
    for t, fn in sections.SECTIONS.items():
        assert t in tables.TABLES and t in tables.REPORT_ORDER and callable(fn), t
    for t, decl in tables.TABLES.items():
        if decl.cells is None:
            assert decl.reads and all(r in tables.TABLES for r in decl.reads), t
    assert tables.shown("6", TINY) and tables.shown("zero-gap", SMALL)
    assert not tables.shown("4", SMALL) and not tables.shown("h2", SMALL)


def test_names_and_delays_are_made_in_one_place():
    assert tc.name("muon", "sync", beta=0.8, lr_factor=0.5) == "muon-sync-beta0.8-lrx0.5"
    assert tc.name("adan", "ef", tag="alg1", lr=0.003) == "adan-ef-alg1-lr0.003"
    assert tc.name("muon", "async", beta=tc.beta_variant("muon", 0.95)) == "muon-async"
    assert tc.deep_name("adamw", "pipedream", 4, "nag") == "deep-adamw-pipedream-P4-nag"
    assert tc.deep_name("muon", "sync") == "deep-sync"
    assert tc.stage_delays("pipedream", 4) == (3, 2, 1, 0)
    assert tc.stage_delays("wpipe", 4) == (1, 1, 0, 0)
    assert tc.stage_delays("2bw", 4) == (1, 1, 1, 1)


# -- renderers on synthetic results ---------------------------------------------------------------
def _rec(cell, seed, val):
    return {"cell": cell, "seed": seed, "status": "ok", "final": {"val_loss": val},
            "config": {"optimizer": {"lr": 0.01}}, "curves": {}, "drift": {}}


def _R(cells: dict[str, dict[int, float]]):
    return {c: {s: _rec(c, s, v) for s, v in by_seed.items()} for c, by_seed in cells.items()}


def test_grid_moves_n_into_the_header():
    md = rc.grid(["a", "b"], [[rc.Val("1.0", 3), "x"], [rc.Val("2.0", 3), "y"],
                              [rc.Val("3.0", 1), "z"]])
    assert md.splitlines()[0] == "| a (n=3) | b |"
    assert "| 1.0 | x |" in md and "| 3.0 (n=1) | z |" in md


def test_all_seeds_one_way_but_the_interval_crossing_zero_is_within_noise():
    # b − a per seed: −0.01, −0.02, −0.15 (all negative; t = 1.4 on 2 df)
    R = _R({"a": {0: 3.0, 1: 3.0, 2: 3.0}, "b": {0: 2.99, 1: 2.98, 2: 2.85},
            "c": {0: 2.90, 1: 2.91, 2: 2.89}})
    diff, interval, agree, word = rc.compare_cells(R, "b", "a")
    assert (diff.text, agree, word) == ("−0.060 ± 0.078", "3/3", "within noise")
    lo, hi = (float(x.replace("−", "-")) for x in interval.strip("[]").split(", "))
    assert lo < 0 < hi
    # a tight difference of the same sign: the interval excludes zero
    assert rc.compare_cells(R, "c", "a")[3] == "better"
    assert rc.compare_cells(R, "a", "c")[3] == "worse"


def test_markers_state_the_rule(monkeypatch):
    R = _R({"s": {0: 3.0, 1: 3.0, 2: 3.0}, "a": {0: 2.99, 1: 2.98, 2: 2.85},
            "c": {0: 2.90, 1: 2.91, 2: 2.89}})
    monkeypatch.setitem(report_markers._R_CACHE, "tiny", R)
    assert report.number("tiny/verdict/s/a") == "within noise"
    assert report.number("tiny/verdict/s/c") == "better"
    assert report.number("tiny/signs/s/a") == "3/3 negative"
    assert report.number("tiny/pd/s/a").startswith("−0.060 ± 0.078 [−0.")
    # a margin: c − s = −0.1 ± 0.01 excludes 0 but not a margin of 0.2
    assert report.number("tiny/verdict/s/c/0.2") == "within noise"


def test_zero_gap_picks_the_lowest_correction_and_states_its_noise():
    R = _R({"muon-sync": {0: 3.00, 1: 3.02, 2: 3.01},
            "muon-async": {0: 3.20, 1: 3.22, 2: 3.21},
            "muon-ef": {0: 3.10, 1: 3.12, 2: 3.11},
            "muon-efg": {0: 3.00, 1: 3.05, 2: 3.01},  # best: gap +0.01 ± 0.017
            "adamw-sync": {0: 3.0, 1: 3.0},
            "adamw-ef": {0: 3.5, 1: 3.6}})
    z = report.zero_gap_row(R, "muon")
    assert z.correction == "efg" and z.paired.n == 3
    assert z.in_sd == pytest.approx(z.paired.mean / 0.01)  # sync's seed sd is 0.01
    md = report.table_zero_gap(R)
    row = next(ln for ln in md.splitlines() if ln.startswith("| Muon |"))
    # differences 0, +0.03, 0: one seed above sync, two tied; sync's sd 0.01
    assert row == ("| Muon | EF(γ*) (seeds 0–2, 2 corrections) | +0.010 ± 0.017 "
                   "| [−0.033, +0.053] | 1/3 | +1.0 | within noise |")
    # AdamW's two seeds: its n differs from the header's; sync's sd 0, so no sd units
    assert "| AdamW | EF (seeds 0, 1, 1 correction) | +0.550 ± 0.071 (n=2) |" in md
    assert "| 2/2 | — | within noise |" in md
    assert md.count("\n| ") == 3  # header rule and two rows: no SOAP row
    assert report.zero_gap_row(R, "soap") is None


def test_zero_gap_chooses_the_best_correction_on_common_seeds():
    """Nesterov ran seeds 0–2 only and EF(γ*) 0–4; seeds 3–4 are a worse draw for every cell.
    On its own seeds EF(γ*)'s mean (3.140) is above Nesterov's (3.110), so a choice on
    different seed sets picks Nesterov; on the common seeds 0–2 EF(γ*) is lower (3.100 against
    3.110) and is the one chosen. Its gap to sync then reads all five seeds it shares."""
    R = _R({"muon-sync": {0: 3.00, 1: 3.00, 2: 3.00, 3: 3.20, 4: 3.20},
            "muon-efg": {0: 3.09, 1: 3.10, 2: 3.11, 3: 3.20, 4: 3.20},
            "muon-nag": {0: 3.10, 1: 3.11, 2: 3.12}})
    cands, seeds = zg.choice_seeds(R, "muon")
    assert cands == ("efg", "nag") and seeds == (0, 1, 2)
    z = report.zero_gap_row(R, "muon")
    assert z.correction == "efg" and z.chosen_on == (0, 1, 2) and z.compared == 2
    assert z.paired.seeds == (0, 1, 2, 3, 4)
    row = next(ln for ln in report.table_zero_gap(R).splitlines() if ln.startswith("| Muon |"))
    assert row.startswith("| Muon | EF(γ*) (seeds 0–2, 2 corrections) | +0.060 ± 0.055 |")
    text = " ".join(zg.section_zero_gap(R, TINY)[0])
    assert zg.CHOICE_RULE in text and "never on means over different seed sets" in text


def test_zero_gap_leaves_out_the_correction_that_breaks_the_common_seeds():
    """A correction sharing only seeds 3–4 with sync and another sharing 0–2 have no seed in
    common: the one with fewer seeds leaves the choice, which is made on the other's."""
    R = _R({"adamw-sync": {k: 3.0 for k in range(5)},
            "adamw-ef": {0: 3.3, 1: 3.3, 2: 3.3},
            "adamw-taylor": {3: 3.1, 4: 3.1}})
    assert zg.choice_seeds(R, "adamw") == (("ef",), (0, 1, 2))
    assert report.zero_gap_row(R, "adamw").correction == "ef"
    assert zg.seeds_text((0, 2, 4)) == "0, 2, 4"


def test_a_quoted_share_carries_fiellers_interval(tmp_path, monkeypatch):
    """``recshare``: the share with Fieller's interval, and "interval unbounded" where the
    gap's own interval holds zero (no share is supported)."""
    from asyncpp.study.ladder import protocol
    R = _R({"muon-sync": {0: 3.00, 1: 3.02, 2: 3.01},
            "muon-async": {0: 3.20, 1: 3.23, 2: 3.21},
            "muon-ef": {0: 3.10, 1: 3.12, 2: 3.12},
            "adamw-sync": {0: 3.0, 1: 3.2, 2: 3.1},
            "adamw-async": {0: 3.3, 1: 3.0, 2: 3.2},
            "adamw-ef": {0: 3.1, 1: 3.1, 2: 3.1}})
    monkeypatch.setitem(report_markers._R_CACHE, "tiny", R)
    sh = protocol.fieller_share(*(rc.vals(R, f"muon-{m}") for m in ("sync", "async", "ef")))
    assert report_markers.number("tiny/recshare/muon-sync/muon-async/muon-ef") == \
        f"{sh.share:.0f} % [{sh.lo:.0f}, {sh.hi:.0f}]"
    assert report_markers.number("tiny/recshare/adamw-sync/adamw-async/adamw-ef").endswith(
        " % [interval unbounded]")


def test_figures_fit_a_700_px_column(tmp_path):
    pytest.importorskip("matplotlib")
    R = _R({})
    for m, v in (("sync", 3.0), ("async", 3.2), ("ef", 3.1)):
        for s in (0, 1):
            rec = _rec(f"muon-{m}", s, v)
            rec["curves"] = {"val_step": [50, 100], "val_loss": [v + 0.2, v]}
            R.setdefault(f"muon-{m}", {})[s] = rec
    paths = report.figures(R, tmp_path, [], TINY)
    assert paths
    for p in paths:
        width = struct.unpack(">I", p.read_bytes()[16:20])[0]  # the PNG IHDR width
        assert width == 700, p.name
        assert report.CAPTIONS[p.stem].endswith(".")  # a sentence, not a file name


def test_readme_zero_gap_table_is_the_reports():
    """experiments/README.md shows the zero-gap table as marked numbers (report_markers; its
    numbers are checked by tests/test_docs_numbers.py), and every declared prediction section
    exists there."""
    if not TINY.results.is_dir():
        pytest.skip("no experiments/tiny/results in this checkout")
    text = (EXP / "README.md").read_text(encoding="utf-8")
    assert report_markers.marked_table(("tiny", "small")) in text
    headings = [ln for ln in text.splitlines() if ln.startswith("#")]
    for t in tables.TABLES.values():
        if t.prediction:
            assert any(t.prediction in h for h in headings), (t.id, t.prediction)
