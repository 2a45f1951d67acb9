"""Re-run one result of a study from its record and say how far the re-run lands.

``asyncpp-study reproduce STUDY RESULT [--keep DIR]`` finds the run the study file declares
under the result's key (the cell's options, its lr and tied options, the seed; a study file
edited since gives another key and is refused), trains it again into ``DIR`` (default: a
temporary folder, removed after) and compares; with ``--keep`` the comparison is also written
to ``DIR/reproduction.json``:

- ``recorded`` / ``rerun`` — the study's metric of the record and of the re-run, and
  ``difference`` = rerun − recorded; ``bit_for_bit`` when they are the same float;
- ``first_divergent_step`` — the first step whose training loss differs between the record's
  curve and the re-run's (None when the curves agree to the last step), and the largest
  training-loss difference: a rounding difference that grows is chaos, a different first
  step is a different computation;
- ``same_code`` / ``same_machine`` — the record's commit, dirty flag, torch version, CPU model
  and vector ISA against the re-run's: a re-run at another commit or on another CPU may differ
  without anything being wrong, and the report says which of these changed.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import provenance, runner
from .curves import read_curves
from .spec import Study, StudyError


def find_run(study: Study, rec: dict) -> runner.Run:
    """The run ``study`` declares under the key of ``rec``; :class:`StudyError` if none."""
    key = rec.get("key")  # the seed is part of the key
    for r in runner.selection_runs(study) + runner.claims_runs(study)[0]:
        if r.key == key:
            return r
    raise StudyError(f"{study.path}: no run of the study has the key {key!r} of this result "
                     f"(cell {rec.get('cell')!r}, seed {rec.get('seed')!r}); the study file "
                     "changed since the run, or the result belongs to another study")


def first_divergence(a: list, b: list) -> tuple[int | None, float]:
    """(index of the first entry where the two curves differ, or None; the largest absolute
    difference over their common length)."""
    first, worst = None, 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        if x is None or y is None:
            continue
        if x != y and first is None:
            first = i
        worst = max(worst, abs(x - y))
    return first, worst


def _same(rec_prov: dict, now: dict) -> tuple[dict, dict]:
    code = {"recorded_commit": rec_prov.get("commit_at_start"),
            "rerun_commit": now["commit_at_start"],
            "recorded_dirty": rec_prov.get("dirty"), "rerun_dirty": now["dirty"]}
    code["same"] = (code["recorded_commit"] == code["rerun_commit"]
                    and not code["recorded_dirty"] and not code["rerun_dirty"])
    pk = provenance.package_versions()
    machine = {"recorded_cpu": rec_prov.get("cpu"), "rerun_cpu": provenance.cpu_model(),
               "recorded_isa": rec_prov.get("cpu_isa"), "rerun_isa": provenance.cpu_isa(),
               "recorded_torch": (rec_prov.get("packages") or {}).get("torch"),
               "rerun_torch": pk.get("torch")}
    machine["same"] = all(machine[f"recorded_{k}"] == machine[f"rerun_{k}"]
                          for k in ("cpu", "isa", "torch"))
    return code, machine


def reproduce(study: Study, result: Path, out: Path | None = None,
              say=print) -> dict:
    """Re-run ``result`` (a result JSON of ``study``) and return the comparison (module
    docstring); it is also written to ``out/reproduction.json`` when ``out`` is given."""
    try:
        rec = json.loads(Path(result).read_text())
    except (OSError, ValueError) as e:
        raise StudyError(f"{result}: not a readable result file ({e})") from None
    if "value" not in rec or "key" not in rec:
        raise StudyError(f"{result}: not a study result (no key or value)")
    run = find_run(study, rec)
    keep = out is not None
    folder = Path(out) if keep else Path(tempfile.mkdtemp(prefix="asyncpp-reproduce-"))
    try:
        rdir = folder / "runs" / run.key
        cmd = runner.command(study, run, resume=False)
        cmd[cmd.index("--run.dir") + 1] = str(rdir)
        say(f"re-running {run.label()} into {rdir}")
        log = folder / f"{run.key}.log"
        folder.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode
        if rc != 0 or not (rdir / "summary.json").is_file():
            raise StudyError(f"the re-run failed (exit {rc}); its log: {log}"
                             + ("" if keep else " (removed with the temporary folder; pass "
                                "--out to keep it)"))
        summary = json.loads((rdir / "summary.json").read_text())
        value = summary[study.metric]
        curves = read_curves(rdir / "metrics.jsonl")
        first, worst = first_divergence(rec.get("curves", {}).get("train_loss", []),
                                        curves.get("train_loss", []))
        steps = curves.get("step", [])
        code, machine = _same(rec.get("provenance", {}), provenance.code_state())
        doc = {"result": str(result), "cell": run.cell, "seed": run.seed, "key": run.key,
               "metric": study.metric, "recorded": rec["value"], "rerun": value,
               "difference": value - rec["value"] if math.isfinite(value) else None,
               "bit_for_bit": value == rec["value"],
               "first_divergent_step": None if first is None else steps[first],
               "max_train_loss_difference": worst, "code": code, "machine": machine}
        if keep:
            runner.write_json(folder / "reproduction.json", doc)
        return doc
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def summary_line(doc: dict) -> str:
    """One line: bit for bit, or how far the re-run lands and from which step, and what
    differs between the record's code and machine and the re-run's."""
    if doc["bit_for_bit"]:
        head = f"{doc['metric']} {doc['rerun']!r}: bit for bit"
    else:
        step = doc["first_divergent_step"]
        head = (f"{doc['metric']} {doc['rerun']:.6g} against the recorded "
                f"{doc['recorded']:.6g} ({doc['difference']:+.3g}); training losses "
                + ("equal at every step" if step is None else f"first differ at step {step}"))
    changed = [w for w, same in (("code", doc["code"]["same"]),
                                 ("machine", doc["machine"]["same"])) if not same]
    return head + ("" if not changed else f" (the record's {' and '.join(changed)} differ "
                   "from the re-run's)")


def main_reproduce(study: Study, result: str, out: str | None) -> int:
    """The ``reproduce`` subcommand: 0 bit for bit, 4 re-ran but differs, 2 bad input,
    1 the re-run failed."""
    def say(text: str) -> None:
        sys.stderr.write(f"asyncpp-study: {text}\n")

    try:
        doc = reproduce(study, Path(result), Path(out) if out else None, say=say)
    except StudyError as e:
        msg = str(e)
        say(f"error: {msg}")
        return 1 if msg.startswith("the re-run failed") else 2
    print(summary_line(doc))
    return 0 if doc["bit_for_bit"] else 4


__all__ = ["find_run", "first_divergence", "main_reproduce", "reproduce", "summary_line"]
