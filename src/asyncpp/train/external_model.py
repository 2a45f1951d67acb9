r"""The trainer's side of a model given by ``model.hf`` or ``model.factory``
(:mod:`asyncpp.models.external`): the whole model for one process, one stage for a torchrun
rank, the stage groups of the simulation, and the export.

Both backends split the same layer list with :func:`asyncpp.pipeline.partition` (balanced by
parameter counts), so the simulation's stage s updates exactly the parameters rank s holds. A
parameter two stages share (tied embedding and head) belongs to the first of them in the
simulation and is one copy per stage, gradients summed, under torchrun — as for asyncpp's
own models.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from ..models.external import ExternalModelConfig
from ..pipeline import StageModule, build_stage, partition


def full_model(mc: ExternalModelConfig, seed: int, device) -> StageModule:
    """The composition of all layers (one process): parameter names are the model's own."""
    _, layers = mc.build(seed)
    model = StageModule(layers).to(device)
    model.config = mc  # what the trainer reads (is_moe)
    return model


def stage_groups(mc: ExternalModelConfig, model: StageModule,
                 P: int) -> list[list[tuple[str, nn.Parameter]]]:
    """``(name, param)`` of each stage of ``model`` (from :func:`full_model`); a shared
    parameter once, on its first stage."""
    layers = [(n, model.get_submodule(n)) for n in model.layer_names]
    seen: set[int] = set()
    groups = []
    for rng in partition(layers, P):
        group = []
        for j in rng:
            name, mod = layers[j]
            for pname, p in mod.named_parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    group.append((f"{name}.{pname}", p))
        groups.append(group)
    return groups


def pipeline_stage(mc: ExternalModelConfig, seed: int, stage: int, P: int,
                   device) -> StageModule:
    """Stage ``stage`` of ``P`` (a torchrun rank): the whole model is built on the CPU under
    ``seed`` — the same weights on every rank and in the simulation — and this stage's
    layers kept and moved to ``device``."""
    _, layers = mc.build(seed)
    return build_stage(layers, stage, P).to(device)


HF_SNAPSHOT = "hf-config"
"""The run directory's copy of a ``model.hf`` folder's configuration files (no weights)."""


def snapshot_hf_config(folder: str | os.PathLike, run_dir: Path) -> Path:
    """Copy the model's ``config.json`` (and ``generation_config.json``) into the run
    directory, so that the run's model is rebuilt from what it trained, wherever the run is
    read from and whatever happens to the original folder."""
    import shutil

    dst = run_dir / HF_SNAPSHOT
    dst.mkdir(exist_ok=True)
    for name in ("config.json", "generation_config.json"):
        if (Path(folder) / name).is_file():
            shutil.copyfile(Path(folder) / name, dst / name)
    return dst


def rebased(cfg, run_dir: Path):
    """``cfg`` with ``model.hf`` pointing at the run's snapshot when it has one."""
    import dataclasses

    snap = run_dir / HF_SNAPSHOT
    if not cfg.model.hf or not (snap / "config.json").is_file():
        return cfg
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, hf=str(snap)))


def export(mc: ExternalModelConfig, state: dict, out_dir: str | os.PathLike, *,
           tokenizer_file=None, eos_token_id: int | None = None) -> Path:
    """Write the trained model to ``out_dir``: a Hugging Face folder
    (``save_pretrained``, loadable by ``AutoModelForCausalLM``) for ``model.hf`` or a factory
    model that is a ``PreTrainedModel``; otherwise ``model.safetensors`` (the state dict by
    the model's own names) and ``asyncpp_model.json`` naming the factory that rebuilds it.
    The run's tokenizer goes beside it, its end-of-text token in the model's config."""
    from ..data.cache import current_umask
    from ..models.export import tokenizer_config

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = mc.export_model(state)
    if hasattr(model, "save_pretrained"):
        if eos_token_id is not None:
            for key in ("eos_token_id", "bos_token_id"):
                setattr(model.config, key, eos_token_id)
            if getattr(model, "generation_config", None) is not None:
                model.generation_config.eos_token_id = eos_token_id
                model.generation_config.bos_token_id = eos_token_id
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one line per export, not a bar per shard
        model.save_pretrained(str(out), safe_serialization=True)
    else:
        from safetensors.torch import save_file

        tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(_untie(tensors), str(out / "model.safetensors"), metadata={"format": "pt"})
        (out / "asyncpp_model.json").write_text(json.dumps(
            {"factory": mc.ref, "load": "model, _ = factory(); model.load_state_dict("
             "safetensors.torch.load_file('model.safetensors'), strict=False)"}, indent=2) + "\n")
    if tokenizer_file is not None:
        (out / "tokenizer.json").write_bytes(Path(tokenizer_file).read_bytes())
        tcfg, special = tokenizer_config(tokenizer_file, eos_token_id, mc.max_seq_len
                                         if mc.max_seq_len < 10**9 else 2**31 - 1)
        (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
        (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    mode = 0o666 & ~current_umask()
    for f in out.iterdir():
        if f.is_file():
            os.chmod(f, mode)
    return out


def _untie(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses two names for one storage: keep the first name of a shared tensor."""
    seen, out = set(), {}
    for k, v in tensors.items():
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape))
        if key in seen:
            continue
        seen.add(key)
        out[k] = v
    return out
