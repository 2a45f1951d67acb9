"""How the book renders the proofs of ``theory/``: display math, LaTeX explanations, lines that fit.

These check ``book/asyncpp_book.py`` on the real results without building the book (the
statuses are not computed here; the book build checks every step).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book"))
sys.path.insert(0, str(ROOT))

ab = pytest.importorskip("asyncpp_book")
sp = pytest.importorskip("sympy")

# ASCII math that an explanation should write in LaTeX instead
ASCII_MATH = re.compile(r"<=|>=|\|\||\b(eta|tau|alpha|beta|eps[12]?|sqrt|grad|xi_k|delta_\d)\b")


@pytest.fixture(scope="module")
def results():
    from theory import all_results

    return all_results()


def _texts(result):
    yield result.title
    yield from result.legend.values()
    for step in result.steps:
        yield step.name
        yield step.note


# the results the chapters T1–T4 render
CHAPTER_RESULT = re.compile(r"^T[124](-nesterov)?$|^T3\[tau=\d(, EF)?\]$")


def _ascii_texts(results):
    bad = []
    for r in results:
        for text in _texts(r):
            if text.count("$") % 2:
                bad.append((r.name, "unbalanced $", text))
            prose = re.sub(r"\$[^$]*\$", "", text)
            prose = re.sub(r"`[^`]*`", "", prose)
            if ASCII_MATH.search(prose):
                bad.append((r.name, "ASCII math", text))
    return bad


def test_explanations_are_latex_not_ascii(results):
    chapters = [r for r in results if CHAPTER_RESULT.match(r.name)]
    assert len(chapters) >= 11, [r.name for r in results]
    bad = _ascii_texts(chapters)
    assert not bad, "write the math of these theory/ texts as $LaTeX$:\n" + "\n".join(
        f"  {n}: {why}: {t}" for n, why, t in bad)


def test_explanations_of_the_newer_results(results):
    """The results added after the conversion (muon cycle, Taylor, EF(γ)) are held to the same
    rule: their titles, legends, step names and notes write math as LaTeX."""
    bad = _ascii_texts([r for r in results if not CHAPTER_RESULT.match(r.name)])
    assert not bad, "write the math of these theory/ texts as $LaTeX$:\n" + "\n".join(
        f"  {n}: {why}: {t}" for n, why, t in bad)


def test_ascii_check_can_fail():
    assert ASCII_MATH.search("E||m|| <= E0")
    assert not ASCII_MATH.search(re.sub(r"\$[^$]*\$", "", r"$\|m\| \le E_0$ (zero buffer)"))


def test_md_math_keeps_math_and_code_escapes_prose():
    out = ab.md_math(r"see `tightness_instance`: $\|x\|_\dagger \le |y|$ for a_b [1] <b>")
    assert "`tightness_instance`" in out
    assert r"$\Vert x\Vert _\dagger \le \vert y\vert $" in out
    assert r"a\_b \[1\] \<b\>" in out


def test_every_step_is_a_display_equation_of_its_own(results):
    for r in results:
        md = ab.steps_md(r, ["verified"] * len(r.steps))
        for block in md.split("\n\n"):
            if "$$" in block:
                assert block.startswith("$$") and block.endswith("$$"), (r.name, block[:200])
        assert md.count("$$") == 2 * len(r.steps), r.name


def test_no_reused_wording(results, monkeypatch):
    r = results[0]
    statuses = ["verified"] * len(r.steps)
    # statuses as if reused from an earlier build: the page still says nothing about it
    monkeypatch.setattr(ab, "check_statuses", lambda res: (statuses, True))
    md = ab.result_md(r)
    assert "reused" not in md and "earlier build" not in md


@pytest.mark.parametrize("width", [ab.WIDTH])
def test_long_relations_are_broken_into_lines_that_fit(results, width):
    """Every statement and step relation: each displayed line is at most the width (plus the
    one unbreakable piece a line may hold)."""
    too_long = []
    for r in results:
        mds = [ab.result_statement_md(r)] + [ab.step_md(s) for s in r.steps]
        for md in mds:
            body = md.strip().strip("$").strip()
            body = body.replace(r"\begin{aligned}", "").replace(r"\end{aligned}", "")
            for line in body.split("\\\\"):
                line = line.replace("&", "").strip()
                if ab.tex_width(line) > 1.5 * width:
                    too_long.append((r.name, round(ab.tex_width(line)), line[:80]))
    assert not too_long, too_long[:10]


def test_breaking_is_presentational():
    """The pieces of a broken expression, joined, are the expression's own LaTeX terms."""
    x, y, z = sp.symbols("x y z", positive=True)
    expr = sum((x + i * y) ** 2 / (z + i) for i in range(1, 12))
    lines = ab.broken_latex(expr, 30)
    assert len(lines) > 1
    joined = " ".join(lines)
    for term in expr.as_ordered_terms():
        assert sp.latex(term).lstrip("-") in joined


def test_md_escape_keeps_angle_brackets():
    assert ab.md_escape("defaults to runs/<name>") == r"defaults to runs/\<name\>"
