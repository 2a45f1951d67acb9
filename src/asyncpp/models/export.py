r"""Export a dense decoder as safetensors + ``config.json`` loadable by HF ``LlamaForCausalLM``.

Name map (ours → HF), identical tensors (same RoPE convention, so no permutation):

=====================================  ==============================================
``tok_embeddings.weight``              ``model.embed_tokens.weight``
``layers.i.attention.w{q,k,v,o}``      ``model.layers.i.self_attn.{q,k,v,o}_proj``
``layers.i.feed_forward.w{1,3,2}``     ``model.layers.i.mlp.{gate,up,down}_proj``
``layers.i.attention_norm``            ``model.layers.i.input_layernorm``
``layers.i.ffn_norm``                  ``model.layers.i.post_attention_layernorm``
``norm.weight``                        ``model.norm.weight``
``output.weight`` (untied only)        ``lm_head.weight``
=====================================  ==============================================
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from .config import ModelConfig
from .llama import Transformer

_LAYER_MAP = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our state dict under HF Llama names (see the table in the module docstring)."""
    cfg = model.config
    if cfg.is_moe:
        raise ValueError(
            f"model {cfg.name!r} is a mixture of experts; export to LlamaForCausalLM supports "
            "dense models only (save the checkpoint instead)"
        )
    if model.tok_embeddings is None or model.output is None or len(model.layers) != cfg.n_layers:
        raise ValueError("export needs the whole model, not a pipeline stage")
    out = {"model.embed_tokens.weight": model.tok_embeddings.weight}
    for i, blk in model.layers.items():
        for ours, p in blk.state_dict().items():
            out[f"model.layers.{i}.{_LAYER_MAP[ours]}"] = p
    out["model.norm.weight"] = model.norm.weight
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = model.output.weight
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in out.items()}


def hf_config(cfg: ModelConfig, bos_token_id: int | None = None,
              eos_token_id: int | None = None) -> dict:
    """``config.json`` of the equivalent ``LlamaForCausalLM``."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": cfg.init_std,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "torch_dtype": "float32",
        "use_cache": True,
    }


def tokenizer_config(tokenizer_file: str | os.PathLike, eos_token_id: int | None,
                     max_length: int) -> tuple[dict, dict]:
    """``tokenizer_config.json`` and ``special_tokens_map.json`` for ``tokenizer.json``, so
    that ``AutoTokenizer`` names the same end-of-text token as ``config.json``'s
    ``eos_token_id`` (and uses it as the beginning and padding token too: the model knows
    no other)."""
    from tokenizers import Tokenizer as HFTokenizer

    tok = HFTokenizer.from_file(str(tokenizer_file))
    eos = tok.id_to_token(eos_token_id) if eos_token_id is not None else None
    special = {"bos_token": eos, "eos_token": eos, "unk_token": eos, "pad_token": eos} \
        if eos is not None else {}
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
           "clean_up_tokenization_spaces": False, **special}
    return cfg, special


def export_hf(model: Transformer, out_dir: str | os.PathLike, *,
              tokenizer_file: str | os.PathLike | None = None,
              eos_token_id: int | None = None) -> Path:
    """Write ``model.safetensors`` + ``config.json`` (+ ``tokenizer.json``,
    ``tokenizer_config.json`` and ``special_tokens_map.json`` if a tokenizer is given) to
    ``out_dir``; ``LlamaForCausalLM.from_pretrained(out_dir)`` reproduces our logits and
    ``AutoTokenizer.from_pretrained(out_dir)`` our tokens. Files get mode 0666 less the
    umask (0644 under the usual 022)."""
    from safetensors.torch import save_file

    from ..data.cache import current_umask

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(hf_state_dict(model), str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = hf_config(model.config, eos_token_id, eos_token_id)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    written = ["model.safetensors", "config.json"]
    if tokenizer_file is not None:
        (out / "tokenizer.json").write_bytes(Path(tokenizer_file).read_bytes())
        tcfg, special = tokenizer_config(tokenizer_file, eos_token_id, model.config.max_seq_len)
        (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
        (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
        written += ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
    mode = 0o666 & ~current_umask()
    for name in written:
        os.chmod(out / name, mode)
    return out
