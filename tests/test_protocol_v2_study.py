"""The front page's protocol-v2 markers read ``asyncpp-study``'s report of a study file: counts
of the runs made, the lr chosen on the selection seeds, each endpoint's numbers and its
prediction's fate — pending until every declared run is on disk."""

from __future__ import annotations

import pytest
from study_files import study_head

from asyncpp.study import runner, spec
from asyncpp.study.ladder import protocol_v2_study as v2
from asyncpp.study.ladder import report_markers

STUDY = study_head("v2like") + """[cells.sync]
"optimizer.name" = "adamw"
[cells.async]
"optimizer.name" = "adamw"
"pipeline.schedule" = "2bw"
"pipeline.simulate" = true
[seeds]
selection = [7, 8]
claims = [0, 1, 2, 3]
[lr]
grid = [0.01, 0.02, 0.04]
[[endpoints]]
name = "P1"
test = "difference"
a = "async"
b = "sync"
alternative = "greater"
primary = true
[[endpoints]]
name = "P2"
test = "equivalence"
a = "async"
b = "sync"
margin = 0.5
primary = true
"""


def _write(s, r, value):
    runner.write_json(r.result, {"key": r.key, "cell": r.cell, "seed": r.seed, "role": r.role,
                                 "value": value, "tokens": 1024, "tokens_per_param": 1.0,
                                 "params": 1024})


def test_markers_follow_the_study_from_selection_to_verdict(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    v2._state.cache_clear()
    assert v2.marker("v2runs", (), path) == "0 of 8"
    assert v2.marker("v2sel", (), path) == "0 of 12"
    assert v2.marker("v2lr", ("sync",), path) == "selection under way"
    assert v2.marker("v2grid", ("sync",), path) == "selection under way"
    assert v2.marker("v2", ("P1",), path) == "no claims run yet"
    assert v2.marker("v2family", (), path) == "pending (0 of 8 runs of the primaries made)"
    s = spec.load(path)
    for r in runner.selection_runs(s):
        _write(s, r, abs(r.lr - 0.02) + 0.01 * r.seed)  # lr* 0.02, interior
    v2._state.cache_clear()
    assert v2.marker("v2sel", (), path) == "12 of 12"
    assert v2.marker("v2lr", ("sync",), path) == "0.02"
    # |lr − 0.02| + 0.01·seed over seeds 7 and 8: 0.075 above the distance
    assert v2.marker("v2grid", ("sync",), path) == "0.01: 0.085, 0.02: 0.075, 0.04: 0.095"
    claims, waiting = runner.claims_runs(s)
    assert not waiting and len(claims) == 8
    gap = {0: 0.10, 1: 0.12, 2: 0.09, 3: 0.11}
    last = None
    for r in claims:
        if (r.cell, r.seed) == ("async", 3):
            last = r
            continue
        _write(s, r, 3.0 + r.seed * 0.01 + (gap[r.seed] if r.cell == "async" else 0.0))
    v2._state.cache_clear()
    assert v2.marker("v2runs", (), path) == "7 of 8"
    assert v2.marker("v2vd", ("P1",), path) == "pending: 1 run to go"
    assert v2.marker("v2", ("P1",), path).endswith("(3 seeds)")  # interim numbers shown
    _write(s, last, 3.03 + gap[3])
    v2._state.cache_clear()
    assert v2.marker("v2family", (), path) == "judged (Holm over 2)"
    assert v2.marker("v2vd", ("P1",), path) == "holds"
    assert v2.marker("v2vd", ("P2",), path) == "holds"  # 0.105 ± small within ±0.5
    text = v2.marker("v2", ("P1",), path)
    assert text.startswith("+0.105, 90 % [") and "Holm p = " in text and text.endswith(
        "(4 seeds)")
    with pytest.raises(KeyError, match="not a share endpoint"):
        v2.marker("v2share", ("P1",), path)
    with pytest.raises(KeyError, match="no endpoint 'P9'"):
        v2.marker("v2", ("P9",), path)
    with pytest.raises(KeyError, match="no cell 'x'"):
        v2.marker("v2lr", ("x",), path)


def test_an_unestablished_prediction_reads_so():
    row = {"verdict": "not established", "estimate": 0.01, "lo": -0.02, "hi": 0.04,
           "p": 0.3, "p_holm": 0.6, "n": 14, "interval_level": 0.95}
    assert v2.prediction_word(row) == "not established"
    assert v2.endpoint_text(row) == "+0.010, 95 % [−0.020, +0.040], p = 0.300, Holm p = 0.600 " \
                                    "(14 seeds)"
    assert v2.prediction_word({"verdict": "muon-ef < muon-sync", "test": "difference",
                               "alternative": "two-sided"}) == "holds (< 0)"
    assert v2.prediction_word({"verdict": "a > b", "test": "difference",
                               "alternative": "two-sided"}) == "holds (> 0)"
    assert v2.prediction_word({"verdict": "a > b", "test": "difference",
                               "alternative": "greater"}) == "holds"
    assert v2.prediction_word({"verdict": "pending (3 declared run(s) missing)",
                               "missing": 3}) == "pending: 3 runs to go"
    assert v2.prediction_word({"verdict": "pending (the primary family waits for P3)",
                               "missing": 0}) == "pending: the other primaries' runs"


@pytest.mark.parametrize("margin, word", [
    # gaps 0.10, 0.12, 0.09, 0.11: mean 0.105, 95 % t-interval [0.0845, 0.1255]
    ("0.02", "not established — beyond +0.02: 95 % [+0.084, +0.126], p = "),
    ("0.1", "not established — inconclusive: neither within nor beyond ±0.1 (p beyond = "),
    ("0.5", "holds"),
])
def test_a_failed_equivalence_is_read_the_other_way_as_exploratory(tmp_path, margin, word):
    from asyncpp.study import report
    path = tmp_path / "study.toml"
    path.write_text(STUDY.replace("margin = 0.5", f"margin = {margin}"))
    s = spec.load(path)
    for r in runner.selection_runs(s):
        _write(s, r, abs(r.lr - 0.02) + 0.01 * r.seed)
    gap = {0: 0.10, 1: 0.12, 2: 0.09, 3: 0.11}
    for r in runner.claims_runs(s)[0]:
        _write(s, r, 3.0 + r.seed * 0.01 + (gap[r.seed] if r.cell == "async" else 0.0))
    v2._state.cache_clear()
    got = v2.marker("v2vd", ("P2",), path)
    assert got.startswith(word) and (got == "holds" or got.endswith("(exploratory)"))
    report.write_report(s)
    tables = (s.root / "tables.md").read_text()
    assert ("read the other way" in tables) == (got != "holds")
    if margin == "0.02":
        assert "- P2: beyond +0.02: 95 % [+0.084, +0.126], p = " in tables


def test_the_exploratory_share_is_fiellers_on_the_cells_the_study_ran(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(STUDY.replace("[seeds]", """[cells.ef]
"optimizer.name" = "adamw"
"pipeline.schedule" = "2bw"
"pipeline.simulate" = true
"delay.correction" = "ef"
[seeds]""") + """[[endpoints]]
name = "P3"
test = "share"
none = "async"
corr = "ef"
sync = "sync"
s = 0.5
""")
    s = spec.load(path)
    v2._state.cache_clear()
    assert v2.marker("v2gapci", ("sync", "async"), path) == "no claims run yet"
    assert v2.marker("v2share", ("P3",), path) == "no claims run yet"
    for r in runner.selection_runs(s):
        _write(s, r, abs(r.lr - 0.02) + 0.01 * r.seed)
    gap = {0: 0.10, 1: 0.12, 2: 0.09, 3: 0.11}
    ef = {0: 0.052, 1: 0.059, 2: 0.045, 3: 0.054}  # half of each gap, ± rounding-sized noise
    for r in runner.claims_runs(s)[0]:
        off = {"sync": 0.0, "async": gap[r.seed], "ef": ef[r.seed]}[r.cell]
        _write(s, r, 3.0 + r.seed * 0.01 + off)
    v2._state.cache_clear()
    # gaps 0.10, 0.12, 0.09, 0.11: mean 0.105, 95 % t-interval [0.0845, 0.1255]
    assert v2.marker("v2gapci", ("sync", "async"), path) == "+0.105 [+0.084, +0.126]"
    got = v2.marker("v2recfi", ("sync", "async", "ef"), path)
    assert got.startswith("50 % [") and got != "50 % [50, 50]"  # 0.21 of 0.42 recovered
    lo, hi = (int(x) for x in got[6:-1].split(", "))
    assert 30 < lo < 50 < hi < 70
    assert v2.marker("v2share", ("P3",), path) == got  # the report's share: the same Fieller
    # a gap whose interval holds 0 (here: none at all) gets no share
    assert v2.marker("v2recfi", ("sync", "sync", "ef"), path) == "— (gap within noise)"
    with pytest.raises(KeyError, match="3 of protocol v2's cells"):
        v2.marker("v2recfi", ("sync", "nope", "ef"), path)


def test_the_pages_protocol_v2_markers_are_registered():
    for key in ("opt-180k/v2runs", "opt-180k/v2family", "opt-180k/v2sel", "opt-180k/v2share/P3",
                "opt-180k/v2recfi/muon-sync/muon-2bw/muon-ef", "opt-180k/v2grid/muon-sync",
                "opt-180k/v2lr/muon-sync", "opt-180k/v2/P1", "opt-180k/v2vd/P5"):
        assert report_markers.number(key)


def test_a_report_mid_sweep_shows_the_chosen_lrs_and_pending_endpoints(tmp_path):
    from asyncpp.study import report
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    s = spec.load(path)
    with pytest.raises(spec.StudyError, match="no results under"):
        report.write_report(s)
    for r in runner.selection_runs(s):
        _write(s, r, abs(r.lr - 0.04) + 0.01 * r.seed)
    report.write_report(s)
    tables = (s.root / "tables.md").read_text()
    assert "| P1: async − sync | difference | – |" in tables
    assert tables.count("pending (8 declared run(s) missing)") == 2
    assert "| sync | 0.04 | mean" in tables  # the learning rates chosen so far


def test_the_glance_table_gives_protocol_v2_its_own_rows():
    table = report_markers.glance_table(runs=(("opt-180k", "", "compute-optimal"),))
    rows = [line for line in table.splitlines() if "v2gapci" in line]
    assert len(rows) == 2 and "protocol v2" in rows[0]
    assert "| Muon |" in rows[0] and "v2recfi/muon-sync/muon-2bw/muon-ef" in rows[0]
    assert "| AdamW |" in rows[1] and "v2recfi/adamw-sync/adamw-2bw/adamw-ef" in rows[1]


def test_lrof_reads_the_lr_a_first_protocol_cell_ran_at():
    # the first protocol chose synchronous Muon's lr on seed 0 (0.16), 2BW + EF's at 0.04
    assert report_markers.number("opt-180k/lrof/muon-sync") == "0.16"
    assert report_markers.number("opt-180k/lrof/muon-ef") == "0.04"
    assert report_markers.number("opt-180k/lrof/no-such-cell") == "—"
