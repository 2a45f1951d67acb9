r"""A model asyncpp did not define, through the CLI: ``--model.hf PATH`` (a Hugging Face causal
LM folder, :mod:`.hf`) or ``--model.factory package.module:function`` (your own code).

The factory protocol: ``function()`` takes no arguments and returns either

- an ``nn.Module`` with a ``pipeline_layers()`` method, or
- a pair ``(model, layers)``,

where ``layers`` is the ordered list of ``(name, module)`` whose composition maps a batch of
token ids ``(B, T)`` (int64) to logits ``(B, T, V)`` (a layer that returns a tuple gives the
next one its positional arguments, across stage boundaries too; :mod:`asyncpp.pipeline.stages`)
and whose names are the model's own attribute paths (``"blocks.3"``), so that checkpoints,
``asyncpp-export`` and ``asyncpp-eval`` see the model's parameter names. The vocabulary size is
read from ``model.vocab_size`` or ``model.config.vocab_size``; the longest sequence from
``max_seq_len`` / ``config.max_position_embeddings`` / ``config.n_positions`` if present. The
function must build the same model for the same ``torch.manual_seed`` (the run seeds it before
the call, on every rank).

Both kinds are split into stages by :func:`asyncpp.pipeline.partition` balanced by parameter
counts, the same split in one process and under torchrun. Training FLOPs per token are
:math:`6N` plus the attention term :math:`12\,L\,d\,T` when the block count L and width d are
known (a Hugging Face config; for a factory, ``model.n_layers`` and ``model.dim`` if set).
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from dataclasses import dataclass

import torch
from torch import nn

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class ExternalModelConfig:
    """What the trainer needs to know of a model it did not define (see module docstring)."""

    kind: str                 # "hf" or "factory"
    ref: str                  # the folder, or "package.module:function"
    vocab_size: int
    max_seq_len: int
    n_layers: int             # pipeline layers: P may not exceed it
    blocks: int | None        # transformer blocks (FLOPs), if known
    dim: int | None
    tie_embeddings: bool
    params: int
    transposed_pattern: str | None = None
    is_moe: bool = False

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.ref}"

    def num_params(self) -> int:
        return self.params

    def build(self, seed: int) -> tuple[nn.Module, list[tuple[str, nn.Module]]]:
        """A fresh model (seeded with ``seed``) and its pipeline layers, in float32 on CPU."""
        if self.kind == "hf":
            from . import hf

            model = hf.build(self.ref, seed=seed)
            return model, hf.layers(model)
        torch.manual_seed(seed)
        return _call_factory(self.ref)

    def export_model(self, state: dict):
        """A model object to export with ``state`` loaded: the Hugging Face class (fresh, not
        adapted) for ``hf``; the factory's own model for ``factory``."""
        if self.kind == "hf":
            from . import hf

            model = hf.build(self.ref, seed=0, weights=False)
        else:
            model, _ = _call_factory(self.ref)
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = {k for k in missing if _tied_in(model, k, state)}
        if set(missing) - tied or unexpected:
            raise ValueError(f"the checkpoint does not fit {self.name}: missing "
                             f"{sorted(set(missing) - tied)[:3]}, unexpected "
                             f"{sorted(unexpected)[:3]}")
        return model.eval()


def _tied_in(model: nn.Module, key: str, state: dict) -> bool:
    """Whether ``key`` is a parameter tied to one that ``state`` holds (saved once)."""
    params = dict(model.named_parameters(remove_duplicate=False))
    p = params.get(key)
    return p is not None and any(params.get(k) is p for k in state if k != key)


def _call_factory(spec: str):
    if not _SPEC.match(spec):
        raise ValueError(f"model.factory={spec!r} must be 'package.module:function'")
    mod_name, fn_name = spec.split(":")
    try:
        mod = _import(mod_name)
    except ImportError as e:
        raise ValueError(f"model.factory={spec!r}: cannot import {mod_name!r} ({e}); put it on "
                         "PYTHONPATH or in the current folder") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise ValueError(f"model.factory={spec!r}: {mod_name} has no function {fn_name!r}")
    got = fn()
    if isinstance(got, tuple) and len(got) == 2:
        model, layers = got
    elif isinstance(got, nn.Module) and hasattr(got, "pipeline_layers"):
        model, layers = got, got.pipeline_layers()
    else:
        raise ValueError(f"model.factory={spec!r} returned {type(got).__name__}; return an "
                         "nn.Module with pipeline_layers(), or a pair (model, layers)")
    if not isinstance(model, nn.Module):
        raise ValueError(f"model.factory={spec!r}: the model is a {type(model).__name__}, not "
                         "an nn.Module")
    return model, list(layers.items()) if isinstance(layers, dict) else list(layers)


def _import(name: str):
    """``importlib.import_module(name)``; a top-level package or module not on the path is
    looked for in the current folder too (as ``python -m`` would find it; the console scripts
    do not put the current folder on ``sys.path``, and nothing here changes it)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        top = name.split(".")[0]
        if e.name != top:
            raise
        found = importlib.machinery.PathFinder.find_spec(top, [os.getcwd()])
        if found is None:
            raise
        module = importlib.util.module_from_spec(found)
        sys.modules[top] = module
        found.loader.exec_module(module)
        return importlib.import_module(name)


def _attr(obj, *names):
    for n in names:
        cur = obj
        for part in n.split("."):
            cur = getattr(cur, part, None)
            if cur is None:
                break
        if isinstance(cur, int) and not isinstance(cur, bool):
            return cur
    return None


def _tied(model: nn.Module) -> bool:
    seen, tied = set(), False
    for _, p in model.named_parameters(remove_duplicate=False):
        tied |= id(p) in seen
        seen.add(id(p))
    return tied


@functools.lru_cache(maxsize=8)
def describe(kind: str, ref: str) -> ExternalModelConfig:
    """Inspect the model once (on the meta device for ``hf``; one CPU build for a factory)."""
    if kind == "hf":
        from . import hf

        config = hf.read_config(ref)
        with torch.device("meta"):
            model = hf.build(ref, seed=0, weights=False)
        layers = hf.layers(model)
        pattern = hf.transposed_pattern(model)
    else:
        model, layers = _call_factory(ref)
        config, pattern = getattr(model, "config", None), getattr(model, "transposed_pattern",
                                                                  None)
    vocab = _attr(model, "vocab_size", "config.vocab_size")
    if vocab is None:
        raise ValueError(f"model.{kind}={ref!r}: the model states no vocabulary size (set "
                         "model.vocab_size or model.config.vocab_size)")
    seq = _attr(model, "max_seq_len", "config.max_position_embeddings", "config.n_positions")
    if not layers:
        raise ValueError(f"model.{kind}={ref!r} has no pipeline layers")
    params = sum(p.numel() for p in model.parameters())  # each shared tensor once
    return ExternalModelConfig(
        kind=kind, ref=ref, vocab_size=vocab, max_seq_len=seq or 10**9,
        n_layers=len(layers),
        blocks=_attr(model, "n_layers", "config.num_hidden_layers", "config.n_layer"),
        dim=_attr(model, "dim", "config.hidden_size", "config.n_embd"),
        tie_embeddings=_tied(model), params=params, transposed_pattern=pattern,
        is_moe=config is not None and bool(getattr(config, "num_local_experts", 0)))
