"""``asyncpp-export RUN_DIR --out DIR``: the model of any run as a Hugging Face folder.

Reads the newest valid checkpoint of ``RUN_DIR`` — a one-process run's, or a ``torchrun``
launch's, whose per-rank shards are merged by full-model parameter names
(:mod:`asyncpp.train.restore`) — and writes ``model.safetensors``, ``config.json``
(``LlamaForCausalLM``), the run's ``tokenizer.json`` with ``tokenizer_config.json`` and
``special_tokens_map.json`` naming the same end-of-text token as ``config.json``.

The folder is written under a temporary name beside ``DIR`` and renamed when complete, so an
interrupted export leaves no half-written model; an existing non-empty ``DIR`` is refused
unless ``--force`` is given. Exit codes: 0 written, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

PROG = "asyncpp-export"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def build_parser() -> _Parser:
    ap = _Parser(prog=PROG, description="Export the newest valid checkpoint of a run (one "
                 "process or torchrun) as a Hugging Face folder with the run's tokenizer: "
                 "LlamaForCausalLM for asyncpp's models, the model's own class for "
                 "--model.hf, the state dict for a --model.factory model.",
                 epilog="example:\n  asyncpp-export runs/demo --out exported/demo",
                 formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    ap.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (run.dir)")
    ap.add_argument("--out", required=True, metavar="DIR", help="the folder to write")
    ap.add_argument("--force", action="store_true", help="replace DIR if it holds files")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.force:
        return _fail(f"--out {str(out)!r} already exists and is not empty; choose another "
                     "folder or pass --force to replace it")
    from ..models.export import export_hf
    from .config import ConfigError
    from .restore import restore_run

    try:
        run = restore_run(args.run_dir)
        eos, tokenizer_file = _tokenizer(run.run_dir)
    except (ConfigError, ValueError) as e:
        return _fail(str(e))
    for note in run.notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        try:
            if run.cfg.model.external is not None:
                from .external_model import export

                export(run.cfg.model_config(), run.model.state_dict(), tmp,
                       tokenizer_file=tokenizer_file, eos_token_id=eos)
            else:
                export_hf(run.model, tmp, tokenizer_file=tokenizer_file, eos_token_id=eos)
        except ValueError as e:  # e.g. a mixture of experts: no LlamaForCausalLM equivalent
            shutil.rmtree(tmp, ignore_errors=True)
            return _fail(str(e))
        tmp.chmod(0o777 & ~_umask())
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    where = f"{run.ranks} ranks merged" if run.ranks > 1 else "one process"
    print(f"exported step {run.step} of {run.run_dir} ({where}) to {out}")
    return 0


def _tokenizer(run_dir: Path):
    """(end-of-text id, tokenizer file) of the run, or (None, None) if it saved none."""
    path = run_dir / "tokenizer.json"
    if not path.is_file():
        return None, None
    from ..data.tokenizer import load_tokenizer

    return load_tokenizer(path).eos_id, path


def _umask() -> int:
    from ..data.cache import current_umask

    return current_umask()


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
