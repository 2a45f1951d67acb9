"""The browser check of the built book (``book/check``) on a tiny synthetic site.

A clean page passes; a page with raw TeX, a MathJax error, a table wider than the column, a
clipped display equation, a caption that is a file name, a figure whose text is 4 px on the
page and builder-facing text fails, each with its own message. The rules and the PNG text-size
record are also checked without a browser. The browser tests skip (with the reason) where
Debian's chromium, its chromedriver or selenium is missing; ``.ci/run`` installs them.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from book.check import figtext, rules

ROOT = Path(__file__).resolve().parent.parent
MATHJAX = ROOT / "book" / "_vendor" / "mathjax"


# -- rules, no browser -------------------------------------------------------------------------
@pytest.mark.parametrize("text, rule", [
    ("the update x_{t+1} is applied", "TeX subscript/superscript group"),
    ("where \\Delta is the step", "TeX command"),
    ("on f = h x^2/2 the cycle", "ASCII power"),
    ("the margin min_t |v| holds", "ASCII min/max subscript"),
    ("the bound max_s ‖x_s‖ of the iterates", "ASCII min/max subscript"),
    ("with v*_t the cycle", "ASCII subscript"),
    ("x(t+1) = x(t) − u(t−1)", "ASCII function of time"),
    ("H(z) = (1−β)/(1 − βz)", "ASCII fraction"),
    ("a number g >= 0", "ASCII relation"),
    ("*EF(γ) against EF\\**", "unrendered Markdown emphasis"),
    ("see issue 21 for the runs", "names an issue"),
    ("as in table h1, the gap", "internal table id"),
    ("Items written on 2026-11-29 at 21:20 UTC", "date of writing"),
    ("over five sessions", "names a session"),
    ("the paper's full text was not reachable", "how the project was built"),
])
def test_each_rule_catches_its_pattern(text, rule):
    assert rule in {r for r, _ in rules.text_problems(text)}


@pytest.mark.parametrize("text", [
    "Muon recovers 41 % of the gap at lr 0.01 (τ = 1, β = 0.95).",
    "The tables of the ⟨·⟩ module, per optimizer; see the issue tracker of PyTorch.",
    "EF(γ*) against EF, 3 seeds: 3.550 ± 0.222.",
    "run_name and ef_gamma are keys; x ≤ y and 1/2 of it.",
    "max_grad_norm and min_lr_ratio are parameters, not subscripts.",
])
def test_legitimate_prose_is_clean(text):
    assert rules.text_problems(text) == []


def test_captions():
    assert rules.caption_problems(None)[0][0] == "figure without caption"
    assert rules.caption_problems("table1_val_curves.png")[0][0] == "caption is a file name"
    assert rules.caption_problems("val curves")[0][0].startswith("caption is not a sentence")
    assert rules.caption_problems("Validation loss of the three modes, mean over seeds.") == []


def test_swallowed_delimiter_in_tex():
    assert rules.tex_problems(r"|\Delta_{i|} \le 1")
    assert rules.tex_problems(r"|\Delta_{i}| \le \|x\|_{2}") == []


def test_png_records_its_smallest_text(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    figtext.install()
    try:
        fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
        ax.plot([0, 1], [0, 1], label="a line")
        ax.legend(fontsize=6)
        ax.tick_params(labelsize=12)
        fig.savefig(tmp_path / "f.png", dpi=150)
        plt.close(fig)
    finally:
        figtext.uninstall()
    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    fig.savefig(tmp_path / "g.png", dpi=150)
    plt.close(fig)
    assert figtext.KEY not in figtext.read((tmp_path / "g.png").read_bytes())
    data = (tmp_path / "f.png").read_bytes()
    assert figtext.recorded_text_px(data) == pytest.approx(6 * 150 / 72, abs=1e-3)
    assert figtext.size(data) == (600, 450)


# -- the browser -------------------------------------------------------------------------------
def _browser_or_skip():
    for path in ("/usr/bin/chromium", "/usr/bin/chromedriver"):
        if not os.access(path, os.X_OK):
            pytest.skip(f"{path} is not installed (apt-get install chromium chromium-driver)")
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[book]')")


def _png(path: Path, font_pt: float, dpi: int, width_in: float) -> str:
    plt = pytest.importorskip("matplotlib.pyplot")
    figtext.install()
    try:
        fig, ax = plt.subplots(figsize=(width_in, 2.5))
        ax.plot([0, 1, 2], [3, 1, 2], label="synchronous")
        ax.legend(fontsize=font_pt)
        ax.tick_params(labelsize=font_pt)
        ax.set_xlabel("step", fontsize=font_pt)
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
    finally:
        figtext.uninstall()
    return path.name


PAGE = """<!doctype html><html><head><meta charset="utf-8">{head}
<style>body {{ margin: 0; }} article.bd-article {{ width: 700px; margin: 0 auto; }}
img {{ max-width: 100%; }} .math {{ overflow-x: auto; }}</style></head>
<body><article class="bd-article">{body}</article></body></html>"""
MJ = '<script defer src="/mathjax/tex-mml-chtml.js"></script>'


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    _browser_or_skip()
    root = tmp_path_factory.mktemp("site")
    shutil.copytree(MATHJAX, root / "mathjax")
    good = _png(root / "good.png", font_pt=11, dpi=100, width_in=6)
    tiny = _png(root / "table1_val_curves.png", font_pt=5, dpi=200, width_in=12)
    (root / "index.html").write_text(PAGE.format(head=MJ, body=f"""
<h1>A clean page</h1>
<p>The gap is \\(x_{{t+1}} - x_t\\) per step, and 41 % of it is recovered.</p>
<div class="math">\\[ x_{{t+1}} = x_t - 2u_{{t-1}} + u_{{t-2}} \\]</div>
<table><tr><th>optimizer</th><th>gap</th></tr><tr><td>Muon</td><td>+0.16 ± 0.03</td></tr>
</table>
<table><tr><td style="width:70px"><p style="margin:0">within noise</p></td><td>two lines
in a paragraph box are not squeezed</td></tr></table>
<figure><img src="{good}"><figcaption>Validation loss of the synchronous run over training.
</figcaption></figure>
<pre>x_{{t+1}} = x_t in code is fine: issue 21</pre>"""), encoding="utf-8")
    wide = "".join("<td style='white-space:nowrap'>3.550 ± 0.222 (n=3)</td>" for _ in range(9))
    long_eq = " + ".join(f"a_{{{i}}} b_{{{i}}} c_{{{i}}}" for i in range(40))
    (root / "bad.html").write_text(PAGE.format(head=MJ, body=f"""
<h1>A broken page</h1>
<p>The update x_{{t+1}} = x_t − u(t−1) as in issue 21.</p>
<p>A formula with an error: \\(x^1^2\\)</p>
<div class="math">\\[ {long_eq} \\]</div>
<div><table><tr>{wide}</tr></table></div>
<table><tr><td style="width:20px"><p>within noise here</p></td><td>x</td></tr></table>
<figure><img src="{tiny}"><figcaption>table1_val_curves.png</figcaption></figure>
"""), encoding="utf-8")
    return root


def test_clean_page_passes(site, tmp_path):
    from book.check import browser

    t0 = time.monotonic()
    report = browser.run(site, tmp_path / "screens", only=["index.html"])
    assert report.findings == [], "\n".join(map(str, report.findings))
    assert (tmp_path / "screens" / "index.png").is_file()
    assert time.monotonic() - t0 < 60


def test_broken_page_fails_with_one_message_per_defect(site, tmp_path):
    from book.check import browser

    report = browser.run(site, tmp_path / "screens", only=["bad.html"])
    found = {f.rule for f in report.findings}
    text = "\n".join(map(str, report.findings))
    for rule in ("TeX subscript/superscript group", "ASCII function of time", "names an issue",
                 "MathJax error", "wider than the column", "display equation clipped",
                 "caption is a file name", "figure text too small", "table cell squeezed"):
        assert rule in found, f"{rule!r} not reported; got:\n{text}"
    assert "table1_val_curves.png" in text and "bad.html: " in text
    small = next(f for f in report.findings if f.rule == "figure text too small")
    # 5 pt at 200 dpi = 13.9 px in the 2400-px-wide PNG; shown w px wide: 13.9 w / 2400 px
    m = re.search(r"smallest text ([\d.]+) px at (\d+) px wide", small.detail)
    assert m, small.detail
    assert float(m[1]) == pytest.approx(5 * 200 / 72 * int(m[2]) / 2400, abs=0.06)


def test_cli_exit_status(site, tmp_path, capsys):
    from book.check import browser

    assert browser.main([str(site), "--screens", str(tmp_path), "--page", "index.html"]) == 0
    assert browser.main([str(site), "--screens", str(tmp_path), "--page", "bad.html"]) == 1
    out = capsys.readouterr().out
    assert "bad.html: names an issue" in out
    assert browser.main([str(tmp_path / "nothing")]) == 2
