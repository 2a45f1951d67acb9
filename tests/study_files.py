"""Shared pieces of the study files the tests write."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def study_head(name: str) -> str:
    """A study file's ``[study]`` table on the tiny config, its results under ``out/``."""
    return f'\n[study]\nname = "{name}"\nbase = "{ROOT / "configs" / "tiny.toml"}"\nout = "out"\n'
