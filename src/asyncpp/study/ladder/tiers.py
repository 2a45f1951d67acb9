r"""The tiers of the reproduction: one :class:`Tier` per model scale (``tiny``, ``small``,
``gpu``, ``opt-180k``, ``opt-580k``), passed explicitly to everything that depends on it. A
tier owns one folder, ``experiments/<name>/``, with the same layout::

    experiments/<name>/study.toml                    # the tier as a study file
    experiments/<name>/results/<cell>-seed<k>.json   # one file per run (sweep)
    experiments/<name>/tables.md                     # report_tier(experiments/<name>)
    experiments/<name>/figures/*.png
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from asyncpp.train.config import read_toml

from . import tables_cells as _tc
from .paths import CONFIGS, EXPERIMENTS

HERE = EXPERIMENTS

@dataclasses.dataclass(frozen=True)
class Tier:
    """One scale of the reproduction: its base configs, run length, lr grid and lr file, the
    tables it runs, and its folder ``experiments/<name>/`` holding ``results/``, ``figures/``
    and ``tables.md`` (the same layout for every tier)."""

    name: str
    steps: int  # train.steps of ``base`` (and ``deep``); mitigation windows are 10 % of it
    base: str  # base TOML of the tier's cells (in configs/)
    deep: str  # base TOML of the depth table's cells
    seq_len: int  # data.seq_len of ``base`` (tokens per step in the report)
    lrs_file: Path  # per-optimizer lr* (written by --pick-lrs)
    lr_grid: dict  # optimizer -> synchronous lr grid (table "lr")
    table_order: tuple[str, ...]  # the tier's tables, in run and report order
    title: str  # the report's heading
    root: Path  # experiments/<name>/
    results: Path  # <root>/results unless overridden (--results)

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    @property
    def tables(self) -> Path:
        return self.root / "tables.md"

    @property
    def mitigations(self) -> dict[str, dict[str, str]]:
        return _tc.mitigations(self.steps)

    def at(self, results: Path | str | None = None, root: Path | str | None = None,
           lrs_file: Path | str | None = None) -> Tier:
        """This tier with another results folder, output folder or lr file (the CLIs'
        ``--results``, ``--out``, ``--lrs``; tests)."""
        changes = {k: Path(v) for k, v in (("results", results), ("root", root),
                                           ("lrs_file", lrs_file)) if v is not None}
        return dataclasses.replace(self, **changes)


# The tiers, each read from its study file (experiments/<name>/study.toml), in this order.
TIER_NAMES = ("tiny", "small", "gpu", "opt-180k", "opt-580k")
UNUSED_LRS = "unused"  # a tier tuned per (optimizer, mode) (opt-lr) has no lr file


def tier_from_study(path: Path) -> Tier:
    """The :class:`Tier` a study file declares (its ``[study]`` name and title, its
    ``[ladder]`` table; see ``experiments/tiny/study.toml``), reading and writing beside it.
    ``ValueError`` naming the file and the key when one is missing or not a ladder study."""
    path = Path(path)
    doc = read_toml(path)
    study, ladder = doc.get("study", {}), doc.get("ladder")
    if study.get("kind") != "ladder" or not isinstance(ladder, dict):
        raise ValueError(f"{path}: not a ladder study (needs [study] kind = \"ladder\" and a "
                         "[ladder] table)")
    try:
        root = path.parent
        return Tier(name=study["name"], title=study["title"], steps=int(ladder["steps"]),
                    base=ladder["base"], deep=ladder["deep"], seq_len=int(ladder["seq_len"]),
                    lrs_file=CONFIGS / ladder.get("lrs_file", UNUSED_LRS),
                    lr_grid={o: tuple(g) for o, g in ladder.get("lr_grid", {}).items()},
                    table_order=tuple(ladder["tables"]), root=root, results=root / "results")
    except KeyError as e:
        raise ValueError(f"{path}: missing key {e.args[0]!r}") from None


TIERS: dict[str, Tier] = {n: tier_from_study(HERE / n / "study.toml") for n in TIER_NAMES}
# table "lr"'s synchronous grid of the first tier (the sweep's default)
TINY_LR_GRID = TIERS["tiny"].lr_grid


def get_tier(name: str) -> Tier:
    """The tier called ``name`` (``tiny``, ``small``, ``gpu``)."""
    if name not in TIERS:
        raise ValueError(f"unknown tier {name!r}; choose from {', '.join(TIERS)}")
    return TIERS[name]




def tier_of_folder(root: Path) -> Tier:
    """The tier of the study file in ``root`` (``root/study.toml``), reading and writing in
    ``root``."""
    return tier_from_study(Path(root) / "study.toml")
