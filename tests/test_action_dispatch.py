"""One table tells pipeline actions apart: outside ``asyncpp/pipeline/actions.py`` no module of
the pipeline tests an action's class (``isinstance`` with an action class, ``cls is Forward``,
``type(a) in ...``, ``table[type(a)]``); they read ``kind_of`` and the predicates of the
action table instead. Read from the source (no imports executed)."""

from __future__ import annotations

import ast
from pathlib import Path

from asyncpp.pipeline import actions

PIPELINE = Path(__file__).resolve().parents[1] / "src" / "asyncpp" / "pipeline"
ACTION_NAMES = {c.__name__ for c in actions.KINDS} | {"ComputePass", "COMPUTE",
                                                      "GRADIENT_DONE", "INPUT_GRADIENT"}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _is_type_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
        and node.func.id == "type"


def type_tests(source: str) -> list[int]:
    """Line numbers where ``source`` picks behaviour by an action's class."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2 \
                and _names(node.args[1]) & ACTION_NAMES:
            found.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_type_call(x) for x in sides) or (
                    any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
                    and any(_names(x) & ACTION_NAMES for x in sides)):
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _is_type_call(node.slice):
            found.append(node.lineno)
    return found


def test_no_module_outside_the_action_table_tests_an_actions_class():
    bad = {str(f.relative_to(PIPELINE)): type_tests(f.read_text())
           for f in sorted(PIPELINE.rglob("*.py")) if f.name != "actions.py" or
           f.parent != PIPELINE}
    assert {f: lines for f, lines in bad.items() if lines} == {}


def test_the_check_sees_each_form_of_a_type_test():
    src = ("if isinstance(a, Send): pass\n"
           "if isinstance(a, (Recv, *COMPUTE)): pass\n"
           "if cls is not BackwardWeight: pass\n"
           "if type(a) in _COMM: pass\n"
           "x = cost[type(a)]\n"
           "if isinstance(a, tuple) or is_send(a) or kind_of(a) in 'FB': pass\n")
    assert type_tests(src) == [1, 2, 3, 4, 5]
