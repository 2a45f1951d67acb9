r"""Resumable runner of the CPU-scale reproduction (experiments/README.md).

Every *cell* is one training configuration: a base TOML (``experiments/configs/``) plus a few
``--section.key`` overrides, exactly what ``asyncpp-train --config BASE --k v ...`` would run.
Each (cell, seed) writes one file ``<tier>/results/<cell>-seed<k>.json`` (config, seed, curves,
final metrics, update drift), atomically (temp file + rename). A file that exists is a finished
run and is skipped, so a sweep can be stopped at any time and continued by running the same
command.
Several sweep processes may run at once: a run is claimed by an exclusive lock file
(``<tier>/results/.<cell>-seed<k>.lock``, holding the pid; a lock of a dead process is taken
over).
Stopping a sweep with SIGTERM (``kill``, ``pkill -f experiments/sweep.py``) or Ctrl-C stops its
training subprocess and removes its run folder and lock; a folder left by a harder kill is
removed the next time its (cell, seed) is claimed.

Runs execute in this process through the trainer of ``asyncpp-train``
(:func:`asyncpp.train.loop.train`), with one addition: every stage's
:class:`~asyncpp.delay.DelayedOptimizer` is built with ``track_updates=True`` so that the drift

.. math::
    \rho_t = \frac{\|u^{(t)} - u^{(t-1)}\|}{\|u^{(t)}\|}

(norms over all stages and parameter groups) is recorded; tracking never changes the
trajectory (DelayedOptimizer's contract, tested in tests/test_delay_closed_form.py). Asynchronous
schedules run in one process through that exact simulation (``pipeline.simulate``), which
tests/test_pipeline_multiprocess.py proves equal to the multi-process executor.

Every tier (a model scale: ``tiny``, ``small``, ``gpu``) is one :class:`Tier` object, passed
explicitly to everything that depends on it, and owns one folder with the same layout::

    experiments/<tier>/results/<cell>-seed<k>.json   # one file per run (this script)
    experiments/<tier>/tables.md                     # report.py --tier <tier>
    experiments/<tier>/figures/*.png                 # report.py --tier <tier>

Usage::

    python experiments/sweep.py --tables lr            # synchronous lr sweep (seed 0)
    python experiments/sweep.py --pick-lrs              # writes configs/lrs.toml (best val loss)
    nohup python experiments/sweep.py --tables 1,3,2,4,5 > experiments/logs/sweep.log 2>&1 &
    python experiments/sweep.py --list --tables 1       # cells and whether they are done
    python experiments/sweep.py --tier small --tables 1 # the same on the small tier
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from asyncpp.train.components import TrainingError
from asyncpp.train.config import (
    ConfigError,
    from_dict,
    merge,
    parse_overrides,
    read_toml,
    validate,
)
from asyncpp.train.run import train

from ..curves import read_curves
from . import provenance
from .paths import CONFIGS, EXPERIMENTS, REPO
from .tables import EXTRA_SEEDS, SEEDS, plan, table_cells  # noqa: F401
from .tables_cells import (  # noqa: F401
    BASE_BATCH,
    BATCH_OPT,
    BATCHES,
    BETA_KEY,
    BETAS,
    DEFAULT_BETA,
    DEPTH_OPT,
    DEPTHS,
    GPU_MODES,
    GPU_OPTIMIZERS,
    H1_OPTIMIZERS,
    H3_FACTORS,
    LR_FRACTIONS,
    MODES,
    MUON_ADAMW_LR,
    NAG_CORRECTIONS,
    OPTIMIZERS,
    SPECTRAL,
    Cell,
    h3_choice,
    load_lrs,
    result_path,
)
from .tiers import TIERS, TINY_LR_GRID, Tier, get_tier  # noqa: F401

HERE = EXPERIMENTS
# --allow-dirty of this invocation (main sets it; run_cell reads it)
ALLOW_DIRTY = [False]

# -- learning rates --------------------------------------------------------------------------
def pick_lrs(tier: Tier) -> dict[str, float]:
    """lr* = argmin over ``tier``'s grid of the final validation loss of the synchronous seed-0
    run in ``tier.results`` (diverged runs count as +inf); writes ``tier.lrs_file`` with every
    optimizer whose grid is finished (an optimizer with an unfinished grid is listed as such
    and gets no lr)."""
    results, path, grid = tier.results, tier.lrs_file, tier.lr_grid
    best, missing = {}, []
    lines = ["# Written by `python experiments/sweep.py --pick-lrs`: per optimizer, the lr of",
             "# the synchronous grid with the lowest final validation loss (seed 0).", "[lr]"]
    for o in OPTIMIZERS:
        scored = []
        for lr in grid[o]:
            f = result_path(results, f"lr-{o}-{lr:g}", 0)
            if f.is_file():
                v = json.loads(f.read_text())["final"].get("val_loss")
                scored.append((v if v is not None and math.isfinite(v) else math.inf, lr))
        if len(scored) < len(grid[o]):
            missing.append(f"{o} ({len(scored)} of {len(grid[o])} runs)")
            continue
        best[o] = min(scored)[1]
        lines.append(f"{o} = {best[o]!r}  # " + ", ".join(f"{lr:g}: {v:.4f}" for v, lr in scored))
    if not best:
        raise ValueError(f"no optimizer's lr sweep is finished ({', '.join(missing)}); run "
                         "--tables lr first")
    if missing:
        lines.insert(2, "# lr sweep unfinished, no lr yet: " + ", ".join(missing))
    write_text_atomic(path, "\n".join(lines) + "\n")
    return best


# -- one run ---------------------------------------------------------------------------------


def build_config(cell: Cell, seed: int, run_dir: Path, lrs: dict | None, extra: dict):
    """The validated Config of ``cell`` (what ``asyncpp-train --config base ...`` resolves);
    ``lrs`` (the tier's :func:`load_lrs`) gives the lr of a cell that does not set one."""
    over = dict(cell.overrides)
    if "optimizer.lr" not in over and "optimizer.lr" not in extra:
        if lrs is None:
            raise ValueError(f"{cell.name}: sets no lr and no lr file was given")
        if cell.opt not in lrs:
            raise ValueError(f"{cell.name}: no lr for {cell.opt} in the lr file yet (its lr "
                             "sweep is unfinished); run --tables lr and --pick-lrs first")
        over["optimizer.lr"] = repr(lrs[cell.opt])
    over.update({"run.seed": str(seed), "run.dir": str(run_dir), "run.overwrite": "true",
                 "run.name": f"{cell.name}-seed{seed}", "delay.track_updates": "true"})
    over.update(extra)
    base = read_toml(CONFIGS / cell.base) if not Path(cell.base).is_absolute() \
        else read_toml(cell.base)
    cfg = from_dict(merge(base, parse_overrides(list(over.items()))))
    validate(cfg, world_size=None)
    return cfg, over


def _drift(summary: dict, records: list[dict]) -> dict:
    """The run's drift from asyncpp-train's ``--delay.track_updates`` outputs: ρ̄ (summary.json)
    and every 5th logged per-step ratio (metrics.jsonl); with ``--delay.spectral_drift`` also
    T2's δ̄ and every 5th δ_n (``spectral_*``)."""
    per = [(r["step"], r["drift_ratio"]) for r in records if "drift_ratio" in r]
    out = {"mean": summary.get("drift_ratio_mean"),
           "mean_second_half": summary.get("drift_ratio_mean_second_half"),
           "steps": [st for st, _ in per[::5]], "rho": [v for _, v in per[::5]]}
    spec = [(r["step"], r["spectral_drift"]) for r in records if "spectral_drift" in r]
    if spec:  # --delay.spectral_drift: T2's drift delta in its own norm
        out.update(spectral_mean=summary.get("spectral_drift_mean"),
                   spectral_mean_second_half=summary.get("spectral_drift_mean_second_half"),
                   spectral_steps=[st for st, _ in spec[::5]],
                   spectral=[v for _, v in spec[::5]])
    return out


def train_command(cell: Cell, over: dict[str, str]) -> list[str]:
    """The ``asyncpp-train`` argument list of a run (what the JSON's ``command`` records)."""
    base = cell.base if Path(cell.base).is_absolute() else str(CONFIGS / cell.base)
    args = ["--config", base]
    for k, v in over.items():
        args += [f"--{k}", v]
    return args + ["--log.progress", "false", "--log.plot", "false", "--log.tensorboard", "off"]


def run_cell(cell: Cell, seed: int, results: Path, lrs: dict | None = None,
             extra: dict | None = None, in_process: bool = False) -> dict:
    """Train one (cell, seed) with ``asyncpp-train`` in a subprocess and write its results
    JSON atomically; returns the record. A run stopped by a non-finite loss is recorded as
    ``diverged``; any other failure raises (and writes nothing). ``in_process``: train in this
    interpreter (:func:`_train_in_process`) instead of a subprocess."""
    run_dir = Path(tempfile.mkdtemp(prefix=run_dir_prefix(results, cell.name, seed)))
    try:
        return _train_and_record(cell, seed, results, run_dir, lrs, extra, in_process)
    finally:
        # The run folder only carries the trainer's files to the JSON; on any exit (a failed
        # run, Ctrl-C, SIGTERM from main's handler) it goes.
        shutil.rmtree(run_dir, ignore_errors=True)


def run_dir_prefix(results: Path, cell: str, seed: int) -> str:
    """Name prefix of the temporary run folder of (cell, seed) of the sweep writing into
    ``results``: one per lock file (the results folder's resolved path enters as a hash), so a
    leftover can be told apart from the folder of a live run of another sweep."""
    where = hashlib.sha1(str(results.resolve()).encode()).hexdigest()[:8]
    return f"asyncpp-{results.name}-{where}-{cell}-seed{seed}-"


def remove_stale_run_dirs(results: Path, cell: str, seed: int) -> list[Path]:
    """Remove the run folders of (cell, seed) left in the temp dir by a sweep that was killed
    (SIGKILL, power loss) before it could clean up. Call only while holding the lock of
    (cell, seed): then no live process can own such a folder."""
    stale = sorted(Path(tempfile.gettempdir()).glob(run_dir_prefix(results, cell, seed) + "*"))
    for d in stale:
        shutil.rmtree(d, ignore_errors=True)
    return stale


def _train_and_record(cell: Cell, seed: int, results: Path, run_dir: Path,
                      lrs: dict | None, extra: dict | None, in_process: bool = False) -> dict:
    cfg, over = build_config(cell, seed, run_dir, lrs, extra or {})
    code = provenance.code_state()  # at the start: the code this run trains with
    provenance.require_clean(code, ALLOW_DIRTY[0])
    args = train_command(cell, over)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cfg.run.threads:
        env["OMP_NUM_THREADS"] = str(cfg.run.threads)
    src = str(REPO / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.time()
    load0 = os.getloadavg()[0]
    if in_process:
        returncode, stderr = _train_in_process(cfg)
    else:
        proc = subprocess.run([sys.executable, "-m", "asyncpp.train.cli", *args], env=env,
                              capture_output=True, text=True)
        returncode, stderr = proc.returncode, proc.stderr
    wall = time.time() - t0
    status, error = "ok", None
    if returncode != 0:
        if "non-finite" not in stderr:
            raise RuntimeError(f"{cell.name}-seed{seed}: asyncpp-train failed with exit "
                               f"{returncode}:\n{stderr[-3000:]}")
        status = "diverged"
        error = next((ln for ln in stderr.splitlines() if "non-finite" in ln), None)
    records = []
    mfile = run_dir / "metrics.jsonl"
    if mfile.is_file():
        records = [json.loads(line) for line in mfile.read_text().splitlines()]
    summary = {}
    if (run_dir / "summary.json").is_file():
        summary = json.loads((run_dir / "summary.json").read_text())
    if status == "ok":
        final = {"val_loss": summary["final_val_loss"],
                 "train_loss": summary["final_train_loss"],
                 "tokens_per_s": summary["tokens_per_s"]}
        final.update({k: summary[k] for k in ("steady_tokens_per_s", "first_step_s", "mfu")
                      if summary.get(k) is not None})
    else:
        final = {"val_loss": None, "train_loss": None}
    curves = read_curves(mfile)
    mc = cfg.model_config()
    data = summary.get("data", {})
    final.update(wall_s=wall, params=mc.num_params(),
                 **provenance.regime(cfg.train.steps, cfg.train.batch_size, cfg.data.seq_len,
                                     mc.num_params(), data.get("train_windows")))
    for k in ("final_val_loss_by_source", "final_val_loss_by_kind", "final_val_windows",
              "final_val_tokens", "final_val_full_split", "final_val_loss_sample"):
        if k in summary:
            final[k.removeprefix("final_")] = summary[k]
    record = {
        "cell": cell.name, "seed": seed, "status": status, "error": error,
        "base_config": cell.base, "overrides": over,
        "command": "asyncpp-train --config experiments/configs/" + cell.base + " " + " ".join(
            f"--{k} {v}" for k, v in over.items() if k != "run.dir"),
        "config": cfg.resolved().to_dict(), "final": final, "curves": curves,
        "drift": _drift(summary, records),
        "machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
                    "cpu_model": provenance.cpu_model(), "cpu_isa": provenance.cpu_isa(),
                    "cores": os.cpu_count(), "torch": torch.__version__,
                    "threads": cfg.run.threads, "loadavg_start": load0,
                    "loadavg_end": os.getloadavg()[0], "python": platform.python_version()},
        "asyncpp_commit": _git_commit(), "finished_utc": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "provenance": {**code, "packages": provenance.package_versions(), "data": data},
    }
    write_json_atomic(result_path(results, cell.name, seed), record)
    return record


# In process (--in-process, the GPU runbook): runs follow each other in this interpreter, so
# torch is imported and the model compiled once per worker, not once per run.
def _train_in_process(cfg) -> tuple[int, str]:
    """Train ``cfg`` here (what ``asyncpp-train`` runs); (0, "") or (1, the error) for a
    non-finite stop. Compiled graphs are kept between runs (same shapes, same code)."""
    with contextlib.suppress(AttributeError):  # torch versions name the limit differently
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    with contextlib.suppress(AttributeError):
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    try:
        train(cfg)
        return 0, ""
    except TrainingError as e:
        return 1, str(e)
    finally:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def write_json_atomic(path: Path, obj) -> None:
    """Write ``obj`` as JSON to ``path`` via a temporary file in the same folder + rename."""
    write_text_atomic(path, json.dumps(obj, indent=1) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder + rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _git_commit() -> str | None:
    with contextlib.suppress(Exception):
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    return None


# -- reusing an identical finished run ------------------------------------------------------
# track_updates only observes (DelayedOptimizer's contract, tested).
_BOOKKEEPING = {"run": ("name", "dir", "overwrite"), "delay": ("track_updates",)}


def training_key(config: dict) -> str:
    """The resolved configuration without the fields that do not change training (run name,
    folder, overwrite, update tracking): two runs with the same key are bit-identical."""
    c = {sec: {k: v for k, v in body.items() if k not in _BOOKKEEPING.get(sec, ())}
         for sec, body in config.items()}
    return json.dumps(c, sort_keys=True)


def in_current_schema(config: dict) -> dict | None:
    """A recorded configuration in today's schema: a field added since the run was recorded
    takes its default, which by the config's convention (a new knob defaults to the old
    behaviour) is what that run trained with. None when the record names a field that no
    longer exists: such a run is compared with nothing."""
    try:
        return from_dict(config).to_dict()
    except (ConfigError, TypeError, ValueError):
        return None


def find_identical(results: Path, config: dict) -> Path | None:
    """A finished result in ``results`` whose training configuration equals ``config``'s
    (both read in today's schema)."""
    key = training_key(in_current_schema(config) or config)
    for f in sorted(results.glob("*.json")):
        try:
            rec = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if rec.get("status") != "ok" or "config" not in rec:
            continue
        theirs = in_current_schema(rec["config"])
        if theirs is not None and training_key(theirs) == key:
            return f
    return None


def reuse_result(src: Path, cell: Cell, seed: int, results: Path, cfg) -> dict:
    """Record (cell, seed) from the identical finished run ``src`` (no training): same numbers,
    this cell's name and configuration, and ``reused_from`` naming the source."""
    rec = json.loads(src.read_text())
    rec.update(cell=cell.name, seed=seed, base_config=cell.base, reused_from=src.name,
               config=cfg.resolved().to_dict())
    write_json_atomic(result_path(results, cell.name, seed), rec)
    return rec


# -- claiming runs (several sweep processes) --------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(results: Path, cell: str, seed: int) -> Path | None:
    """Create the lock file of (cell, seed); None if another live process holds it."""
    lock = results / f".{cell}-seed{seed}.lock"
    results.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and _alive(pid):
                return None
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return lock
    return None


def run_lane(next_runs, results: Path, deadline: float = 0.0, estimate_s: float = 240.0,
             listing: bool = False, label=lambda cell: "") -> int:
    """One resumable lane over a plan that can change as runs finish: ``next_runs()`` returns
    the (cell, seed) pairs still to do, in order; the first is trained (under its lock file)
    and the plan asked again, until it is empty, the ``deadline`` (Unix time; a run is
    expected to take ``estimate_s``) would be passed, or another process holds the next run.
    ``listing``: print the plan and train nothing. Returns 0."""
    while True:
        todo = next_runs()
        if listing or not todo:
            for c, s in todo:
                print(f"todo {c.name} seed {s}{label(c)}")
            print(f"{len(todo)} run(s) to do now")
            return 0
        c, s = todo[0]
        if deadline and time.time() + estimate_s > deadline:
            print(f"deadline: not starting {c.name} seed {s}")
            return 0
        lock = claim(results, c.name, s)
        if lock is None:
            print(f"{c.name} seed {s} is held by another process; stopping")
            return 0
        try:
            t0 = time.time()
            rec = run_cell(c, s, results)
            print(f"{c.name} seed {s}: val {rec['final'].get('val_loss')} "
                  f"({time.time() - t0:.0f} s)", flush=True)
        finally:
            lock.unlink(missing_ok=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", default="tiny", choices=sorted(TIERS),
                    help="tiny (base.toml), small (small.toml) or gpu (gpu.toml); results in "
                    "experiments/<tier>/results/")
    ap.add_argument("--tables", default="lr", help="comma-separated table ids (see table_cells)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default: per table)")
    ap.add_argument("--only", default=None, help="comma-separated cell names")
    ap.add_argument("--optimizers", default=None,
                    help="comma-separated: only cells of these optimizers")
    ap.add_argument("--results", default=None, help="results folder (default: the tier's)")
    ap.add_argument("--lrs", default=None, help="lr file (default: the tier's, from --pick-lrs)")
    ap.add_argument("--pick-lrs", action="store_true", help="write the lr file from the lr sweep")
    ap.add_argument("--list", action="store_true", help="list cells and their state, run nothing")
    ap.add_argument("--validate-only", action="store_true",
                    help="resolve and validate every planned config (no tensors), run nothing")
    ap.add_argument("--in-process", action="store_true",
                    help="train in this process, one run after another (the GPU runbook)")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="Unix time: start no run that would end after it (estimate: the upper "
                    "quartile of this results folder's wall times per step for the run's "
                    "optimizer, times its steps; else --run-estimate-s)")
    ap.add_argument("--run-estimate-s", type=float, default=0.0,
                    help="expected seconds of one run before any has finished (--deadline)")
    ap.add_argument("--max-runs", type=int, default=0,
                    help="stop after training this many runs (0: no limit; reused runs and "
                         "skips do not count)")
    ap.add_argument("--allow-dirty", action="store_true",
                    help="train from a working tree that differs from its commit (the result "
                    "records the diff's sha256); refused otherwise")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra override for every run (e.g. train.steps=2; smoke tests only)")
    args = ap.parse_args(argv)
    ALLOW_DIRTY[0] = args.allow_dirty
    tier = get_tier(args.tier).at(results=args.results, lrs_file=args.lrs)
    in_process = args.in_process
    results = tier.results
    if args.pick_lrs:
        best = pick_lrs(tier)
        print("chosen lrs:", best)
        return 0
    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    only = args.only.split(",") if args.only else None
    extra = dict(kv.split("=", 1) for kv in args.set)
    try:
        todo = plan(tables, seeds, only, tier)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.optimizers:
        keep = set(args.optimizers.split(","))
        todo = [(c, s) for c, s in todo if c.opt in keep]
    if args.list:
        for c, s in todo:
            state = "done" if result_path(results, c.name, s).is_file() else "todo"
            print(f"{state}  {c.name}-seed{s}")
        return 0
    lrs = None
    if "optimizer.lr" not in extra and any("optimizer.lr" not in c.overrides for c, _ in todo):
        lrs = load_lrs(tier.lrs_file)
    if args.validate_only:
        for c, s in todo:
            cfg, _ = build_config(c, s, Path(tempfile.gettempdir()) / "unused", lrs, extra)
            mc = cfg.model_config()
            print(f"ok  {c.name}-seed{s}: {mc.name} {mc.num_params() / 1e6:.1f}M params, "
                  f"{cfg.train.steps * cfg.train.batch_size * cfg.data.seq_len:,} tokens, "
                  f"delays {cfg.stage_delays()}, correction {cfg.delay.correction}")
        return 0
    n_run = 0
    for c, s in todo:
        out = result_path(results, c.name, s)
        if out.is_file():
            print(f"skip {c.name}-seed{s} (done)", flush=True)
            continue
        if (lrs is not None and c.opt not in lrs and "optimizer.lr" not in c.overrides
                and "optimizer.lr" not in extra):
            print(f"skip {c.name}-seed{s} (no lr for {c.opt} yet: finish its lr sweep and "
                  "run --pick-lrs)", flush=True)
            continue
        cfg, _ = build_config(c, s, Path(tempfile.gettempdir()) / "unused", lrs, extra)
        if args.deadline:
            est = run_estimate(results, args.run_estimate_s, warm=in_process and n_run > 0,
                               steps=cfg.train.steps, optimizer=cfg.optimizer.name)
            if time.time() + est > args.deadline:
                print(f"stop: {c.name}-seed{s} would end after the deadline (a run takes "
                      f"~{est:.0f} s, {args.deadline - time.time():.0f} s left)", flush=True)
                break
        lock = claim(results, c.name, s)
        if lock is None:
            print(f"skip {c.name}-seed{s} (running elsewhere)", flush=True)
            continue
        try:
            for d in remove_stale_run_dirs(results, c.name, s):
                print(f"removed {d}, left by a killed run of {c.name}-seed{s}", flush=True)
            if out.is_file():
                continue
            same = find_identical(results, cfg.resolved().to_dict())
            if same is not None:
                reuse_result(same, c, s, results, cfg)
                print(f"reuse {c.name}-seed{s}: identical to {same.name}", flush=True)
                continue
            rec = run_cell(c, s, results, lrs, extra, in_process)
            n_run += 1
            v = rec["final"]["val_loss"]
            print(f"{time.strftime('%H:%M:%S')} {c.name}-seed{s}: {rec['status']} val "
                  f"{v if v is None else round(v, 4)} in {rec['final']['wall_s']:.1f}s "
                  f"(load {rec['machine']['loadavg_start']:.1f})", flush=True)
        finally:
            lock.unlink(missing_ok=True)
        if args.max_runs and n_run >= args.max_runs:
            break
    print(f"sweep done: {n_run} runs this invocation", flush=True)
    return 0


def run_estimate(results: Path, default: float, warm: bool = False,
                 steps: int | None = None, optimizer: str | None = None) -> float:
    """Upper quartile of the wall times of the finished (not reused) runs in ``results``, else
    ``default``: a deadline needs a run's likely longest time, not its typical one (on this shared
    machine a tier's runs spread with the load, and one started on the median's estimate
    ended after the deadline). ``warm``: this process has compiled already (``--in-process``),
    so only runs whose first step took under a quarter of their wall time (no compile in them)
    count, if there are any. ``steps``: the run to come trains that many steps, and the
    estimate is a wall time per step times ``steps`` (a tier's token ladder trains 4× a claims
    run's steps). ``optimizer``: only that optimizer's runs count when there are at least 3
    (SOAP's step is slower than Lion's), else all.

    The quartile is the order statistic at index ⌊3n/4⌋ of the n sorted times."""
    walls, warm_walls = [], []
    for f in results.glob("*.json"):
        with contextlib.suppress(OSError, json.JSONDecodeError, KeyError, TypeError,
                                 ZeroDivisionError):
            rec = json.loads(f.read_text())
            if rec.get("status") == "ok" and "reused_from" not in rec:
                run_wall = float(rec["final"]["wall_s"])
                wall = (run_wall if steps is None else
                        run_wall / int(rec["config"]["train"]["steps"]) * steps)
                name = rec.get("config", {}).get("optimizer", {}).get("name")
                walls.append((wall, name))
                if float(rec["final"].get("first_step_s", run_wall)) < 0.25 * run_wall:
                    warm_walls.append((wall, name))
    walls = warm_walls if warm and warm_walls else walls
    if optimizer is not None:
        own = [w for w in walls if w[1] == optimizer]
        walls = own if len(own) >= 3 else walls
    if not walls:
        return default
    times = sorted(w for w, _ in walls)
    return times[3 * len(times) // 4]


def _exit_on_sigterm(signum, frame):
    # SystemExit unwinds through run_cell and main's ``finally``: the training subprocess is
    # killed (subprocess.run does so on any exception), its run folder and the lock removed.
    raise SystemExit(128 + signum)



def entry() -> int:
    """``python experiments/sweep.py``: SIGTERM stops a sweep as Ctrl-C does (see
    :func:`_exit_on_sigterm`)."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    return main()
