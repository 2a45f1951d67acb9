"""Where the ladder's files live: the repository's ``experiments/`` folder (configs, result
files, study files, tables and figures), found from this package's place in a checkout
(``src/asyncpp/study/ladder/`` → the repository root, four levels up)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
EXPERIMENTS = REPO / "experiments"
CONFIGS = EXPERIMENTS / "configs"
