"""Every tier is a study file, ``experiments/<tier>/study.toml``, and
``asyncpp.study.ladder.report_tier`` writes that tier's ``tables.md`` and figures beside it from
the result files already there: for every tier with results, byte for byte what is committed."""

from __future__ import annotations

from pathlib import Path

import pytest

from asyncpp.study.ladder import report_tier, tiers

EXP = Path(__file__).resolve().parents[1] / "experiments"
WITH_RESULTS = [n for n in tiers.TIER_NAMES if any((EXP / n / "results").glob("*.json"))]


def _study_copy(tier: str, where: Path, study_text: str | None = None) -> Path:
    """``where/<tier>/study.toml`` (the committed one, or ``study_text``) beside a link to the
    tier's committed results: the report writes into ``where``, never into experiments/."""
    root = where / tier
    root.mkdir(parents=True)
    (root / "study.toml").write_text(study_text or (EXP / tier / "study.toml").read_text())
    (root / "results").symlink_to(EXP / tier / "results", target_is_directory=True)
    return root / "study.toml"


def test_every_tier_has_a_study_file_that_names_it():
    for name in tiers.TIER_NAMES:
        t = tiers.tier_from_study(EXP / name / "study.toml")
        assert t.name == name and t.root == EXP / name and t.results == EXP / name / "results"
        assert t == tiers.get_tier(name)
    assert {"opt-180k", "opt-580k", "tiny", "small"} <= set(WITH_RESULTS)


@pytest.mark.parametrize("tier", WITH_RESULTS)
def test_report_tier_regenerates_the_committed_tables_and_figures(tier, tmp_path):
    written = report_tier(_study_copy(tier, tmp_path))
    assert written == tmp_path / tier / "tables.md"
    assert written.read_bytes() == (EXP / tier / "tables.md").read_bytes()
    committed = sorted(p.name for p in (EXP / tier / "figures").glob("*.png"))
    made = sorted(p.name for p in (tmp_path / tier / "figures").glob("*.png"))
    if committed:  # the figures need matplotlib (the book extra)
        pytest.importorskip("matplotlib")
        assert made == committed
        for name in committed:
            assert (tmp_path / tier / "figures" / name).read_bytes() == \
                (EXP / tier / "figures" / name).read_bytes(), name


def test_a_table_is_one_entry_of_the_study_file(tmp_path):
    """The study file's ``tables`` decide the report's sections: opt-180k's study cut to its
    lr table reports that table only, and the tokens table comes back with its entry."""
    text = (EXP / "opt-180k" / "study.toml").read_text()
    full = 'tables = ["opt-lr", "opt-claims", "opt-claims5", "opt-more", "opt-tokens"]'
    assert full in text
    lr_only = report_tier(_study_copy("opt-180k", tmp_path / "a", text.replace(
        full, 'tables = ["opt-lr"]'))).read_text()
    with_tokens = report_tier(_study_copy("opt-180k", tmp_path / "b", text.replace(
        full, 'tables = ["opt-lr", "opt-tokens"]'))).read_text()
    assert "## Learning rates per (optimizer, mode)" in lr_only
    assert "## The gap against training tokens" not in lr_only
    assert "## The gap against training tokens" in with_tokens
    assert "## The paper's claims at 20 tokens per parameter" not in with_tokens


@pytest.mark.parametrize("text,message", [
    ('[study]\nname = "x"\ntitle = "x"\n', "not a ladder study"),
    ('[study]\nname = "x"\ntitle = "x"\nkind = "ladder"\n[ladder]\nsteps = 3\nbase = "b"\n'
     'deep = "d"\nseq_len = 8\n', "missing key 'tables'"),
])
def test_a_broken_study_file_is_named_with_its_fault(tmp_path, text, message):
    p = tmp_path / "study.toml"
    p.write_text(text)
    with pytest.raises(ValueError, match=message) as e:
        tiers.tier_from_study(p)
    assert str(p) in str(e.value)
