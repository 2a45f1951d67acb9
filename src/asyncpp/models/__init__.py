"""LLaMA-style dense and MoE decoders, named shapes, pipeline partitioning and HF export.

Names are loaded lazily so that ``asyncpp.models.config`` (shapes only) can be used without
importing torch (the CLI validates a configuration before anything heavy is loaded).
"""

from __future__ import annotations

import importlib

from .config import MODEL_CONFIGS, ModelConfig, get_model_config

_LAZY = {
    "MoE": "moe",
    "RMSNorm": "llama",
    "Transformer": "llama",
    "apply_rope": "llama",
    "build_model": "llama",
    "rope_tables": "llama",
    "export_hf": "export",
    "hf_config": "export",
    "hf_state_dict": "export",
    "partition_layers": "partition",
    "pipeline_boundaries": "partition",
    "split_stage": "partition",
    "stage_named_parameters": "partition",
    "stage_of_parameter": "partition",
}

__all__ = ["MODEL_CONFIGS", "ModelConfig", "get_model_config", *sorted(_LAZY)]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
