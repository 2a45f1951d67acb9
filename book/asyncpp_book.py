"""Helpers shared by the book's executed pages: where the data files are, how to load them.

The book retypes nothing: equations come from ``theory/``, numbers from the verify report and
``experiments/<tier>/results/``, timelines from ``asyncpp.pipeline``. These helpers only locate and
load those sources; when a source does not exist yet they say so instead of inventing data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

VERIFY_HINT = "run `pytest verify/` (or `make verify`) and rebuild the book"
EXPERIMENTS_HINT = "run the commands in experiments/README.md and rebuild the book"


def repo_root() -> Path:
    """The repository root: ``$ASYNCPP_REPO_ROOT`` (set by the book build) or the parent of
    ``book/``."""
    env = os.environ.get("ASYNCPP_REPO_ROOT")
    return Path(env) if env else Path(__file__).resolve().parent.parent


def verify_report_path() -> Path:
    """``$ASYNCPP_VERIFY_REPORT`` if set, else ``.pytest_cache/asyncpp-verify-report.json``."""
    env = os.environ.get("ASYNCPP_VERIFY_REPORT")
    if env:
        return Path(env)
    return repo_root() / ".pytest_cache" / "asyncpp-verify-report.json"


def load_verify_report() -> dict | None:
    """The verify report as a dict, or ``None`` when no run has written it yet."""
    path = verify_report_path()
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def experiment_result_paths() -> list[Path]:
    """Every committed result file of the tiny tier, ``experiments/tiny/results/*.json``,
    sorted by name."""
    return sorted((repo_root() / "experiments" / "tiny" / "results").glob("*.json"))


def load_experiment_results() -> dict[str, dict]:
    """``{file stem: parsed JSON}`` for every result file (empty when none exists yet)."""
    out = {}
    for path in experiment_result_paths():
        with path.open(encoding="utf-8") as fh:
            out[path.stem] = json.load(fh)
    return out


def not_yet(what: str, hint: str) -> str:
    """The sentence a page prints when its data source does not exist yet."""
    return f"Not yet generated: {what} does not exist in this checkout; {hint}."


# -- rendering ---------------------------------------------------------------------------------
def md_escape(text) -> str:
    """One table cell of Markdown: pipes and angle brackets escaped (a raw ``<name>`` would be
    read as an HTML tag and vanish), line breaks flattened."""
    text = str(text).replace("|", r"\|").replace("<", r"\<").replace(">", r"\>")
    return " ".join(text.split())


def fmt(x, digits: int = 3) -> str:
    """A number for a table: ``digits`` significant digits; strings ("inf", "nan") unchanged."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return md_escape(x)


def md_table(header: list[str], rows: list[list], align: str | None = None) -> str:
    """A Markdown (MyST) table; ``align`` is one of ``l``/``r``/``c`` per column."""
    align = align or "l" * len(header)
    rule = {"l": ":--", "r": "--:", "c": ":-:"}
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |",
             "| " + " | ".join(rule[a] for a in align) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(c if isinstance(c, str) else fmt(c) for c in row) + " |")
    return "\n".join(lines)


# -- theory ------------------------------------------------------------------------------------
STATUS_BADGE = {"verified": "bdg-success", "FAILED": "bdg-danger", "assumed": "bdg-warning",
                "cited": "bdg-info", "reasoned": "bdg-secondary"}
KIND_TEXT = {"identity": "identity", "sum": "sum (induction)", "inequality": "inequality",
             "monotonicity": "monotonicity", "assumption": "assumption", "cited": "cited fact",
             "reasoning": "own reasoning (unchecked)"}


def md_text(text) -> str:
    """Plain text (a proof step's note) made safe for Markdown: no accidental emphasis, math,
    links or HTML."""
    out = []
    for ch in " ".join(str(text).split()):
        out.append("\\" + ch if ch in "\\`*_[]<>$|#{}" else ch)
    return "".join(out)


_MD_TEXT_SPECIAL = "\\_[]<>|#{}"


def md_math(text) -> str:
    r"""Text with inline LaTeX between ``$`` signs (a proof step's name or note, a result's
    title, a legend entry, as written in ``theory/``) made into MyST: the math stays math,
    the prose between is escaped (no accidental links, HTML or headings; ``*emphasis*`` and
    ``code`` are kept). Inside math ``\|`` and ``|`` become ``\Vert`` and ``\vert`` (the same
    symbols), so the text can also sit in a table cell."""
    parts = " ".join(str(text).split()).split("$")
    if len(parts) % 2 == 0:  # unbalanced dollars: show it as it is, nothing is lost
        return md_text(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            tex = part.strip().replace("\\|", r"\Vert ").replace("|", r"\vert ")
            out.append(f"${tex}$")
        else:  # prose: escape, except inside `code` spans
            pieces = part.split("`")
            if len(pieces) % 2 == 0:
                pieces = ["`".join(pieces)]
            out.append("`".join(
                piece if j % 2 else "".join("\\" + ch if ch in _MD_TEXT_SPECIAL else ch
                                            for ch in piece)
                for j, piece in enumerate(pieces)))
    return "".join(out)


def theory_fingerprint() -> str:
    """Hash of every ``theory/*.py`` and the sympy version: check statuses are a pure function
    of these, so they can be reused between builds while it is unchanged."""
    import hashlib

    import sympy

    h = hashlib.sha256(sympy.__version__.encode())
    for path in sorted((repo_root() / "theory").glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


def check_statuses(result) -> tuple[list[str], bool]:
    """The status of every proof step of ``result`` (``Step.check()``), in order, and whether
    they came from the cache of an earlier build of the same theory sources
    (``book/_build/.theory-checks/``)."""
    cache_dir = repo_root() / "book" / "_build" / ".theory-checks"
    cache = cache_dir / f"{theory_fingerprint()}.json"
    data = {}
    if cache.is_file():
        try:
            data = json.loads(cache.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
    names = [s.name for s in result.steps]
    entry = data.get(result.name)
    if entry and entry.get("steps") == names:
        return list(entry["status"]), True
    statuses = [s.check() for s in result.steps]
    data[result.name] = {"steps": names, "status": statuses}
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, cache)
    return statuses, False


def status_counts(statuses: list[str]) -> dict[str, int]:
    """``{status: count}`` in the order verified, FAILED, assumed, cited, reasoned."""
    return {k: statuses.count(k) for k in STATUS_BADGE if statuses.count(k)}


def badge(status: str) -> str:
    return f"{{{STATUS_BADGE.get(status, 'bdg-secondary')}}}`{status}`"


WIDTH = 40  # visible characters per displayed line (~520 px of MathJax at the book's size)


def tex_width(tex: str) -> float:
    r"""Approximate rendered width of LaTeX, in characters: commands count as one glyph,
    ``\frac{a}{b}`` as its wider part, scripts at 0.7, relation and binary operators with
    their spacing. Only used to decide where a long formula is broken."""
    import re

    def group(t: str, i: int) -> tuple[str, int]:
        # the {...} group starting at t[i] (or a single token), and the index after it
        if i < len(t) and t[i] == "{":
            depth = 0
            for j in range(i, len(t)):
                depth += {"{": 1, "}": -1}.get(t[j], 0)
                if depth == 0:
                    return t[i + 1:j], j + 1
            return t[i + 1:], len(t)
        m = re.match(r"\\[A-Za-z]+|.", t[i:]) if i < len(t) else None
        return (m.group(0), i + len(m.group(0))) if m else ("", i)

    def width(t: str) -> float:
        w, i = 0.0, 0
        while i < len(t):
            ch = t[i]
            if t.startswith(r"\frac", i) or t.startswith(r"\dfrac", i):
                i += 5 if t.startswith(r"\frac", i) else 6
                num, i = group(t, i)
                den, i = group(t, i)
                w += max(width(num), width(den)) + 0.6
            elif t.startswith(r"\sqrt", i):
                arg, i = group(t, i + 5)
                w += width(arg) + 1
            elif ch in "^_":
                arg, i = group(t, i + 1)
                w += 0.7 * width(arg)
            elif ch == "\\":
                m = re.match(r"\\([A-Za-z]+|.)", t[i:])
                name = m.group(1)
                i += len(m.group(0))
                if name in ("left", "right", "Bigl", "Bigr", "bigl", "bigr", "Big", "big",
                            "mathbb", "operatorname", "mathrm", "text", "displaystyle"):
                    continue
                if name in ("qquad",):
                    w += 2
                elif name in ("quad",):
                    w += 1
                elif name in ("le", "ge", "leq", "geq", "cdot", "neq", "approx"):
                    w += 2
                elif name in ("sum", "prod"):
                    w += 1.5
                elif len(name) == 1 and not name.isalpha():
                    w += 0.3 if name in ",;: " else 1
                else:
                    w += 1
            elif ch in "{} ":
                i += 1
            elif ch in "+-=<>":
                w += 2
                i += 1
            else:
                w += 1
                i += 1
        return w

    return width(tex)


_OPEN = {0: (r"\Bigl[", r"\Bigr]"), 1: (r"\Bigl(", r"\Bigr)")}


def _wrapped(pieces: list[str], depth: int, tail: str = "") -> list[str]:
    """``pieces`` inside a pair of big delimiters (brackets and parentheses alternate)."""
    left, right = _OPEN[depth % 2]
    out = list(pieces)
    out[0] = left + " " + out[0]
    out[-1] = out[-1] + " " + right + tail
    return out


def latex_pieces(expr, depth: int = 0) -> list[str]:
    r"""``expr`` as LaTeX cut into pieces between which a line may break: the terms of a long
    sum, the factors of a long product (a long sum factor opened up inside ``\Bigl(``
    ... ``\Bigr)``), the numerator of a long fraction, the summand of a long Σ. The pieces
    joined by spaces are the expression; breaking is purely presentational."""
    import sympy as sp

    tex = sp.latex(expr)
    if tex_width(tex) <= WIDTH * 0.8:
        return [tex]
    if isinstance(expr, sp.Add):
        out: list[str] = []
        for i, term in enumerate(expr.as_ordered_terms()):
            parts = latex_pieces(term, depth)
            first = parts[0]
            if i:
                first = "- " + first[1:].lstrip() if first.startswith("-") else "+ " + first
            out += [first] + parts[1:]
        return out
    if isinstance(expr, sp.Mul):
        coeff, rest = expr.as_coeff_Mul()
        if coeff < 0:
            parts = latex_pieces(-expr, depth)
            return ["-" + parts[0]] + parts[1:]
        num, den = sp.fraction(expr)
        out = [] if den == 1 else [r"\frac{1}{" + sp.latex(den) + "}"]
        factors = sp.Mul.make_args(num)  # short factors first, then the long ones
        for f in sorted(factors, key=lambda f: tex_width(sp.latex(f)) > WIDTH * 0.5):
            ft = sp.latex(f)
            if tex_width(ft) <= WIDTH * 0.5:
                out.append(r"\left(" + ft + r"\right)" if isinstance(f, sp.Add) else ft)
            elif isinstance(f, sp.Add):
                out += _wrapped(latex_pieces(f, depth + 1), depth)
            elif isinstance(f, sp.Pow) and isinstance(f.base, sp.Add) and (
                    f.exp.is_Integer or f.exp == sp.Rational(1, 2)):
                # a long square root cannot break inside \sqrt{}: written as (…)^{1/2}
                power = "^{" + (sp.latex(f.exp) if f.exp.is_Integer else "1/2") + "}"
                out += _wrapped(latex_pieces(f.base, depth + 1), depth, power)
            elif isinstance(f, (sp.Sum, sp.Mul, sp.Min, sp.Max)):
                out += latex_pieces(f, depth + 1)
            else:
                out.append(ft)
        return out
    if isinstance(expr, sp.Pow) and isinstance(expr.base, sp.Add) and (
            (expr.exp.is_Integer and expr.exp > 0) or expr.exp == sp.Rational(1, 2)):
        power = "^{" + (sp.latex(expr.exp) if expr.exp.is_Integer else "1/2") + "}"
        return _wrapped(latex_pieces(expr.base, depth + 1), depth, power)
    if isinstance(expr, (sp.Min, sp.Max)):
        args = [latex_pieces(a, depth + 1) for a in expr.args]
        out = []
        for i, parts in enumerate(args):
            out += [p + ("," if j == len(parts) - 1 and i < len(args) - 1 else "")
                    for j, p in enumerate(parts)]
        out = _wrapped(out, depth)
        out[0] = (r"\min" if isinstance(expr, sp.Min) else r"\max") + " " + out[0]
        return out
    if isinstance(expr, sp.Sum) and len(expr.limits) == 1:
        v, lo, hi = expr.limits[0]
        head = r"\sum_{" + f"{sp.latex(v)}={sp.latex(lo)}" + "}^{" + sp.latex(hi) + "}"
        inner = latex_pieces(expr.function, depth + 1)
        if len(inner) == 1:
            return [tex]
        out = _wrapped(inner, depth)
        out[0] = head + " " + out[0]
        return out
    return [tex]


def _pack(pieces: list[str], width: float) -> list[str]:
    """Greedy packing of pieces into lines of at most ``width`` (a piece never splits)."""
    lines: list[str] = []
    for piece in pieces:
        if lines and tex_width(lines[-1]) + tex_width(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return lines


def broken_latex(expr, width: float = WIDTH) -> list[str]:
    """``expr`` as LaTeX lines of at most about ``width`` visible characters (see
    :func:`latex_pieces`); a single line when it fits."""
    import sympy as sp

    tex = sp.latex(expr)
    if tex_width(tex) <= width:
        return [tex]
    return _pack(latex_pieces(expr), width)


def relation_md(lhs, rel_tex: str, rhs, width: float = WIDTH) -> str:
    r"""``lhs rel rhs`` as display math. When it does not fit on one line, the right-hand side
    is broken into lines aligned after the relation; a long left-hand side gets lines of its
    own, with the relation starting the right-hand side's first line. ``width``: visible
    characters per line (see :func:`tex_width`)."""
    import sympy as sp

    lhs_tex = lhs if isinstance(lhs, str) else sp.latex(lhs)
    rhs_tex = sp.latex(rhs)
    lw = tex_width(lhs_tex)
    if lw + tex_width(rhs_tex) + 3 <= width:
        return f"$$\n{lhs_tex} {rel_tex} {rhs_tex}\n$$"
    if lw <= width / 3:
        lines = broken_latex(rhs, width - lw - 3)
        body = f"{lhs_tex} {rel_tex}\\ & " + " \\\\\n& \\quad ".join(lines)
    else:
        left = [lhs_tex] if isinstance(lhs, str) else broken_latex(lhs, width)
        right = broken_latex(rhs, width - 4)
        rows = ["& " + left[0]] + ["& \\quad " + x for x in left[1:]]
        rows += [f"& {rel_tex} " + right[0]] + ["& \\quad " + x for x in right[1:]]
        body = " \\\\\n".join(rows)
    return f"$$\n\\begin{{aligned}}\n{body}\n\\end{{aligned}}\n$$"


def result_statement_md(result, width: float = WIDTH) -> str:
    """The statement of a :class:`theory.assumptions.Result` as display math."""
    rel = {"<=": r"\le", "=": "=", ">=": r"\ge"}[getattr(result, "relation", "<=")]
    return relation_md(result.quantity_latex, rel, result.statement, width)


def _chapter_doc(chapter: str) -> str | None:
    """The theory page of a result's chapter tag (``T1`` → ``t1``), or ``None`` when no page
    of ``book/theory/`` is named after it or opens with the tag (``# MC — …``)."""
    folder = repo_root() / "book" / "theory"
    if (folder / f"{chapter.lower()}.md").is_file():
        return chapter.lower()
    for page in sorted(folder.glob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                if line[2:].split(" ")[0].strip("—:") == chapter:
                    return page.stem
                break
    return None


def results_table_md() -> str:
    """The theory index: a list of every result of ``theory.all_results()`` (its chapter, its
    title, its proof steps by check status), then every result's final bound as display math
    (an equation cannot sit in a table cell without overflowing it)."""
    rows, bounds = [], []
    for chapter, result in theory_results():
        statuses, _ = check_statuses(result)
        doc = _chapter_doc(chapter)
        link = f"{{doc}}`{chapter} <{doc}>`" if doc else chapter
        rows.append(f"- **{link}**, `{result.name}`: {md_math(result.title)}. Proof steps: "
                    f"{counts_md(statuses)}")
        bounds.append(f"**{md_text(result.name)}** ({link})\n\n{result_statement_md(result)}")
    # a list: the badges of a table's last column wrap over many lines in the 700-px column
    return "\n".join(rows) + "\n\n**The final bounds.**\n\n" + "\n\n".join(bounds)


def step_md(step) -> str:
    """A proof step's relation as display math (long right-hand sides broken over lines)."""
    import sympy as sp

    rel = step.relation
    ops = {sp.Le: r"\le", sp.Ge: r"\ge", sp.Eq: "=", sp.Lt: "<", sp.Gt: ">"}
    for cls, tex in ops.items():
        if isinstance(rel, cls):
            return relation_md(rel.lhs, tex, rel.rhs)
    return f"$$\n{step.latex()}\n$$"


def assumptions_md(result) -> str:
    """The assumptions a result rests on, each with its LaTeX statement when it is one of the
    standing assumptions of ``theory.assumptions``."""
    import re

    from theory.assumptions import ASSUMPTIONS

    lines = []
    for name in result.assumptions:
        a = ASSUMPTIONS.get(name)
        # a modelling assumption named in plain text, "quadratic f = h x^2/2" (the name verify/
        # matches): its formula set as math
        m = re.fullmatch(r"([A-Za-z][A-Za-z ,-]*?)\s+([A-Za-z(][^$]*=[^$]*)", name)
        if a is None and m:
            lines.append(f"- {md_text(m[1])} ${m[2]}$")
        elif a is None:
            lines.append(f"- {md_math(name)}")
        else:
            lines.append(f"- **{name}** $\\;{a.latex}$")
    return "\n".join(lines)


def legend_md(result) -> str:
    """The legend of the placeholder symbols a result's proof uses."""
    import sympy as sp

    if not result.legend:
        return ""
    return "\n".join(f"- ${sp.latex(k)}$: {md_math(v)}" for k, v in result.legend.items())


def steps_md(result, statuses: list[str]) -> str:
    """Every proof step: its check status, name and kind (one line), the relation as display
    math (its own block, so it is set as an equation), and the explanation."""
    blocks = []
    for step, status in zip(result.steps, statuses):
        head = (f"{badge(status)} **{md_math(step.name)}** · "
                f"*{KIND_TEXT.get(step.kind, step.kind)}*")
        note = f"\n\n{md_math(step.note)}" if step.note else ""
        blocks.append(f"{head}\n\n{step_md(step)}{note}")
    return "\n\n".join(blocks)


def counts_md(statuses: list[str]) -> str:
    """One line: how many steps have each status."""
    return " ".join(f"{badge(k)} × {v}" for k, v in status_counts(statuses).items())


def trust_md(result, statuses: list[str]) -> str:
    """What the proof assumes or cites (not machine-checked), and any step whose check failed."""
    rows = []
    for step, status in zip(result.steps, statuses):
        if status in ("assumed", "cited", "reasoned", "FAILED"):
            rows.append(f"- {badge(status)} **{md_math(step.name)}**: "
                        f"{md_math(step.note) or '—'}")
    if not rows:
        return "Every step is machine-checked."
    # a list, not a table: a justification is a sentence with math, too wide for a cell
    return "\n".join(rows)


def theory_results() -> list[tuple[str, object]]:
    """``(chapter, Result)`` for every result of ``theory.all_results()``; the chapter is the
    name's prefix (``T3[tau=1, EF]`` → ``T3``, ``T1-nesterov`` → ``T1``)."""
    from theory import all_results

    return [(r.name.split("[")[0].split("-")[0], r) for r in all_results()]


def result_md(result, steps: str = "open") -> str:
    """A result as one Markdown block: statement, assumptions, legend, the check summary, what
    is taken on trust, and the proof steps (``steps="open"``, or ``"dropdown"`` to fold them).
    Every step is checked here (or its status reused, see :func:`check_statuses`)."""
    statuses, _ = check_statuses(result)
    n = len(statuses)
    parts = [f"**{md_text(result.name)}** — {md_math(result.title)}", result_statement_md(result),
             "Assumptions:\n\n" + assumptions_md(result)]
    legend = legend_md(result)
    if legend:
        parts.append(":::{dropdown} Legend of the proof's symbols\n" + legend + "\n:::")
    parts.append(f"Proof: {n} steps, each checked by sympy as `python -m theory` checks it: "
                 f"{counts_md(statuses)}")
    parts.append("What the proof takes on trust, and any step whose check failed:\n\n"
                 + trust_md(result, statuses))
    body = steps_md(result, statuses)
    if steps == "dropdown":
        parts.append(f"::::{{dropdown}} All {n} proof steps of {md_text(result.name)}\n"
                     f"{body}\n::::")
    else:
        parts.append(body)
    return "\n\n".join(parts)


def readme_section(path: Path, keyword: str) -> str | None:
    """The body of the first section of a Markdown file whose heading contains ``keyword``
    (case-insensitive), up to the next heading of the same or a higher level; its own
    sub-headings become bold paragraphs (they cannot be headings inside a cell's output).
    ``None`` when the file or the section does not exist."""
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8").splitlines()
    start = level = None
    for i, line in enumerate(lines):
        stripped = line.lstrip("#")
        depth = len(line) - len(stripped)
        if depth and line[depth:depth + 1] == " ":
            if start is None and keyword.lower() in stripped.lower():
                start, level = i + 1, depth
            elif start is not None and depth <= level:
                return _demote("\n".join(lines[start:i]))
    if start is None:
        return None
    return _demote("\n".join(lines[start:]))


def _demote(text: str) -> str:
    out = []
    for line in text.splitlines():
        stripped = line.lstrip("#")
        if stripped != line and stripped.startswith(" "):
            out.append(f"**{stripped.strip()}**")
        else:
            out.append(line)
    return "\n".join(out).strip()


# -- experiments ---------------------------------------------------------------------------------
def load_report():
    """The report of the project's experiments (``asyncpp.study.ladder.report``), or ``None``
    when the results are missing."""
    if not experiment_result_paths():
        return None
    from asyncpp.study.ladder import report

    return report


def recorded_numbers(text: str) -> str:
    """``text`` with every marked number (``<!--n:KEY-->…<!--/n-->``) as the record
    ``experiments/numbers.json`` holds it — the record ``python experiments/report.py
    --fill-readme`` writes and fills the READMEs from — never computed again here. A marker the
    record lacks stops the build with an error naming the key."""
    from asyncpp.study.ladder.numbers_record import fill_from_record

    return fill_from_record(text)


def load_claims():
    """The per-claim verdicts (``asyncpp.study.ladder.claims``)."""
    from asyncpp.study.ladder import claims

    return claims


# -- figures -------------------------------------------------------------------------------------
def figure_html(path, caption: str, alt: str | None = None):
    """A PNG as an HTML ``<figure>`` with its caption, the image embedded (the file may be a
    temporary one). ``caption`` is a sentence, in Markdown-free text; the browser check
    (``book/check``) requires it. Display the returned object."""
    import base64
    import html

    from IPython.display import HTML

    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    cap = html.escape(" ".join(caption.split()))
    return HTML(f'<figure class="asyncpp-figure"><img src="data:image/png;base64,{data}" '
                f'alt="{html.escape(alt or cap)}" style="max-width:100%">'
                f"<figcaption><p>{cap}</p></figcaption></figure>")


def show_figure(fig, caption: str, dpi: int = 100) -> None:
    """Display a matplotlib figure with a caption (instead of ``plt.show()``, which has
    none), then close it."""
    import io
    import tempfile

    import matplotlib.pyplot as plt
    from IPython.display import display

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figure.png"
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        path.write_bytes(buf.getvalue())
        display(figure_html(path, caption))
    plt.close(fig)
