r"""Re-run committed results from their records and report any that differ.

For each result file: check out the code it names in a fresh clone (``git clone --shared`` of
this repository, then the record's ``provenance.commit_at_start``, or for records older than
provenance the commit they name, ``asyncpp_commit``, taken when the run *finished*), run the
record's ``command`` there with the record's thread count, and compare the final validation
loss bit for bit. The report says, for a result that differs, what in its record cannot
vouch for it: a dirty tree (the diff's hash names code no commit holds), a commit taken at
the end of the run, package versions or a tokenizer other than this machine's, or nothing
recorded at all.

Usage::

    python experiments/reproduce.py experiments/tiny/results/muon-ef-seed0.json ...
    python experiments/reproduce.py --tier opt-180k --sample 3      # a seeded sample
    python experiments/reproduce.py --across opt-180k,opt-580k --sample 4   # across strata
    python experiments/reproduce.py --tier tiny --sample 2 --out /tmp/repro.json
    python experiments/reproduce.py --probe experiments/tiny/results/adan-sync-alg1-*-seed1.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import provenance
from .paths import EXPERIMENTS, REPO

HERE = EXPERIMENTS


def record_commit(rec: dict) -> tuple[str | None, str]:
    """(the commit to check out, how the record names it)."""
    prov = rec.get("provenance") or {}
    if prov.get("commit_at_start"):
        return prov["commit_at_start"], "commit at the run's start"
    return rec.get("asyncpp_commit"), "commit when the run finished (no provenance)"


def train_args(rec: dict, run_dir: Path) -> list[str]:
    """The record's ``asyncpp-train`` arguments, writing into ``run_dir``."""
    args = shlex.split(rec["command"])
    if args and args[0] == "asyncpp-train":
        args = args[1:]
    return args + ["--run.dir", str(run_dir), "--run.overwrite", "true", "--log.progress",
                   "false", "--log.plot", "false", "--log.tensorboard", "off"]


def checkout(commit: str, where: Path) -> Path:
    """A fresh clone of this repository at ``commit`` (objects shared), with the local data
    folder linked in (``data/`` is not in git)."""
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(REPO), str(where)],
                   check=True)
    subprocess.run(["git", "-C", str(where), "checkout", "-q", "--detach", commit], check=True)
    if (REPO / "data").is_dir():
        (where / "data").mkdir(exist_ok=True)
        for d in (REPO / "data").iterdir():
            (where / "data" / d.name).symlink_to(d)
    return where


PERTURBATION = 1e-8  # the relative change of the lr that probes a run's sensitivity


def perturbed(rec: dict) -> dict | None:
    """The record with its ``--optimizer.lr`` multiplied by 1 + :data:`PERTURBATION` (None
    when its command names no lr)."""
    args = shlex.split(rec["command"])
    if "--optimizer.lr" not in args:
        return None
    i = args.index("--optimizer.lr") + 1
    args[i] = repr(float(args[i]) * (1 + PERTURBATION))
    return {**rec, "command": shlex.join(args)}


def rerun(rec: dict, code: Path, scratch: Path) -> dict:
    """Run the record's command in ``code``; the rerun's final val loss and summary."""
    run_dir = scratch / "run"
    args = train_args(rec, run_dir)
    conf = args[args.index("--config") + 1] if "--config" in args else None
    if conf and not (code / conf).is_file():
        return {"error": [f"the record's --config {conf} is not in its commit (the record "
                          "names a file that did not exist there: the commit is not the code "
                          "that ran)"]}
    env = dict(os.environ, PYTHONPATH=str(code / "src"), PYTHONUNBUFFERED="1")
    threads = (rec.get("machine") or {}).get("threads")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, "-m", "asyncpp.train.cli", *args],
                          cwd=code, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or ["exit " + str(proc.returncode)]}
    s = json.loads((run_dir / "summary.json").read_text())
    return {"val_loss": s["final_val_loss"], "data": s.get("data", {})}


def explain(rec: dict, got: dict) -> list[str]:
    """What in the record cannot vouch for a result that did not reproduce."""
    why = []
    prov = rec.get("provenance")
    if not prov:
        why.append("no provenance: the commit was taken when the run finished, no dirty flag, "
                   "no package versions but torch, no tokenizer hash")
    else:
        if prov.get("dirty"):
            why.append(f"made from a dirty tree (diff sha256 {prov['diff_sha256'][:12]}): "
                       "the code is in no commit")
        now = provenance.package_versions()
        for k, v in (prov.get("packages") or {}).items():
            if now.get(k) != v:
                why.append(f"{k} {v} then, {now.get(k)} now")
        tok_then = (prov.get("data") or {}).get("tokenizer_sha256")
        tok_now = got.get("data", {}).get("tokenizer_sha256")
        if tok_then and tok_now and tok_then != tok_now:
            why.append("another tokenizer (sha256 differs)")
    torch_then = (rec.get("machine") or {}).get("torch")
    torch_now = provenance.package_versions(("torch",))["torch"]
    if torch_then and torch_now and torch_then != torch_now:
        why.append(f"torch {torch_then} then, {torch_now} now")
    if not why:
        why.append("nothing in the record differs from this machine: floating-point results "
                   "of another CPU (instruction set, library kernels), or a defect")
    return why


def check(paths: list[Path], keep: bool = False, probe: bool = False) -> list[dict]:
    """Re-run each result file; one report row per file. With ``probe``, a result that
    differs is also re-run with its lr changed by a relative :data:`PERTURBATION`: how far
    that moves the final loss is how far this run amplifies a floating-point difference (a
    run that moves by more than its discrepancy cannot be reproduced across machines)."""
    rows, clones = [], {}
    root = Path(tempfile.mkdtemp(prefix="asyncpp-reproduce-"))
    try:
        for p in paths:
            rec = json.loads(Path(p).read_text())
            commit, how = record_commit(rec)
            row = {"result": _repo_relative(Path(p)), "recorded": rec["final"].get("val_loss"),
                   "commit": commit, "commit_is": how}
            if rec.get("status") != "ok" or commit is None:
                row.update(status="skipped", why=["not a finished run with a commit"])
                rows.append(row)
                continue
            if commit not in clones:
                clones[commit] = checkout(commit, root / f"code-{commit[:12]}")
            got = rerun(rec, clones[commit], Path(tempfile.mkdtemp(dir=root)))
            if "error" in got:
                row.update(status="failed", why=got["error"])
            else:
                row["rerun"] = got["val_loss"]
                row["diff"] = got["val_loss"] - row["recorded"]
                same = got["val_loss"] == row["recorded"]
                row["status"] = "reproduced" if same else "differs"
                if not same:
                    row["why"] = explain(rec, got)
                    alt = perturbed(rec) if probe else None
                    if alt is not None:
                        got2 = rerun(alt, clones[commit], Path(tempfile.mkdtemp(dir=root)))
                        if "val_loss" in got2:
                            row["sensitivity"] = got2["val_loss"] - got["val_loss"]
                            amplified = abs(row["sensitivity"]) >= abs(row["diff"])
                            row["why"].append(
                                f"the lr × (1 + {PERTURBATION:g}) moves this run by "
                                f"{row['sensitivity']:+.2e}"
                                + (": it amplifies a floating-point difference beyond its "
                                   "discrepancy" if amplified else
                                   ", less than its discrepancy"))
            rows.append(row)
            print(_line(row), flush=True)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return rows


def _line(row: dict) -> str:
    s = f"{row['status']:10s} {Path(row['result']).name}"
    if "rerun" in row:
        s += f"  recorded {row['recorded']:.7f}  rerun {row['rerun']:.7f}  Δ {row['diff']:+.2e}"
    if row.get("why"):
        s += "\n           " + "; ".join(row["why"])
    return s


def _repo_relative(p: Path) -> str:
    """``p`` relative to the repository when it lies inside it (a report names files the same
    way in every clone), else as given."""
    try:
        return str(p.resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def stratum(rec: dict, tier: str) -> tuple[str, str, str]:
    """(tier, optimizer, mode) of a result: the mode is the schedule and the delay
    correction of its configuration (``1f1b``, ``2bw+ef``, ...)."""
    cfg = rec.get("config") or {}
    opt = (cfg.get("optimizer") or {}).get("name", "?")
    sched = (cfg.get("pipeline") or {}).get("schedule", "?")
    corr = (cfg.get("delay") or {}).get("correction", "none")
    return tier, opt, sched + ("" if corr in (None, "none") else "+" + corr)


# the strata a sample across tiers must reach: a larger model, a non-Muon optimizer and a
# synchronous run (each is a way the reproductions so far could all share one blind spot)
MUST = (("tier", "opt-580k"), ("optimizer", "adamw"), ("mode", "1f1b"))


def sample_across(tiers: list[str], n: int, seed: int = 0,
                  root: Path | None = None) -> list[Path]:
    """A seeded sample of ``n`` finished results, one per (tier, optimizer, mode) stratum:
    first one stratum for each of :data:`MUST` that the tiers hold, then strata not yet
    sampled, chosen at random, each adding a tier, optimizer or mode not yet covered where it
    can."""
    root = root or HERE
    rng = random.Random(seed)
    strata: dict[tuple[str, str, str], list[Path]] = {}
    for t in tiers:
        for f in sorted((root / t / "results").glob("*.json")):
            rec = json.loads(f.read_text())
            if rec.get("status") == "ok" and "reused_from" not in rec:
                strata.setdefault(stratum(rec, t), []).append(f)
    keys = sorted(strata)
    rng.shuffle(keys)
    field = {"tier": 0, "optimizer": 1, "mode": 2}
    chosen: list[tuple[str, str, str]] = []
    for what, value in MUST:
        if len(chosen) < n and not any(k[field[what]] == value for k in chosen):
            hit = next((k for k in keys if k[field[what]] == value and k not in chosen), None)
            if hit is not None:
                chosen.append(hit)
    while len(chosen) < n and len(chosen) < len(keys):
        left = [k for k in keys if k not in chosen]
        def new(k):
            return sum(all(c[i] != k[i] for c in chosen) for i in range(3))
        chosen.append(max(left, key=new))  # max keeps the shuffled order among ties
    return [rng.choice(strata[k]) for k in chosen]


def sample(tier_results: Path, n: int, seed: int = 0) -> list[Path]:
    """A seeded sample of ``n`` finished, not reused results of a results folder."""
    files = []
    for f in sorted(tier_results.glob("*.json")):
        rec = json.loads(f.read_text())
        if rec.get("status") == "ok" and "reused_from" not in rec:
            files.append(f)
    return random.Random(seed).sample(files, min(n, len(files)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="*", help="result JSON files")
    ap.add_argument("--tier", help="sample from experiments/<tier>/results/")
    ap.add_argument("--across", help="comma-separated tiers: sample one result per (tier, "
                    "optimizer, mode) stratum, reaching opt-580k, AdamW and a synchronous run")
    ap.add_argument("--sample", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    ap.add_argument("--probe", action="store_true",
                    help="re-run a result that differs with its lr × (1 + 1e-8) too: how far "
                    "the run amplifies a floating-point difference")
    args = ap.parse_args(argv)
    paths = [Path(p) for p in args.results]
    if args.tier:
        paths += sample(HERE / args.tier / "results", args.sample, args.seed)
    if args.across:
        paths += sample_across(args.across.split(","), args.sample, args.seed)
    if not paths:
        ap.error("give result files, --tier or --across")
    rows = check(paths, probe=args.probe)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    bad = [r for r in rows if r["status"] in ("differs", "failed")]
    same = sum(r["status"] == "reproduced" for r in rows)
    far = max((abs(r["diff"]) for r in rows if "diff" in r), default=0.0)
    print(f"{same} of {len(rows)} re-ran bit for bit; {len(bad)} differ or failed (largest "
          f"|Δ| {far:.2e}); {len(rows) - same - len(bad)} skipped")
    return 1 if bad else 0
