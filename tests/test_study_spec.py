"""Study files: what is accepted, and every mistake a user can make answered by one line on
stderr and exit 2 from ``asyncpp-study``, with nothing run or written."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from asyncpp.study import cli, spec
from asyncpp.train.config import read_toml

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.toml"

GOOD = f"""
[study]
name = "t"
base = "{TINY}"

[cells.sync]
"pipeline.schedule" = "none"

[cells.2bw]
pipeline = {{ schedule = "2bw", stages = 2, microbatches = 2, simulate = true }}

[seeds]
claims = [0, 1, 2]
selection = [10, 11]

[lr]
grid = [0.001, 0.003, 0.01]
rule = "fit"

[[endpoints]]
name = "same"
test = "equivalence"
a = "2bw"
b = "sync"
margin = 0.05
primary = true
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "study.toml"
    p.write_text(textwrap.dedent(text))
    return p


def test_a_good_study_loads_with_its_cells_seeds_and_endpoints(tmp_path):
    s = spec.load(_write(tmp_path, GOOD))
    assert s.cells["2bw"] == {"pipeline.schedule": "2bw", "pipeline.stages": 2,
                              "pipeline.microbatches": 2, "pipeline.simulate": True}
    assert s.claims_seeds == (0, 1, 2) and s.selection_seeds == (10, 11)
    assert s.lr_grid == (0.001, 0.003, 0.01) and s.lr_rule == "fit"
    (ep,) = s.endpoints
    assert (ep.test, ep.margin, ep.primary, ep.cells()) == ("equivalence", 0.05, True,
                                                           ("2bw", "sync"))


BAD = [
    ("[study]\nname = \"t\"\nbase = \"nope.toml\"\n", "study.base", "no such"),
    (GOOD.replace("selection = [10, 11]", "selection = [1, 11]"), "seeds.selection",
     "shares seeds [1]"),
    (GOOD.replace("selection = [10, 11]", "selection = [10]"), "seeds.selection",
     "at least 2 selection seeds"),
    (GOOD.replace("margin = 0.05\n", ""), "endpoints[0].margin", "needs a, b, margin"),
    (GOOD.replace("margin = 0.05", "margin = 0.0"), "endpoints[0].margin", "margin > 0"),
    (GOOD.replace('a = "2bw"', 'a = "ef"'), "endpoints[0]", "cell 'ef'"),
    (GOOD.replace('test = "equivalence"', 'test = "bayes"'), "endpoints[0].test",
     "must be one of"),
    (GOOD.replace('"pipeline.schedule" = "none"', '"pipeline.schedule" = "zigzag"'),
     "cells.sync", "asyncpp-train rejects it"),
    (GOOD.replace('"pipeline.schedule" = "none"', '"run.seed" = 3'), "cells.sync.run.seed",
     "set by the study"),
    (GOOD.replace('rule = "fit"', 'rule = "best"'), "lr.rule", "'mean' or 'fit'"),
    (GOOD + "\n[extra]\nx = 1\n", "extra", "unknown table"),
    (GOOD.replace("[study]", "[study]\nlaunch = 1"), "study.launch", "unknown key"),
    (GOOD.replace("claims = [0, 1, 2]", "claims = [0, 0]"), "seeds.claims", "twice"),
    ("[study\n", "", "TOML"),
    (GOOD + "\n[lr.cells]\nef = [0.1, 0.2, 0.4]\n", "lr.cells.ef", "names no declared cell"),
    (GOOD.replace("grid = [0.001, 0.003, 0.01]", "cells = { sync = [0.1, 0.2, 0.4] }"),
     "lr.cells.2bw", "has no lr grid"),
    (GOOD.replace("grid = [0.001, 0.003, 0.01]", "grid = [0.001, 0.001, 0.01]"), "lr.grid",
     "twice"),
    (GOOD.replace('rule = "fit"', 'rule = "fit"\nextend = -1'), "lr.extend", "0 to 8"),
    (GOOD + '\n[lr.tied.sync]\n"optimizer.adamw_lr" = 0\n', "lr.tied.sync.optimizer.adamw_lr",
     "factor > 0"),
    (GOOD + '\n[lr.tied.2bw]\n"pipeline.stages" = 2\n', "lr.tied.2bw.pipeline.stages",
     "set by the cell"),
    (GOOD + '\n[lr.same]\n2bw = "ef"\n', "lr.same.2bw", "declared cells"),
    (GOOD.replace("selection = [10, 11]", "selection = [10, 11]\ncells = { ef = [0] }"),
     "seeds.cells.ef", "names no declared cell"),
    (GOOD.replace("selection = [10, 11]", "selection = [10, 11]\ncells = { sync = [0, 10] }"),
     "seeds.selection", "shares seeds [10]"),
    (GOOD.replace("primary = true", "primary = true\nper_seed = true"),
     "endpoints[0].per_seed", "slope endpoints"),
    (GOOD + '\n[lr.same]\n2bw = "sync"\nsync = "2bw"\n', "lr.same.2bw", "of its own"),
    (GOOD.replace("primary = true", 'primary = true\nalternative = "greater"'),
     "endpoints[0].alternative", "equivalence endpoint takes 'two-sided'"),
    (GOOD.replace('test = "equivalence"', 'test = "difference"').replace(
        "primary = true", 'primary = true\nalternative = "above"'),
     "endpoints[0].alternative", "'greater'"),
]


@pytest.mark.parametrize("text,key,words", BAD)
def test_each_mistake_is_one_line_naming_the_key(tmp_path, text, key, words):
    p = _write(tmp_path, text)
    with pytest.raises(spec.StudyError) as e:
        spec.load(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and f": {key}" in msg and words in msg, msg


def test_the_cli_answers_a_bad_study_with_exit_2_and_writes_nothing(tmp_path, capsys):
    p = _write(tmp_path, GOOD.replace("margin = 0.05", "margin = -1.0"))
    assert cli.main(["run", str(p), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("asyncpp-study: error:") and "margin" in err and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_plan_and_status_of_a_study_without_an_lr_grid(tmp_path, capsys):
    tiny = str(ROOT / "configs" / "study-tiny.toml")
    assert cli.main(["plan", tiny, "--out", str(tmp_path)]) == 0
    line = "0 selection + 6 claims run(s) (6 distinct), 0 on disk"
    assert line in capsys.readouterr().out
    assert cli.main(["status", tiny, "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == line
    assert not tmp_path.joinpath("results").exists()


def test_report_without_results_is_exit_2(tmp_path, capsys):
    p = _write(tmp_path, GOOD)
    assert cli.main(["report", str(p), "--out", str(tmp_path / "out")]) == 2
    assert "asyncpp-study run" in capsys.readouterr().err
    assert not (tmp_path / "out" / "tables.md").exists()


def test_a_ladder_study_is_followed_through_the_sweep(capsys):
    """plan/status of a ladder study list the tier's tables through the sweep (its runs are
    ladder.sh lanes: tests/test_study_ladder_cli.py runs one)."""
    study = ROOT / "experiments" / "opt-180k" / "study.toml"
    assert cli.main(["status", str(study)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("opt-180k: ") and out[0].count(" to do") == 1


def test_bad_arguments_are_one_line_exit_2():
    r = subprocess.run([sys.executable, "-m", "asyncpp.study.cli", "run", "x.toml",
                        "--lanes", "two"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run([sys.executable, "-m", "asyncpp.study.cli", "plan",
                        str(ROOT / "configs" / "study-tiny.toml"), "--deadline", "+5m"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--deadline" in r.stderr


def test_deadlines_in_every_written_form():
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    assert cli.parse_deadline("+90m", now) == now + 5400
    assert cli.parse_deadline("+2h", now) == now + 7200
    assert cli.parse_deadline("23:00", now) == now + 46 * 60 + 40
    assert cli.parse_deadline("22:00", now) == now + 86400 - 13 * 60 - 20  # tomorrow
    assert cli.parse_deadline("2023-11-14T23:13:20", now) == now + 3600
    assert cli.parse_deadline("2023-11-14T23:13:20+01:00", now) == now
    with pytest.raises(ValueError, match="deadline"):
        cli.parse_deadline("soon", now)


def _subset(part, whole) -> bool:
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _subset(v, whole[k])
                                               for k, v in part.items())
    if isinstance(part, list) and part and isinstance(part[0], dict):
        return isinstance(whole, list) and all(any(_subset(p, w) for w in whole) for p in part)
    return part == whole


def test_the_how_to_shows_the_tiny_study_as_it_is(tmp_path):
    page = (ROOT / "book" / "howto" / "study.md").read_text()
    (block,) = re.findall(r"```toml\n(.*?)```", page, re.S)
    (tmp_path / "shown.toml").write_text(block)
    shown = read_toml(tmp_path / "shown.toml")
    real = read_toml(ROOT / "configs" / "study-tiny.toml")
    assert shown["cells"] and shown["endpoints"]
    assert _subset(shown, real)
    assert not _subset({"overrides": {"train.steps": 5}}, real)


def test_a_cell_can_have_its_own_claims_seeds(tmp_path):
    text = GOOD.replace("selection = [10, 11]", "selection = [10, 11]\ncells = { 2bw = [0, 1] }")
    s = spec.load(_write(tmp_path, text))
    assert s.claims_of("2bw") == (0, 1) and s.claims_of("sync") == (0, 1, 2)
