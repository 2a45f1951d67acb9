"""Shared pieces of the study files the tests write."""

from __future__ import annotations

from pathlib import Path

from asyncpp.study import runner, spec

ROOT = Path(__file__).resolve().parents[1]


def study_head(name: str) -> str:
    """A study file's ``[study]`` table on the tiny config, its results under ``out/``."""
    return f'\n[study]\nname = "{name}"\nbase = "{ROOT / "configs" / "tiny.toml"}"\nout = "out"\n'


def study_with_lr_chosen(tmp_path: Path, text: str, lr: float = 0.04):
    """The study ``text`` written to ``tmp_path/study.toml`` with selection results that choose
    ``lr`` for every cell (the loss is the distance to it, a little higher per seed)."""
    p = tmp_path / "study.toml"
    p.write_text(text)
    s = spec.load(p)
    for r in runner.selection_runs(s):
        runner.write_json(r.result, {"key": r.key, "value": abs(r.lr - lr) + r.seed * 1e-3})
    return s
