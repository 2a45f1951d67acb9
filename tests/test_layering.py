"""The package's import layering, read from the source (no imports executed):

- ``train → pipeline → {optim, models, data, delay}``: a lower layer never imports a higher one;
- no import cycles between modules;
- no private name (``_x``) imported from another module.

``asyncpp.names`` and ``asyncpp.pipeline.registry`` hold only constants and may be read by
every layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
