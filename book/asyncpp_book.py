"""Helpers shared by the book's executed pages: where the data files are, how to load them.

The book retypes nothing: equations come from ``theory/``, numbers from the verify report and
``experiments/results/``, timelines from ``asyncpp.pipeline``. These helpers only locate and
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
    """Every committed result file ``experiments/results/*.json``, sorted by name."""
    return sorted((repo_root() / "experiments" / "results").glob("*.json"))


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
    """One table cell of Markdown: pipes escaped, line breaks flattened."""
    return " ".join(str(text).replace("|", r"\|").split())


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
                "cited": "bdg-info"}
KIND_TEXT = {"identity": "identity", "sum": "sum (induction)", "inequality": "inequality",
             "monotonicity": "monotonicity", "assumption": "assumption", "cited": "cited fact"}


def md_text(text) -> str:
    """Plain text (a proof step's note) made safe for Markdown: no accidental emphasis, math,
    links or HTML."""
    out = []
    for ch in " ".join(str(text).split()):
        out.append("\\" + ch if ch in "\\`*_[]<>$|#{}" else ch)
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
    """``{status: count}`` in the order verified, FAILED, assumed, cited."""
    return {k: statuses.count(k) for k in STATUS_BADGE if statuses.count(k)}


def badge(status: str) -> str:
    return f"{{{STATUS_BADGE.get(status, 'bdg-secondary')}}}`{status}`"


WRAP = 100  # LaTeX characters per displayed line before a long sum is broken


def _biggest_sum(term):
    """The factor of a product that is the longest sum, or None."""
    import sympy as sp

    sums = [f for f in sp.Mul.make_args(term) if isinstance(f, sp.Add)]
    if not sums:
        return None
    return max(sums, key=lambda f: len(sp.latex(f)))


def _signed(tex: str, first: bool) -> str:
    if first:
        return tex
    return "- " + tex[1:].lstrip() if tex.startswith("-") else "+ " + tex


def _pieces(expr) -> list[tuple[str, int]]:
    """The terms of a sum as (LaTeX, depth) pieces; a long term ``coef·(sum)`` is opened up
    into ``coef\\Big(`` + its own terms (depth 1) + ``\\Big)``."""
    import sympy as sp

    out: list[tuple[str, int]] = []
    for i, term in enumerate(expr.as_ordered_terms()):
        inner = _biggest_sum(term) if isinstance(term, sp.Mul) else None
        if len(sp.latex(term)) <= WRAP or inner is None:
            out.append((_signed(sp.latex(term), i == 0), 0))
            continue
        coef = sp.Mul(*[f for f in sp.Mul.make_args(term) if f is not inner])
        coef_tex = "" if coef == 1 else ("-" if coef == -1 else sp.latex(coef))
        inner_terms = inner.as_ordered_terms()
        group = [(_signed(coef_tex + r"\Big(" + sp.latex(inner_terms[0]), i == 0), 0)]
        group += [(_signed(sp.latex(t), False), 1) for t in inner_terms[1:]]
        group[-1] = (group[-1][0] + r"\Big)", group[-1][1])
        out += group
    return out


def broken_latex(expr) -> list[str]:
    """``expr`` as LaTeX lines for an ``aligned`` block: the terms of a long sum (and of the
    sum inside a long ``coef·(sum)`` term) packed greedily into lines of about :data:`WRAP`
    characters. Purely presentational: the lines concatenate to what sympy renders."""
    import sympy as sp

    if len(sp.latex(expr)) <= WRAP or not isinstance(expr, sp.Add):
        return [sp.latex(expr)]
    lines: list[str] = []
    for tex, depth in _pieces(expr):
        if lines and len(lines[-1]) + len(tex) <= WRAP:
            lines[-1] += " " + tex
        else:
            lines.append((r"\qquad " if depth else "") + tex)
    return lines


def relation_md(lhs_tex: str, rel_tex: str, rhs) -> str:
    """``lhs rel rhs`` as display math, the right-hand side broken over lines if long."""
    lines = broken_latex(rhs)
    if len(lines) == 1:
        return f"$$\n{lhs_tex} {rel_tex} {lines[0]}\n$$"
    body = f"{lhs_tex} {rel_tex}\\ & " + "\\\\\n& ".join(lines)
    return f"$$\n\\begin{{aligned}}\n{body}\n\\end{{aligned}}\n$$"


def result_statement_md(result) -> str:
    """The statement of a :class:`theory.assumptions.Result` as display math."""
    rel = {"<=": r"\le", "=": "=", ">=": r"\ge"}[getattr(result, "relation", "<=")]
    return relation_md(result.quantity_latex, rel, result.statement)


def step_md(step) -> str:
    """A proof step's relation as display math (long right-hand sides broken over lines)."""
    import sympy as sp

    rel = step.relation
    ops = {sp.Le: r"\le", sp.Ge: r"\ge", sp.Eq: "=", sp.Lt: "<", sp.Gt: ">"}
    for cls, tex in ops.items():
        if isinstance(rel, cls):
            return relation_md(sp.latex(rel.lhs), tex, rel.rhs)
    return f"$$\n{step.latex()}\n$$"


def assumptions_md(result) -> str:
    """The assumptions a result rests on, each with its LaTeX statement when it is one of the
    standing assumptions of ``theory.assumptions``."""
    from theory.assumptions import ASSUMPTIONS

    lines = []
    for name in result.assumptions:
        a = ASSUMPTIONS.get(name)
        if a is None:
            lines.append(f"- {md_text(name)}")
        else:
            lines.append(f"- **{name}** $\\;{a.latex}$")
    return "\n".join(lines)


def legend_md(result) -> str:
    """The legend of the placeholder symbols a result's proof uses."""
    import sympy as sp

    if not result.legend:
        return ""
    return "\n".join(f"- ${sp.latex(k)}$: {md_text(v)}" for k, v in result.legend.items())


def steps_md(result, statuses: list[str]) -> str:
    """Every proof step: name, kind, check status, the relation as display math, the note."""
    blocks = []
    for step, status in zip(result.steps, statuses):
        head = f"{badge(status)} **{md_text(step.name)}** · *{KIND_TEXT.get(step.kind, step.kind)}*"
        body = step_md(step)
        note = f"\n\n{md_text(step.note)}" if step.note else ""
        blocks.append(f"{head}\n{body}{note}")
    return "\n\n".join(blocks)


def counts_md(statuses: list[str]) -> str:
    """One line: how many steps have each status."""
    return " ".join(f"{badge(k)} × {v}" for k, v in status_counts(statuses).items())


def trust_md(result, statuses: list[str]) -> str:
    """What the proof assumes or cites (not machine-checked), and any step whose check failed."""
    rows = []
    for step, status in zip(result.steps, statuses):
        if status in ("assumed", "cited", "FAILED"):
            rows.append([badge(status), f"**{md_text(step.name)}**", md_text(step.note) or "—"])
    if not rows:
        return "Every step is machine-checked."
    return md_table(["status", "step", "justification"], rows)


def theory_results() -> list[tuple[str, object]]:
    """``(chapter, Result)`` for every result of ``theory.all_results()``; the chapter is the
    name's prefix (``T3[tau=1, EF]`` → ``T3``, ``T1-nesterov`` → ``T1``)."""
    from theory import all_results

    return [(r.name.split("[")[0].split("-")[0], r) for r in all_results()]


def result_md(result, steps: str = "open") -> str:
    """A result as one Markdown block: statement, assumptions, legend, the check summary, what
    is taken on trust, and the proof steps (``steps="open"``, or ``"dropdown"`` to fold them).
    Every step is checked here (or its status reused, see :func:`check_statuses`)."""
    statuses, cached = check_statuses(result)
    n = len(statuses)
    where = ("reused from an earlier build of the same `theory/` sources" if cached
             else "checked while this page was built")
    parts = [f"**{md_text(result.name)}** — {md_text(result.title)}", result_statement_md(result),
             "Assumptions:\n\n" + assumptions_md(result)]
    legend = legend_md(result)
    if legend:
        parts.append(":::{dropdown} Legend of the proof's symbols\n" + legend + "\n:::")
    parts.append(f"Proof: {n} steps ({where}): {counts_md(statuses)}")
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
