"""The book quotes the numbers of ``experiments/numbers.json``, the record ``python
experiments/report.py --fill-readme`` writes, and never computes a marked number again.

These read the real README sections the book shows and a record written to a temporary file:
a changed recorded value changes the page, a key the record lacks stops the page with an error
naming it, and every marker the book can show is in the committed record.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from asyncpp.study.ladder import claims, numbers_record, report_markers
from asyncpp.study.ladder.report_markers import NUMBER_RE

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "experiments" / "README.md"
BOOK = ROOT / "book"


@pytest.fixture(scope="module")
def ab():
    """``book/asyncpp_book.py``, the helpers the book's pages call."""
    spec = importlib.util.spec_from_file_location("asyncpp_book", BOOK / "asyncpp_book.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record():
    return json.loads(numbers_record.NUMBERS_JSON.read_text(encoding="utf-8"))


def _ladder_verdicts(ab) -> str:
    text = ab.readme_section(README, "Verdicts: the compute-optimal ladder")
    assert text and NUMBER_RE.search(text), "the ladder's verdicts should quote marked numbers"
    return text


def test_the_book_quotes_the_recorded_value(ab, tmp_path, monkeypatch):
    """A record whose value for one key was changed changes what the book shows, and only
    that: the book reads the record instead of computing the number."""
    text = _ladder_verdicts(ab)
    record = _record()
    key = NUMBER_RE.search(text).group(1)
    record["numbers"][key] = "SENTINEL-VALUE"
    path = tmp_path / "numbers.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    monkeypatch.setattr(numbers_record, "NUMBERS_JSON", path)
    shown = ab.recorded_numbers(text)
    assert "SENTINEL-VALUE" in shown and "<!--n:" not in shown
    monkeypatch.undo()
    assert "SENTINEL-VALUE" not in ab.recorded_numbers(text)


def test_a_key_the_record_lacks_stops_the_page_naming_it(ab, tmp_path, monkeypatch):
    text = _ladder_verdicts(ab)
    record = _record()
    key = NUMBER_RE.search(text).group(1)
    del record["numbers"][key]
    path = tmp_path / "numbers.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    monkeypatch.setattr(numbers_record, "NUMBERS_JSON", path)
    with pytest.raises(numbers_record.NumberNotRecorded) as err:
        ab.recorded_numbers(text)
    msg = str(err.value)
    assert key in msg and "python experiments/report.py --fill-readme" in msg
    assert str(path) in msg
    # no record at all: the same one message names the command
    path.unlink()
    with pytest.raises(numbers_record.NumberNotRecorded, match="--fill-readme"):
        ab.recorded_numbers(text)


def test_every_marker_the_book_can_show_is_in_the_record(ab):
    """The book shows sections of experiments/README.md (and the front page's numbers), the
    intro's claims summary, and may mark numbers on its own pages: every such marker is a key
    of the committed record, so filling the whole of each text from it succeeds and leaves no
    marker."""
    recorded = _record()["numbers"]
    texts = {p.name: p.read_text(encoding="utf-8")
             for p in [README, ROOT / "README.md", *sorted(BOOK.glob("*.md"))]}
    texts["claims summary"] = claims.summary_md(marked=True)
    for t in claims.tiers():
        texts[f"{t} beside the paper"] = claims.paper_table_md(t, marked=True)
    missing = {name: sorted({k for k, _ in NUMBER_RE.findall(t)} - recorded.keys())
               for name, t in texts.items()}
    assert not any(missing.values()), ("markers missing from experiments/numbers.json (run "
                                       f"`python experiments/report.py --fill-readme`): {missing}")
    filled = ab.recorded_numbers(README.read_text(encoding="utf-8"))
    assert "<!--n:" not in filled and len(recorded) > 100


def test_no_book_page_computes_a_marked_number():
    """The book's pages and helpers fill markers only through the record: no call of
    ``fill_numbers`` or ``number(`` (which compute from the result files) remains."""
    calls = re.compile(r"\bfill_numbers\(|\breport\.number\(|\bstale_numbers\(")
    found = [f"{p.name}:{i}" for p in [*BOOK.glob("*.md"), *BOOK.glob("*.py")]
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if calls.search(line)]
    assert not found, f"book pages computing marked numbers: {found}"


def test_the_intro_claims_summary_is_the_recorded_one(ab, tmp_path, monkeypatch):
    """The intro's verdict cells are markers the record fills: from the committed (current)
    record the marked summary reads exactly as the one computed from the results; a changed
    recorded cell changes the page."""
    marked = claims.summary_md(marked=True)
    key = claims.claim_key("opt-180k", "adamw-share")
    assert f"<!--n:{key}-->" in marked
    assert ab.recorded_numbers(marked) == claims.summary_md(), (
        "the record is stale: run `python experiments/report.py --fill-readme`")
    record = _record()
    record["numbers"][key] = "**SENTINEL**"
    path = tmp_path / "numbers.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    monkeypatch.setattr(numbers_record, "NUMBERS_JSON", path)
    assert "**SENTINEL**" in ab.recorded_numbers(marked)


def test_the_intro_table_beside_the_paper_is_the_recorded_one(ab):
    """The intro's table of Muon and AdamW beside the paper's 360M numbers, filled from the
    record, reads as the one computed from the results (with the typographic minus), on every
    tier the intro may show."""
    for t in claims.tiers():
        marked = claims.paper_table_md(t, marked=True)
        if "<!--n:" in marked:
            assert ab.recorded_numbers(marked) == claims.paper_table_md(t), t
    assert "70 % [38, 82]" in ab.recorded_numbers(claims.paper_table_md("opt-180k", marked=True))


def test_claim_marker_names_an_unknown_claim():
    assert report_markers.number("opt-180k/claim/adamw-share") == report_markers.minus(
        claims.cell_of(claims.verdicts("opt-180k"), "adamw-share"))
    with pytest.raises(KeyError, match="no claim 'nonsense'"):
        report_markers.number("opt-180k/claim/nonsense")
    with pytest.raises(KeyError, match="no soap column"):
        report_markers.number("opt-180k/papertab/soap/0")
