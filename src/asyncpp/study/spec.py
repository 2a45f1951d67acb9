"""A study file: what to train, which cells and seeds, how the learning rate is chosen and what
is claimed, read and checked before anything runs.

.. code-block:: toml

    [study]
    name = "tiny"
    base = "tiny.toml"            # an asyncpp-train config, relative to this file
    metric = "final_val_loss"     # the summary.json number every endpoint compares
    launcher = "process"          # process (one asyncpp-train per run) or torchrun
    nproc = 1                     # torchrun: processes (GPUs) per run
    prediction = "the delay costs quality; EF wins it back"

    [overrides]                   # applied to base in every run
    "train.steps" = 4

    [cells.sync]                  # a cell: a named set of overrides
    "pipeline.schedule" = "none"

    [seeds]
    claims = [0, 1, 2]
    selection = [100, 101]        # only with [lr]; disjoint from claims

    [lr]                          # optional: choose optimizer.lr per cell on the selection seeds
    grid = [0.001, 0.003, 0.01]
    rule = "mean"                 # or "fit" (parabola in log lr)
    extend = 1                    # widen a grid whose best lr is on its edge, at most once
    [lr.cells]                    # optional: a cell's own grid (e.g. Muon's and AdamW's differ)
    sync = [0.01, 0.02, 0.04]
    [lr.tied.sync]                # optional: options that move with a cell's lr (factor × lr)
    "optimizer.adamw_lr" = 0.15
    [lr.same]                     # optional: a cell run at another cell's chosen lr (matched
    "2bw-at-sync-lr" = "sync"     # learning rates); it has no selection runs of its own

    [[endpoints]]
    name = "delay"
    test = "difference"           # difference | equivalence | share | slope
    a = "2bw"                     # difference/equivalence: a − b
    b = "sync"
    margin = 0.0                  # equivalence: > 0 (the declared no-difference band)
    primary = true                # Holm across primaries; others are exploratory
    prediction = "2BW is worse than sync"

``share`` endpoints name ``none``, ``corr``, ``sync`` and ``s``; ``slope`` endpoints name
``pairs = [[a, b], ...]`` (one (a, b) gap per length) and ``x = "tokens"`` or ``"params"``.
``difference``, ``share`` and ``slope`` endpoints take ``alternative = "two-sided"`` (the
default), ``"greater"`` (H1: a − b > 0, the share above s, the slope above 0) or ``"less"``
(not for a share): a one-sided test, declared before the runs. A ``slope`` endpoint with
``per_seed = true`` fits the slope per seed and tests the seeds' slopes (one-sample t);
otherwise every (length, seed) gap is pooled in one fit.

``[seeds] cells`` gives a cell its own claims seeds (``{ "2bw-long" = [0, 1, 2, 3] }``): a
costly cell can run fewer; comparisons use the seeds both sides have.

A cell's lr grid is ``[lr.cells]``'s list for it, else ``[lr] grid``; every cell needs one.
With ``extend = N`` a grid whose best lr (the mean rule, on the selection seeds) is its
smallest or largest point gets one more point beyond that edge, at the grid's ratio there
(e.g. ×2), up to N times: lr* is chosen once the best lr is interior or the N points are run.

Every error is one line naming the file and the key (:class:`StudyError`; the CLI exits 2).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

from ..train.config import ConfigError, from_dict, merge, read_toml, validate

TESTS = ("difference", "equivalence", "share", "slope")
LAUNCHERS = ("process", "torchrun")
METRICS = ("final_val_loss", "final_train_loss", "final_val_loss_sample")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
# Keys the study sets itself on every run: a cell or the base may not.
RESERVED = ("run.seed", "run.dir", "run.name", "run.overwrite")


class StudyError(ValueError):
    """A study file that cannot be run as written (one line: file, key, what to change)."""


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One declared claim: its test, the cells it reads, margin, primary flag and prediction."""

    name: str
    test: str
    a: str = ""
    b: str = ""
    none: str = ""
    corr: str = ""
    sync: str = ""
    s: float = 0.5
    pairs: tuple[tuple[str, str], ...] = ()
    x: str = "tokens"
    margin: float = 0.0
    primary: bool = False
    prediction: str = ""
    alternative: str = "two-sided"
    per_seed: bool = False

    def cells(self) -> tuple[str, ...]:
        if self.test in ("difference", "equivalence"):
            return (self.a, self.b)
        if self.test == "share":
            return (self.none, self.corr, self.sync)
        return tuple(c for p in self.pairs for c in p)


@dataclasses.dataclass(frozen=True)
class Study:
    """A checked study file (see the module docstring)."""

    path: Path
    name: str
    kind: str
    base: Path | None
    overrides: dict
    cells: dict[str, dict]
    claims_seeds: tuple[int, ...]
    selection_seeds: tuple[int, ...]
    lr_grid: tuple[float, ...]
    lr_rule: str
    endpoints: tuple[Endpoint, ...]
    metric: str = "final_val_loss"
    launcher: str = "process"
    nproc: int = 1
    prediction: str = ""
    out: Path | None = None
    lr_cells: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    lr_extend: int = 0
    lr_tied: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    lr_same: dict[str, str] = dataclasses.field(default_factory=dict)
    cell_seeds: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    def claims_of(self, cell: str) -> tuple[int, ...]:
        """The claims seeds of ``cell``: its own ``[seeds] cells`` list, else ``claims``."""
        return self.cell_seeds.get(cell, self.claims_seeds)

    @property
    def tunes_lr(self) -> bool:
        """Whether an ``[lr]`` table chooses each cell's learning rate."""
        return bool(self.lr_grid or self.lr_cells or self.lr_same)

    def grid_of(self, cell: str) -> tuple[float, ...]:
        """The declared lr grid of ``cell`` (before any extension past an edge)."""
        return self.lr_cells.get(cell, self.lr_grid)

    @property
    def root(self) -> Path:
        """Where results, runs and the report go: ``[study] out`` (relative to the study
        file), else ``runs/<name>`` under the current directory, as ``asyncpp-train`` does."""
        return self.out if self.out is not None else (Path("runs") / self.name).resolve()


def _fail(path: Path, key: str, msg: str):
    raise StudyError(f"{path}: {key}: {msg}")


def _flat(path: Path, key: str, table) -> dict:
    """``{"section.key": value}`` from a table written flat ("train.steps" = 4) or nested."""
    if not isinstance(table, dict):
        _fail(path, key, "must be a table of asyncpp-train options")
    out = {}
    for k, v in table.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                out[f"{k}.{k2}"] = v2
        else:
            out[k] = v
    for k, v in out.items():
        if k.count(".") != 1:
            _fail(path, f"{key}.{k}", "options are written section.key, e.g. \"train.steps\"")
        if k in RESERVED:
            _fail(path, f"{key}.{k}", f"is set by the study for every run ({', '.join(RESERVED)})")
        if not isinstance(v, (str, int, float, bool)):
            _fail(path, f"{key}.{k}", f"must be a string, number or boolean, got {v!r}")
    return out


def _seeds(path: Path, key: str, v) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(s, int) and not isinstance(s, bool)
                                          and s >= 0 for s in v):
        _fail(path, key, f"must be a list of non-negative integers, got {v!r}")
    if len(set(v)) != len(v):
        _fail(path, key, f"lists a seed twice: {v}")
    return tuple(v)


def _grid(path: Path, key: str, g, rule: str) -> tuple[float, ...]:
    if not isinstance(g, list) or len(g) < 2 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in g):
        _fail(path, key, "must list at least 2 positive learning rates")
    if len(set(g)) != len(g):
        _fail(path, key, f"lists a learning rate twice: {g}")
    if rule == "fit" and len(g) < 3:
        _fail(path, key, "the 'fit' rule needs at least 3 learning rates")
    return tuple(sorted(float(v) for v in g))


def _endpoint(path: Path, i: int, d: dict, cells: dict) -> Endpoint:
    key = f"endpoints[{i}]"
    if not isinstance(d, dict):
        _fail(path, key, "must be a table")
    allowed = {f.name for f in dataclasses.fields(Endpoint)}
    for k in d:
        if k not in allowed:
            _fail(path, f"{key}.{k}", f"unknown key; endpoints take {', '.join(sorted(allowed))}")
    name = d.get("name")
    if not isinstance(name, str) or not name:
        _fail(path, f"{key}.name", "every endpoint needs a name")
    test = d.get("test")
    if test not in TESTS:
        _fail(path, f"{key}.test", f"must be one of {', '.join(TESTS)}, got {test!r}")
    need = {"difference": ("a", "b"), "equivalence": ("a", "b", "margin"),
            "share": ("none", "corr", "sync", "s"), "slope": ("pairs",)}[test]
    for k in need:
        if k not in d:
            _fail(path, f"{key}.{k}", f"a {test} endpoint needs {', '.join(need)}")
    kw = dict(d)
    if "pairs" in kw:
        p = kw["pairs"]
        if not isinstance(p, list) or len(p) < 2 or not all(
                isinstance(q, list) and len(q) == 2 for q in p):
            _fail(path, f"{key}.pairs", "must list at least 2 [a, b] cell pairs (one per length)")
        kw["pairs"] = tuple(tuple(q) for q in p)
    for k in ("margin", "s"):
        if k in kw and (isinstance(kw[k], bool) or not isinstance(kw[k], (int, float))
                        or not math.isfinite(kw[k])):
            _fail(path, f"{key}.{k}", f"must be a number, got {kw[k]!r}")
    if test == "equivalence" and not kw["margin"] > 0:
        _fail(path, f"{key}.margin", "an equivalence endpoint needs a margin > 0 (the band "
              "inside which a difference counts as none)")
    if kw.get("margin", 0) < 0:
        _fail(path, f"{key}.margin", "must be ≥ 0")
    alt = kw.get("alternative", "two-sided")
    alts = {"difference": ("two-sided", "greater", "less"), "share": ("two-sided", "greater"),
            "slope": ("two-sided", "greater", "less")}
    if alt not in alts.get(test, ("two-sided",)):
        _fail(path, f"{key}.alternative", f"a {test} endpoint takes "
              f"{' or '.join(repr(a) for a in alts.get(test, ('two-sided',)))}, got {alt!r}")
    if kw.get("x", "tokens") not in ("tokens", "params"):
        _fail(path, f"{key}.x", f"must be 'tokens' or 'params', got {kw['x']!r}")
    for k in ("primary", "per_seed"):
        if not isinstance(kw.get(k, False), bool):
            _fail(path, f"{key}.{k}", "must be true or false")
    if kw.get("per_seed") and test != "slope":
        _fail(path, f"{key}.per_seed", "is for slope endpoints (a slope fitted per seed)")
    ep = Endpoint(**kw)
    for c in ep.cells():
        if c not in cells:
            _fail(path, key, f"names cell {c!r}, which is not declared (cells: "
                  f"{', '.join(cells)})")
    return ep


def load(path: str | Path) -> Study:
    """The checked :class:`Study` of ``path``; :class:`StudyError` on the first problem."""
    path = Path(path)
    if not path.is_file():
        raise StudyError(f"{path}: no such study file")
    try:
        doc = read_toml(path)
    except ConfigError as e:
        raise StudyError(f"{path}: {e}") from None
    top = {"study", "overrides", "cells", "seeds", "lr", "endpoints", "ladder"}
    for k in doc:
        if k not in top:
            _fail(path, k, f"unknown table; a study has {', '.join(sorted(top - {'ladder'}))}")
    st = doc.get("study")
    if not isinstance(st, dict):
        _fail(path, "study", "missing [study] table (name, base, ...)")
    name = st.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        _fail(path, "study.name", f"must be a name of letters, digits, '._+-', got {name!r}")
    kind = st.get("kind", "study")
    if kind == "ladder":  # the project's own tiers: asyncpp.study.ladder reads the rest
        return Study(path, name, kind, None, {}, {}, (), (), (), "mean", ())
    if kind != "study":
        _fail(path, "study.kind", f"must be 'study' or 'ladder', got {kind!r}")
    known = {"name", "kind", "base", "metric", "launcher", "nproc", "prediction", "out",
             "title"}
    for k in st:
        if k not in known:
            _fail(path, f"study.{k}", f"unknown key; [study] takes {', '.join(sorted(known))}")
    base = None
    if "base" in st:
        base = (path.parent / st["base"]).resolve()
        if not base.is_file():
            _fail(path, "study.base", f"no such asyncpp-train config: {base}")
    metric = st.get("metric", "final_val_loss")
    if metric not in METRICS:
        _fail(path, "study.metric", f"must be one of {', '.join(METRICS)}, got {metric!r}")
    launcher = st.get("launcher", "process")
    if launcher not in LAUNCHERS:
        _fail(path, "study.launcher", f"must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    nproc = st.get("nproc", 1)
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        _fail(path, "study.nproc", f"must be a positive integer, got {nproc!r}")
    if nproc > 1 and launcher != "torchrun":
        _fail(path, "study.nproc", "more than one process per run needs launcher = \"torchrun\"")
    overrides = _flat(path, "overrides", doc.get("overrides", {}))
    cells_doc = doc.get("cells")
    if not isinstance(cells_doc, dict) or not cells_doc:
        _fail(path, "cells", "declare at least one cell: [cells.NAME] with its overrides")
    cells = {}
    for c, t in cells_doc.items():
        if not _NAME.match(c):
            _fail(path, f"cells.{c}", "cell names are letters, digits and '._+-'")
        cells[c] = _flat(path, f"cells.{c}", t)
    seeds = doc.get("seeds")
    if not isinstance(seeds, dict) or "claims" not in seeds:
        _fail(path, "seeds", "needs [seeds] claims = [...]")
    for k in seeds:
        if k not in ("claims", "selection", "cells"):
            _fail(path, f"seeds.{k}", "unknown key; [seeds] takes claims, selection and cells")
    claims = _seeds(path, "seeds.claims", seeds["claims"])
    if not claims:
        _fail(path, "seeds.claims", "needs at least one seed")
    selection = _seeds(path, "seeds.selection", seeds.get("selection", []))
    cell_seeds = {}
    per = seeds.get("cells", {})
    if not isinstance(per, dict):
        _fail(path, "seeds.cells", "must be a table: CELL = [seed, ...]")
    for c, v in per.items():
        if c not in cells:
            _fail(path, f"seeds.cells.{c}", f"names no declared cell (cells: {', '.join(cells)})")
        cell_seeds[c] = _seeds(path, f"seeds.cells.{c}", v)
        if not cell_seeds[c]:
            _fail(path, f"seeds.cells.{c}", "needs at least one seed")
    lr = doc.get("lr")
    grid, rule, lr_cells, extend, tied, lr_same = (), "mean", {}, 0, {}, {}
    if lr is not None:
        for k in lr:
            if k not in ("grid", "rule", "cells", "extend", "tied", "same"):
                _fail(path, f"lr.{k}", "unknown key; [lr] takes grid, rule, extend, cells, "
                      "tied and same")
        rule = lr.get("rule", "mean")
        if rule not in ("mean", "fit"):
            _fail(path, "lr.rule", f"must be 'mean' or 'fit', got {rule!r}")
        if "grid" in lr:
            grid = _grid(path, "lr.grid", lr["grid"], rule)
        per = lr.get("cells", {})
        if not isinstance(per, dict):
            _fail(path, "lr.cells", "must be a table: cell = [lr, ...]")
        for c, g in per.items():
            if c not in cells:
                _fail(path, f"lr.cells.{c}", f"names no declared cell (cells: {', '.join(cells)})")
            lr_cells[c] = _grid(path, f"lr.cells.{c}", g, rule)
        same = lr.get("same", {})
        if not isinstance(same, dict):
            _fail(path, "lr.same", "must be a table: CELL = \"cell whose lr it takes\"")
        for c, src in same.items():
            if c not in cells or src not in cells:
                _fail(path, f"lr.same.{c}", f"both sides must be declared cells (cells: "
                      f"{', '.join(cells)})")
            if src in same or src == c:
                _fail(path, f"lr.same.{c}", f"{src!r} takes its lr from a selection of its "
                      "own, not from another cell")
            if c in lr_cells:
                _fail(path, f"lr.same.{c}", "a cell with its own grid chooses its own lr")
            lr_same[c] = src
        for c in cells:
            if c not in lr_cells and c not in lr_same and not grid:
                _fail(path, f"lr.cells.{c}", "this cell has no lr grid: give [lr] grid or "
                      f"[lr.cells] {c} = [...]")
        tied_doc = lr.get("tied", {})
        if not isinstance(tied_doc, dict):
            _fail(path, "lr.tied", "must be a table: [lr.tied.CELL] \"section.key\" = factor")
        for c, t in tied_doc.items():
            if c not in cells:
                _fail(path, f"lr.tied.{c}", f"names no declared cell (cells: {', '.join(cells)})")
            tied[c] = _flat(path, f"lr.tied.{c}", t)
            for k, f in tied[c].items():
                if k == "optimizer.lr" or k in cells[c]:
                    _fail(path, f"lr.tied.{c}.{k}", "is set by the cell or is the lr itself; "
                          "a tied option is set only here")
                if isinstance(f, bool) or not isinstance(f, (int, float)) or not f > 0:
                    _fail(path, f"lr.tied.{c}.{k}", f"must be a factor > 0, got {f!r}")
        extend = lr.get("extend", 0)
        if not isinstance(extend, int) or isinstance(extend, bool) or not 0 <= extend <= 8:
            _fail(path, "lr.extend", f"must be an integer from 0 to 8, got {extend!r}")
        if len(selection) < 2:
            _fail(path, "seeds.selection", "an lr grid is chosen on at least 2 selection seeds")
        both = set(selection) & set(claims).union(*cell_seeds.values())
        if both:
            _fail(path, "seeds.selection", f"shares seeds {sorted(both)} with seeds.claims; "
                  "the seeds that choose the lr cannot also test the claims")
        for c, t in cells.items():
            if "optimizer.lr" in t:
                _fail(path, f"cells.{c}.optimizer.lr", "is chosen by [lr]; remove it or [lr]")
    elif selection:
        _fail(path, "seeds.selection", "selection seeds are for an [lr] grid; there is none")
    eps = doc.get("endpoints", [])
    if not isinstance(eps, list):
        _fail(path, "endpoints", "write each endpoint as [[endpoints]]")
    endpoints = tuple(_endpoint(path, i, d, cells) for i, d in enumerate(eps))
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        _fail(path, "endpoints", f"two endpoints share a name: {names}")
    out = (path.parent / str(st["out"])).resolve() if "out" in st else None
    study = Study(path=path, name=name, kind=kind, base=base, overrides=overrides, cells=cells,
                 claims_seeds=claims, selection_seeds=selection, lr_grid=grid, lr_rule=rule,
                 endpoints=endpoints, metric=metric, launcher=launcher, nproc=nproc,
                 prediction=str(st.get("prediction", "")), out=out, lr_cells=lr_cells,
                 lr_extend=extend, lr_tied=tied, lr_same=lr_same, cell_seeds=cell_seeds)
    for c in cells:  # every cell must be a config asyncpp-train accepts, before anything runs
        lr = lr_options(study, c, study.grid_of(study.lr_same.get(c, c))[0]) \
            if study.tunes_lr else {}
        try:
            cfg = from_dict(merge(base_config(study), nested({**overrides, **cells[c], **lr})))
            validate(cfg, world_size=nproc if launcher == "torchrun" and nproc > 1 else None)
        except ConfigError as e:
            _fail(path, f"cells.{c}", f"asyncpp-train rejects it: {e}")
    return study


def lr_options(study: Study, cell: str, lr: float) -> dict:
    """The options a run of ``cell`` at ``lr`` sets: ``optimizer.lr`` and each tied option at
    its factor times ``lr`` (12 significant digits, so that 0.15 × 0.08 is written 0.012)."""
    out: dict = {"optimizer.lr": lr}
    for k, f in study.lr_tied.get(cell, {}).items():
        out[k] = float(f"{f * lr:.12g}")
    return out


def base_config(study: Study) -> dict:
    """The base asyncpp-train config of ``study`` as a nested dict (empty without a base)."""
    return read_toml(study.base) if study.base else {}


def nested(flat: dict) -> dict:
    """``{"train.steps": 4}`` → ``{"train": {"steps": 4}}``."""
    out: dict[str, dict] = {}
    for k, v in flat.items():
        sec, key = k.split(".")
        out.setdefault(sec, {})[key] = v
    return out


__all__ = ["LAUNCHERS", "METRICS", "TESTS", "Endpoint", "Study", "StudyError", "base_config",
           "load", "lr_options", "nested"]
