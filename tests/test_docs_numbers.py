"""The numbers quoted in the experiment verdicts and the README are those the result files give.

``experiments/README.md`` writes every result it quotes as ``<!--n:KEY-->VALUE<!--/n-->``;
``experiments/report.py``'s ``number(KEY)`` computes it from ``experiments/<tier>/results/``.
The book shows the value recorded in ``experiments/numbers.json``; these tests fail when the
typed value is stale, when a key does not resolve, or when a verdict quotes a result-like
number without a marker. Refresh the typed values with
``python experiments/report.py --fill-readme``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from asyncpp.study.ladder import claims
from asyncpp.study.ladder import report as ladder_report

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "experiments" / "README.md"
VERDICT_HEADINGS = ("## Verdicts, claim by claim", "### Verdicts of the `small` tier")
# a mean ± sd, or a signed 3-decimal gap: the shapes a measured result takes in the prose
RESULT_LIKE = re.compile(r"\d\.\d+ ± \d|[+−]\d+\.\d{3}")


@pytest.fixture(scope="module")
def report():
    if not (ROOT / "experiments" / "tiny" / "results").is_dir():
        pytest.skip("no experiments/tiny/results in this checkout")
    return ladder_report


def _sections(text: str) -> dict[str, str]:
    out = {}
    for heading in VERDICT_HEADINGS:
        assert heading in text, f"experiments/README.md lost its section {heading!r}"
        start = text.index(heading)
        level = heading.split(" ")[0]
        nxt = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", text[start + 1:], re.M)]
        out[heading] = text[start: start + 1 + nxt[0]] if nxt else text[start:]
    return out


def test_every_marked_number_is_current(report):
    text = README.read_text(encoding="utf-8")
    marks = report.NUMBER_RE.findall(text)
    assert len(marks) > 100, "the verdicts should quote their numbers through markers"
    stale = report.stale_numbers(text)
    assert not stale, ("numbers in experiments/README.md differ from report.py "
                       "(run `python experiments/report.py --fill-readme`):\n"
                       + "\n".join(f"  {k}: typed {t!r}, computed {c!r}" for k, t, c in stale))


def test_both_readmes_quote_exactly_the_record_the_report_wrote(report):
    """``experiments/numbers.json`` (written by ``--fill-readme``) holds every number the two
    READMEs mark, each the value typed there — the pages are filled from it — and the keys the
    book's own pages and its intro's claims summary and table beside the paper mark (filled
    from the record when the book is built), and nothing else; that the values are current is
    the stale checks' business."""
    import json

    record = json.loads((ROOT / "experiments" / "numbers.json").read_text(encoding="utf-8"))
    assert record["generated_by"] == "python experiments/report.py --fill-readme"
    typed = {}
    for page in (README, ROOT / "README.md"):
        for key, value in report.NUMBER_RE.findall(page.read_text(encoding="utf-8")):
            assert typed.setdefault(key, value) == value, f"{key} typed two ways"
    book = {key for text in [claims.summary_md(marked=True),
                             *(claims.paper_table_md(t, marked=True) for t in claims.tiers()),
                             *(p.read_text(encoding="utf-8")
                               for p in sorted((ROOT / "book").glob("*.md")))]
            for key, _ in report.NUMBER_RE.findall(text)}
    assert {k: v for k, v in record["numbers"].items() if k in typed} == typed
    assert record["numbers"].keys() == typed.keys() | book


def test_readme_glance_table_is_current(report):
    """The README's results-at-a-glance table is report.py's table, with current numbers."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert report.glance_table() in text, "README.md's glance table is not report.py's"
    stale = report.stale_numbers(text)
    assert not stale, f"stale numbers in README.md: {stale}"


def test_verdicts_quote_no_unmarked_result(report):
    text = README.read_text(encoding="utf-8")
    for heading, body in _sections(text).items():
        bare = report.NUMBER_RE.sub("", body)
        found = [bare[max(0, m.start() - 30): m.end()] for m in RESULT_LIKE.finditer(bare)]
        assert not found, f"unmarked result numbers in {heading!r}: {found}"


def test_number_detects_a_stale_value(report):
    """The check can fail: a marker with a wrong typed value is reported."""
    key = "tiny/gap/muon-sync/muon-async"
    current = report.number(key)
    assert re.fullmatch(r"[+−]\d\.\d{3} ± \d\.\d{3}", current), current
    wrong = f"<!--n:{key}-->+9.999 ± 0.000<!--/n-->"
    assert report.stale_numbers(wrong) == [(key, "+9.999 ± 0.000", current)]
    assert report.fill_numbers(wrong) == current


def test_table_numbers_match_the_tables(report):
    """A verdict number and the table the page shows are the same computation."""
    R = report.load_results(report.get_tier("tiny").results)
    table2 = report.table2(R)
    gap = report.number("tiny/gap/adamw-sync-beta0.98/adamw-async-beta0.98")
    assert gap.lstrip("+").replace("−", "-") in table2.replace("−", "-")
    with pytest.raises(KeyError):
        report.number("tiny/nonsense/x")


def test_glance_gives_a_ladder_optimizer_a_row_only_at_three_seeds(report):
    """A compute-optimal row's interval sits under the front page's "at least three seeds":
    opt-180k's SOAP cells cut to two seeds leave the tier without a row; at three it has one."""
    from asyncpp.study.ladder import report_markers as rm

    full = rm._results_of("opt-180k")
    keep = {c: r for c, r in full.items() if c.startswith("soap-")}
    try:
        rm._R_CACHE["opt-180k"] = {c: {s: r[s] for s in (0, 1) if s in r} for c, r in keep.items()}
        two = report.glance_table(runs=(("opt-180k", "", "compute-optimal"),))
        rm._R_CACHE["opt-180k"] = {c: {s: r[s] for s in (0, 1, 2) if s in r}
                                   for c, r in keep.items()}
        three = report.glance_table(runs=(("opt-180k", "", "compute-optimal"),))
    finally:
        rm._R_CACHE["opt-180k"] = full
    assert "no claim at 3 seeds yet" in two and "| SOAP |" not in two.split("the paper")[0]
    assert "| SOAP |" in three.split("the paper")[0] and "running:" not in three


def test_recif_names_why_it_gives_no_share(report):
    """The front page's ``recif`` marker on opt-180k's own results: AdamW's established gap gets
    its share; cut to one seed it gets "too few seeds" (no interval), never "gap within noise";
    Muon's gap, whose interval holds zero, gets "gap within noise"; a missing cell, "—"."""
    from asyncpp.study.ladder import report_markers as rm

    key = "opt-180k/recif/adamw-sync/adamw-async/adamw-ef"
    full = rm._results_of("opt-180k")
    assert report.number(key).endswith(" %")
    assert report.number("opt-180k/recif/muon-sync/muon-async/muon-ef") == "— (gap within noise)"
    assert report.number("opt-180k/recif/adamw-sync/adamw-none/adamw-ef") == "—"
    try:
        rm._R_CACHE["opt-180k"] = {c: {0: r[0]} for c, r in full.items() if 0 in r}
        assert report.number(key) == "— (too few seeds)"
    finally:
        rm._R_CACHE["opt-180k"] = full
