"""The package's import layering, read from the source (no imports executed):

- ``train → pipeline → {optim, models, data, delay}``: a lower layer never imports a higher one;
- no import cycles between modules;
- no private name (``_x``) imported from another module;
- the experiments' machinery, ``asyncpp.study.ladder``: no import cycle of any kind among the
  modules of ``src/asyncpp`` or ``experiments/`` (an import inside a function,
  ``__import__``/``import_module`` and a ``"module:function"`` string all count as edges), no
  import inside a function body of the package (the one optional dependency, matplotlib, is
  reached through ``plotting.pyplot``), no ``sys.path`` edits, and ``experiments/`` holding
  only thin entry points that call the package.

``asyncpp.names`` and ``asyncpp.pipeline.registry`` hold only constants and may be read by
every layer.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "asyncpp"
LAYER = {"names": 0, "optim": 1, "models": 1, "data": 1, "delay": 1, "pipeline": 2, "train": 3}
SHARED = {"asyncpp.names", "asyncpp.pipeline.registry", "asyncpp.models.config"}


def modules() -> dict[str, Path]:
    out = {}
    for f in SRC.rglob("*.py"):
        parts = f.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def imports(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names imported from it) for every import in ``path``, resolved."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((mod, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
    return [(m, n) for m, n in found if m.startswith("asyncpp")]


def _top(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_lower_layers_never_import_higher_ones():
    bad = []
    for name, path in modules().items():
        me = LAYER.get(_top(name))
        if me is None:
            continue
        for mod, _ in imports(name, path):
            if mod in SHARED:
                continue
            other = LAYER.get(_top(mod))
            if other is not None and other > me:
                bad.append(f"{name} imports {mod}")
    assert not bad, bad


def test_no_import_cycles():
    mods = modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        for mod, names in imports(name, path):
            # `from pkg import sub` names a submodule.
            subs = {f"{mod}.{n}" for n in names if f"{mod}.{n}" in mods}
            deps |= subs or ({mod} if mod in mods else set())
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    # A package's __init__ re-exporting its own submodules is not a cycle of concern.
    state, cycles = {}, []

    def visit(n, stack):
        state[n] = 1
        for d in graph.get(n, ()):
            if n.startswith(d + ".") or d.startswith(n + "."):
                continue
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    assert not cycles, cycles


def test_no_private_names_across_modules():
    bad = []
    for name, path in modules().items():
        for mod, names in imports(name, path):
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{name}: from {mod} import {n}")
    assert not bad, bad


def test_the_checks_see_a_violation(tmp_path, monkeypatch):
    """The reader resolves relative imports, so a planted upward import would be reported."""
    f = tmp_path / "m.py"
    f.write_text("from ..train.trainer import _x\nfrom . import schedules\n")
    got = imports("asyncpp.pipeline.m", f)
    assert ("asyncpp.train.trainer", ["_x"]) in got and ("asyncpp.pipeline", ["schedules"]) in got


# -- the experiments' machinery (asyncpp.study.ladder) and experiments/ ----------------------
ROOT = Path(__file__).resolve().parents[1]
LADDER = ROOT / "src" / "asyncpp" / "study" / "ladder"
EXPERIMENTS = ROOT / "experiments"
# an optional dependency imported where it is first needed (plotting's docstring says why)
OPTIONAL_LAZY = {("plotting.py", "matplotlib"), ("plotting.py", "matplotlib.pyplot")}
# a standalone experiment with its own folder, data and pre-registration (not the ladder's
# machinery): it trains nothing through the package and no other module imports it
STANDALONE = {"stability_edge.py"}


def _all_modules(root: Path) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        if any(p.startswith(".") or p in ("_build", "__pycache__") for p in f.parts):
            continue
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imported_names(tree: ast.AST, package: list[str]) -> list[str]:
    """Every module name ``tree`` reaches: import statements anywhere (function bodies too),
    ``__import__``/``import_module`` calls on a constant, and "module:function" strings."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                base = ".".join([*up, base] if base else up)
            names += [base] + [f"{base}.{a.name}" for a in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "id", getattr(node.func, "attr", ""))
              in ("__import__", "import_module")):
            names.append(node.args[0].value.split(":")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ":" in node.value:
            head = node.value.split(":")[0]
            if re.fullmatch(r"[A-Za-z_][\w.]*", head):
                names.append(head)
    return names


def _graph(root: Path, prefix: str) -> dict[str, set[str]]:
    """Module → the modules of ``root`` it imports (names as ``prefix`` + dotted path)."""
    mods = _all_modules(root)
    full = {(f"{prefix}.{m}" if m else prefix).strip("."): f for m, f in mods.items()}
    g = {m: set() for m in full}
    for m, f in full.items():
        pkg = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        for n in _imported_names(ast.parse(f.read_text(encoding="utf-8")), pkg):
            # a name as written, or as a script beside it spells it (``import sweep`` in
            # experiments/, with that folder on sys.path)
            scripted = f"{prefix}.{n}"
            for cand in (n, n.rsplit(".", 1)[0], scripted, scripted.rsplit(".", 1)[0]):
                if cand in g and cand != m and not m.startswith(cand + "."):
                    g[m].add(cand)
    return g


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in g:
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle_closed_inside_a_function(tmp_path):
    """The checker itself: a cycle closed only by a function-body import, one closed by a
    "module:function" string and one by ``__import__`` are all found; a chain is not."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    import a\n")
    (tmp_path / "c.py").write_text('R = "d:run"\n')
    (tmp_path / "d.py").write_text("X = __import__('c')\n")
    (tmp_path / "e.py").write_text("import a\n")
    assert sorted(_cycles(_graph(tmp_path, "pkg"))) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


@pytest.mark.parametrize("root,prefix", [(ROOT / "src" / "asyncpp", "asyncpp"),
                                         (EXPERIMENTS, "experiments")])
def test_no_import_cycles_of_any_kind(root, prefix):
    assert _cycles(_graph(root, prefix)) == []


def test_the_ladder_imports_nothing_inside_a_function():
    found = []
    assert len(list(LADDER.glob("*.py"))) > 20
    for f in sorted(LADDER.glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                             else [node.module or "."])
                    found += [f"{f.name}:{node.lineno} {n}" for n in names
                              if (f.name, n) not in OPTIONAL_LAZY]
    assert found == []


def test_no_sys_path_edits():
    hits = [f"{f.relative_to(ROOT)}:{k}" for base in (EXPERIMENTS, ROOT / "src")
            for f in sorted(base.rglob("*")) if f.suffix in (".py", ".sh")
            for k, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"sys\.path\.(insert|append)", line)]
    assert hits == []


def test_experiments_holds_thin_entry_points():
    """Every Python file of experiments/ (but the standalone experiment) is a docstring, imports
    of ``sys`` and of the package, and the ``__main__`` call: no function, class or logic."""
    entries = [f for f in sorted(EXPERIMENTS.rglob("*.py")) if f.name not in STANDALONE]
    assert {f.relative_to(EXPERIMENTS).as_posix() for f in entries} >= {
        "sweep.py", "report.py", "reproduce.py", "gpu/plan.py", "gpu/worker.py",
        "gpu/transfer_fixture.py"}
    for f in entries:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # the docstring
            if isinstance(node, ast.Import):
                assert [a.name for a in node.names] == ["sys"], f
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").startswith("asyncpp.study.ladder"), f
            else:
                assert isinstance(node, ast.If) and "__main__" in ast.unparse(node.test), (
                    f"{f}: {ast.unparse(node)[:80]}")
