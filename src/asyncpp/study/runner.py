"""Run a study's training runs, resumably, in parallel lanes.

Layout under the study's folder (``Study.root``):

- ``results/<cell>/seed<k>.json`` — one result per (cell, claims seed);
- ``selection/<cell>/lr<lr>-seed<k>.json`` — one per (cell, grid lr, selection seed), the grid
  widened past an edge as ``[lr] extend`` allows (:func:`cell_grid`);
- ``runs/<key>/`` — the ``asyncpp-train`` run directory; ``logs/<key>.log`` its output.

A run's ``key`` is a sha256 over what determines it (the base config's bytes, every option,
the seed, the launcher): two cells that resolve to the same run share it and train once
(identical runs reused). A result already on disk with the same key is skipped; a run
directory holding a checkpoint but no ``summary.json`` is continued with ``--resume``.
Result files are written whole (temporary file, then rename): a crash never leaves half a
result.

Lanes are local processes (``--lanes N``): lane i runs one run at a time, as one
``asyncpp-train`` process or, with ``launcher = "torchrun"``, one ``torchrun`` of ``nproc``
processes. ``gpus_per_lane`` gives lane i the devices ``[i·g, (i+1)·g)`` through
``CUDA_VISIBLE_DEVICES``. At the deadline every running run is sent SIGTERM (it finishes its
step, writes a checkpoint and exits) and ``run`` stops; running again continues.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import provenance
from .curves import read_curves
from .spec import Study, lr_options
from .stats import TooFewSeeds, select_lr


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run of a study: the cell and seed it answers for and its options."""

    cell: str
    seed: int
    role: str  # "claims" or "selection"
    lr: float | None
    options: tuple[tuple[str, object], ...]
    key: str
    result: Path

    def label(self) -> str:
        lr = f" lr {self.lr:g}" if self.lr is not None and self.role == "selection" else ""
        return f"{self.cell} seed {self.seed}{lr} ({self.role})"


def _value(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def run_key(study: Study, options: dict, seed: int) -> str:
    """sha256 over everything that determines a run (module docstring)."""
    h = hashlib.sha256()
    h.update(study.base.read_bytes() if study.base else b"")
    h.update(json.dumps({"options": sorted((k, _value(v)) for k, v in options.items()),
                         "seed": seed, "launcher": study.launcher, "nproc": study.nproc},
                        sort_keys=True).encode())
    return h.hexdigest()[:20]


def _make(study: Study, cell: str, seed: int, role: str, lr: float | None,
          result: Path) -> Run:
    opts = {**study.overrides, **study.cells[cell]}
    if lr is not None:
        opts.update(lr_options(study, cell, lr))
    return Run(cell, seed, role, lr, tuple(sorted(opts.items())),
               run_key(study, opts, seed), result)


def _scores(study: Study, cell: str, grid) -> dict[float, dict[int, float]]:
    """``{lr: {seed: metric}}`` of ``cell``'s selection results on disk over ``grid``."""
    out: dict[float, dict[int, float]] = {}
    for lr in grid:
        for k in study.selection_seeds:
            p = _selection_path(study, cell, lr, k)
            if p.is_file():
                out.setdefault(lr, {})[k] = read_result(p)["value"]
    return out


def _complete(study: Study, scores, grid) -> bool:
    return all(len(scores.get(lr, {})) == len(study.selection_seeds) for lr in grid)


def cell_grid(study: Study, cell: str) -> tuple[float, ...]:
    r"""``cell``'s lr grid as the runs on disk have widened it (:mod:`.spec`, ``extend``): while
    every point is run and the mean rule's best lr is the smallest (largest) point, one more
    point beyond it at the ratio of the two points at that edge, at most ``lr_extend`` times:

    .. math:: g_{\text{new}} = g_0^2 / g_1 \quad\text{or}\quad g_{n-1}^2 / g_{n-2}.
    """
    return _widened(study, cell)[0]


def _widened(study: Study, cell: str):
    """(:func:`cell_grid`, the scores on disk over it), each selection result read once."""
    grid = list(study.grid_of(cell))
    scores = _scores(study, cell, grid)
    for _ in range(study.lr_extend):
        if not _complete(study, scores, grid):
            break
        best = select_lr(scores, "mean").lr
        if best == grid[0]:
            grid.insert(0, float(f"{grid[0] ** 2 / grid[1]:.6g}"))
            scores.update(_scores(study, cell, grid[:1]))
        elif best == grid[-1]:
            grid.append(float(f"{grid[-1] ** 2 / grid[-2]:.6g}"))
            scores.update(_scores(study, cell, grid[-1:]))
        else:
            break
    return tuple(grid), scores


def _selection_path(study: Study, cell: str, lr: float, seed: int) -> Path:
    return study.root / "selection" / cell / f"lr{lr:g}-seed{seed}.json"


def selection_runs(study: Study) -> list[Run]:
    """Every (cell, grid lr, selection seed) run known so far (none without ``[lr]``): the
    declared grids, widened as far as the runs on disk ask (:func:`cell_grid`)."""
    return [_make(study, c, k, "selection", lr, _selection_path(study, c, lr, k))
            for c in study.cells if c not in study.lr_same
            for lr in (cell_grid(study, c) if study.tunes_lr else ())
            for k in study.selection_seeds]


def chosen_lrs(study: Study) -> dict[str, dict]:
    """``{cell: LrChoice as dict}`` for every cell whose selection is finished: every run of
    its grid on disk and the grid widened as far as it will go (empty without ``[lr]``)."""
    out: dict[str, dict] = {}
    if not study.tunes_lr:
        return out
    for c in study.cells:
        if c in study.lr_same:
            continue
        grid, scores = _widened(study, c)
        if not _complete(study, scores, grid):
            continue
        # with every point on disk, a best lr on the edge means the extensions are spent
        edge = select_lr(scores, "mean").lr in (grid[0], grid[-1])
        try:
            ch = select_lr(scores, study.lr_rule)
        except TooFewSeeds:
            continue
        note = ch.note
        if edge:
            note = "; ".join(x for x in (note, f"best lr on the grid's edge after "
                                         f"{study.lr_extend} extension(s)") if x)
        out[c] = {"lr": ch.lr, "rule": ch.rule, "seeds": list(ch.seeds), "grid": list(grid),
                  "means": {f"{k:g}": v for k, v in ch.means.items()}, "note": note}
    for c, src in study.lr_same.items():  # matched learning rates: another cell's lr*
        if src in out:
            out[c] = {**out[src], "note": f"the lr chosen for {src} (matched)"}
    return out


def claims_runs(study: Study, lrs: dict[str, dict] | None = None) -> tuple[list[Run], list[str]]:
    """Every (cell, claims seed) run whose lr is known, and the cells still waiting for one."""
    lrs = chosen_lrs(study) if lrs is None and study.tunes_lr else (lrs or {})
    runs, waiting = [], []
    for c in study.cells:
        if study.tunes_lr and c not in lrs:
            waiting.append(c)
            continue
        lr = lrs[c]["lr"] if study.tunes_lr else None
        runs += [_make(study, c, k, "claims", lr, study.root / "results" / c / f"seed{k}.json")
                 for k in study.claims_of(c)]
    return runs, waiting


def read_result(path: Path) -> dict:
    return json.loads(path.read_text())


def done(run: Run) -> bool:
    """Whether ``run``'s result is on disk, made by a run with the same key."""
    if not run.result.is_file():
        return False
    try:
        return read_result(run.result).get("key") == run.key
    except (OSError, ValueError):
        return False


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a temporary file beside it, flushed, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: Path, obj: dict) -> None:
    """``obj`` as indented JSON, written whole (:func:`write_text`)."""
    write_text(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def run_dir(study: Study, key: str) -> Path:
    return study.root / "runs" / key


def command(study: Study, run: Run, resume: bool) -> list[str]:
    """The ``asyncpp-train`` (or ``torchrun``) command line of ``run``."""
    if study.launcher == "torchrun":
        head = ["torchrun", "--standalone", f"--nproc-per-node={study.nproc}", "-m",
                "asyncpp.train.cli"]
    else:
        head = [sys.executable, "-m", "asyncpp.train.cli"]
    args = ["--config", str(study.base)] if study.base else []
    for k, v in run.options:
        args += [f"--{k}", _value(v)]
    args += ["--run.seed", str(run.seed), "--run.dir", str(run_dir(study, run.key))]
    args += ["--resume"] if resume else ["--run.overwrite", "true"]
    return head + args


def _resumable(rdir: Path) -> bool:
    ck = rdir / "checkpoints"
    return ck.is_dir() and any(ck.iterdir()) and not (rdir / "summary.json").is_file()


def result_of(study: Study, run: Run, code: dict, wall_s: float) -> dict:
    """The result record of a finished run: its summary, regime, resolved configuration, the
    float mode it trained in (subnormals flushed or not) and provenance."""
    rdir = run_dir(study, run.key)
    summary = json.loads((rdir / "summary.json").read_text())
    cfg = json.loads((rdir / "config.json").read_text())
    data = summary.get("data", {})
    tr, dat = cfg.get("train", {}), cfg.get("data", {})
    reg = provenance.regime(summary["steps"], tr["batch_size"], dat["seq_len"],
                            summary["params"], data.get("train_windows"))
    return {"study": study.name, "cell": run.cell, "seed": run.seed, "role": run.role,
            "lr": run.lr, "options": dict(run.options), "key": run.key,
            "metric": study.metric, "value": summary[study.metric],
            "final_val_loss": summary.get("final_val_loss"),
            "final_train_loss": summary.get("final_train_loss"),
            "params": summary["params"], "steps": summary["steps"], **reg,
            "subnormals_flushed": summary.get("subnormals_flushed"),
            "config": cfg,  # resolved: the run re-runs from this record without the base file
            "wall_s": wall_s, "run_dir": str(rdir.relative_to(study.root)),
            "curves": read_curves(rdir / "metrics.jsonl"),
            "finished_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "provenance": {**code, "packages": provenance.package_versions(),
                           "cpu": provenance.cpu_model(), "cpu_isa": provenance.cpu_isa(),
                           "python": sys.version.split()[0],
                           "tokenizer_sha256": data.get("tokenizer_sha256"),
                           "manifest_sha256": data.get("manifest_sha256"),
                           # the manifest without its build record: equal for equal corpora
                           "manifest_content_sha256": data.get("manifest_content_sha256"),
                           "corpus_id": data.get("corpus_id"),
                           "data": data.get("description")}}


@dataclasses.dataclass
class Outcome:
    """What one ``execute`` call did."""

    trained: int = 0
    reused: int = 0
    skipped: int = 0
    failed: list[str] = dataclasses.field(default_factory=list)
    left: int = 0  # runs not finished (deadline)


def _eta(walls: list[float], left: int, lanes: int) -> str:
    if not walls or not left:
        return ""
    s = sum(walls) / len(walls) * -(-left // lanes)
    return f", ETA {int(s // 3600)}h{int(s % 3600 // 60):02d}m{int(s % 60):02d}s"


def execute(study: Study, runs: list[Run], lanes: int = 1, deadline: float | None = None,
            gpus_per_lane: int = 0, say: Callable[[str], None] = print,
            clock: Callable[[], float] = time.time) -> Outcome:
    """Train every run of ``runs`` not on disk, ``lanes`` at a time (module docstring)."""
    out = Outcome()
    todo = [r for r in runs if not done(r)]
    out.skipped = len(runs) - len(todo)
    by_key: dict[str, list[Run]] = {}
    for r in todo:
        by_key.setdefault(r.key, []).append(r)
    # a key whose run is already recorded under another result: copy, do not train
    for key, group in list(by_key.items()):
        twin = next((r for r in runs if r.key == key and done(r)), None)
        if twin is not None:
            rec = read_result(twin.result)
            for r in group:
                write_json(r.result, {**rec, "cell": r.cell, "seed": r.seed, "role": r.role,
                                      "reused_from": str(twin.result.relative_to(study.root))})
            out.reused += len(group)
            del by_key[key]
    pending = list(by_key)
    total = len(pending)
    if not total:
        return out
    code = provenance.code_state()
    running: dict[int, tuple[str, subprocess.Popen, float]] = {}  # lane → (key, proc, t0)
    walls: list[float] = []
    stopping = False
    finished = 0
    try:
        while pending or running:
            now = clock()
            if deadline is not None and now >= deadline and not stopping:
                stopping = True
                say(f"deadline reached: stopping {len(running)} running run(s) at their next "
                    "step (they checkpoint); run again to continue")
                for _, p, _ in running.values():
                    p.send_signal(signal.SIGTERM)
            est = sum(walls) / len(walls) if walls else 0.0
            while (pending and len(running) < lanes and not stopping
                   and (deadline is None or now + est < deadline)):
                lane = next(i for i in range(lanes) if i not in running)
                key = pending.pop(0)
                first = by_key[key][0]
                rdir = run_dir(study, key)
                resume = _resumable(rdir)
                env = dict(os.environ)
                if gpus_per_lane:
                    env["CUDA_VISIBLE_DEVICES"] = ",".join(
                        str(lane * gpus_per_lane + j) for j in range(gpus_per_lane))
                log = study.root / "logs" / f"{key}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "a") as fh:
                    p = subprocess.Popen(command(study, first, resume), stdout=fh,
                                         stderr=subprocess.STDOUT, env=env)
                running[lane] = (key, p, clock())
                say(f"start {first.label()} on lane {lane}{' (resuming)' if resume else ''}")
            if not pending and not running:
                break
            if pending and not running and not stopping:
                stopping = True  # the deadline leaves no room for another run
                say(f"deadline: no time left for a run (about {est:.0f}s each); run again "
                    "to continue")
            if stopping and not running:
                break
            time.sleep(0.2)
            for lane, (key, p, t0) in list(running.items()):
                if p.poll() is None:
                    continue
                del running[lane]
                group = by_key[key]
                if p.returncode == 0 and (run_dir(study, key) / "summary.json").is_file():
                    wall = clock() - t0
                    walls.append(wall)
                    rec = result_of(study, group[0], code, wall)
                    for r in group:
                        write_json(r.result, {**rec, "cell": r.cell, "seed": r.seed,
                                              "role": r.role})
                    out.trained += 1
                    out.reused += len(group) - 1
                    finished += 1
                    say(f"[{finished}/{total}] {group[0].label()} done in {wall:.1f}s: "
                        f"{study.metric} {rec['value']:.4f}"
                        f"{_eta(walls, total - finished, lanes)}")
                elif stopping and p.returncode in (130, 143, -signal.SIGTERM):
                    # stopped at the deadline: by its handler after a checkpoint (143), or
                    # by the signal itself while still starting up (-15, nothing to lose)
                    out.left += 1
                else:
                    log = study.root / "logs" / f"{key}.log"
                    out.failed.append(f"{group[0].label()}: exit {p.returncode}, see {log}")
                    say(f"failed: {group[0].label()} (exit {p.returncode}; log {log})")
    except KeyboardInterrupt:
        for _, p, _ in running.values():
            p.send_signal(signal.SIGTERM)
        for _, p, _ in running.values():
            p.wait()
        raise
    out.left += len(pending)
    return out


__all__ = ["Outcome", "Run", "cell_grid", "chosen_lrs", "claims_runs", "command", "done", "execute",
           "read_result", "result_of", "run_key", "selection_runs", "write_json",
           "write_text"]
