r"""Hugging Face causal LMs as pipeline layers: GPT-2 and the Llama family (Llama, Mistral,
Qwen2/3 — a ``model.{embed_tokens, layers, norm, rotary_emb}`` + ``lm_head`` layout).

The model is the composition of its layers, each applied to the previous one's output
(:mod:`asyncpp.pipeline.stages`); between two layers — and two stages — travels the tuple
:math:`(h, p)` of hidden states and position ids :math:`p = (0, 1, \dots, T-1)`:

- GPT-2: ``transformer.wte``: tokens ↦ :math:`(E_{\text{tok}}[x], p)`; ``transformer.wpe``:
  :math:`(h, p) ↦ (h + E_{\text{pos}}[p], p)`; ``transformer.drop``; ``transformer.h.i``:
  :math:`(h, p) ↦ (\mathrm{block}_i(h; M), p)`; ``transformer.ln_f``: :math:`(h, p) ↦
  \mathrm{LN}(h)`; ``lm_head``: :math:`h ↦ hW^\top`.
- Llama family: ``model.embed_tokens``; ``model.layers.i``: :math:`(h, p) ↦
  (\mathrm{layer}_i(h; M, \cos p\theta, \sin p\theta), p)`; ``model.norm``; ``lm_head``.

:math:`M` is the causal mask the model itself would build (``create_causal_mask`` for its
attention implementation: None under SDPA's causal path), recomputed in each layer from
:math:`h` and :math:`p` rather than sent, and the rotary tables likewise, so only :math:`(h,
p)` crosses a stage boundary. Every layer keeps its Hugging Face name, so a stage's parameter
names are the model's own and the merged weights load into the model class unchanged: the
composition's logits equal the model's ``forward(input_ids).logits`` (tested, float64).

Each layer is the model's own module with its class swapped for a subclass whose ``forward``
takes and returns the tuple (:func:`_adapt`): the composition owns those module objects, so
the original model object must not be called afterwards (:func:`load` builds a fresh one to
export). Nothing is downloaded: ``path`` is a local folder with a ``config.json``, and weights
(``model.safetensors`` / ``pytorch_model.bin``) are read when present, else the model is
initialised by its own ``_init_weights`` under the run's seed.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import torch
from torch import Tensor, nn

FAMILIES = ("gpt2", "llama family (llama, mistral, qwen2, qwen3, …)")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ValueError("model.hf needs transformers: pip install 'asyncpp[hf]'") from None
    return transformers


def read_config(path: str | os.PathLike):
    """The model's ``PretrainedConfig`` from ``path/config.json`` (local only)."""
    p = Path(path)
    if not (p / "config.json").is_file():
        raise ValueError(f"model.hf={str(path)!r} is not a folder holding a config.json "
                         "(a Hugging Face model folder; nothing is downloaded)")
    tf = _transformers()
    try:
        return tf.AutoConfig.from_pretrained(str(p), local_files_only=True)
    except (ValueError, OSError, KeyError) as e:
        raise ValueError(f"model.hf={str(path)!r}: its config.json cannot be read by "
                         f"transformers: {e}") from None


def has_weights(path: str | os.PathLike) -> bool:
    return any((Path(path) / f).is_file() for f in WEIGHT_FILES)


def build(path: str | os.PathLike, *, seed: int, weights: bool = True,
          dtype: torch.dtype = torch.float32):
    """A fresh model of ``path`` (its weights if the folder holds them and ``weights``, else
    initialised under ``seed``), in ``dtype``, eval-mode dropout off."""
    tf = _transformers()
    config = read_config(path)
    if weights and has_weights(path):
        model = tf.AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                        dtype=dtype)
    else:
        torch.manual_seed(seed)
        model = tf.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model


def family(model) -> str:
    if hasattr(model, "transformer") and hasattr(model.transformer, "wte") \
            and hasattr(model.transformer, "h"):
        return "gpt2"
    inner = getattr(model, "model", None)
    if inner is not None and all(hasattr(inner, a) for a in
                                 ("embed_tokens", "layers", "norm", "rotary_emb")) \
            and hasattr(model, "lm_head"):
        return "llama"
    raise ValueError(f"model.hf: {type(model).__name__} is not a supported family; supported: "
                     f"{', '.join(FAMILIES)} (for another model, write a model.factory)")


def layers(model) -> list[tuple[str, nn.Module]]:
    """The model as pipeline layers (module docstring); adapts the model's modules in place."""
    cfg = model.config
    if family(model) == "gpt2":
        t = model.transformer
        out = [("transformer.wte", _adapt(t.wte, _token_embedding)),
               ("transformer.wpe", _adapt(t.wpe, _position_embedding)),
               ("transformer.drop", _adapt(t.drop, _pass_h))]
        out += [(f"transformer.h.{i}", _adapt(b, _gpt2_block, config=cfg))
                for i, b in enumerate(t.h)]
        out += [("transformer.ln_f", _adapt(t.ln_f, _final_norm)), ("lm_head", model.lm_head)]
        return out
    m = model.model
    out = [("model.embed_tokens", _adapt(m.embed_tokens, _token_embedding))]
    out += [(f"model.layers.{i}", _adapt(layer, _llama_layer, config=cfg, rotary=m.rotary_emb))
            for i, layer in enumerate(m.layers[:cfg.num_hidden_layers])]
    out += [("model.norm", _adapt(m.norm, _final_norm)), ("lm_head", model.lm_head)]
    return out


def transposed_pattern(model) -> str | None:
    """GPT-2 stores its attention and MLP matrices ``(in, out)`` (``Conv1D``): Muon's shape
    rule must read them transposed."""
    return r"\.(c_attn|c_proj|c_fc)\.weight$" if family(model) == "gpt2" else None


# -- the adapted forwards ------------------------------------------------------------------------
def _adapt(module: nn.Module, forward, **extra) -> nn.Module:
    """Swap ``module``'s class for a subclass whose ``forward`` is ``forward``; ``extra``
    objects are kept as plain attributes (not sub-modules: they own no parameters)."""
    base = type(module)
    module.__class__ = type(f"Pipelined{base.__name__}", (base,), {
        "forward": forward, "_asyncpp_base": base})
    for k, v in extra.items():
        object.__setattr__(module, f"_asyncpp_{k}", v)
    return module


def _base_forward(self, *args, **kwargs):
    return self._asyncpp_base.forward(self, *args, **kwargs)


def _token_embedding(self, tokens: Tensor):
    pos = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
    return _base_forward(self, tokens), pos


def _position_embedding(self, h: Tensor, pos: Tensor):
    return h + _base_forward(self, pos).to(h.dtype), pos


def _pass_h(self, h: Tensor, pos: Tensor):
    return _base_forward(self, h), pos


def _final_norm(self, h: Tensor, pos: Tensor) -> Tensor:
    return _base_forward(self, h)


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _gpt2_block(self, h: Tensor, pos: Tensor):
    mask = causal_mask(self._asyncpp_config, h, pos)
    return _first(_base_forward(self, h, None, mask, position_ids=pos)), pos


def _llama_layer(self, h: Tensor, pos: Tensor):
    rotary = self._asyncpp_rotary
    if rotary.inv_freq.device != h.device:
        rotary.to(h.device)  # not part of any stage: it follows the hidden states
    cos_sin = rotary(h, pos)
    mask = causal_mask(self._asyncpp_config, h, pos)
    out = _base_forward(self, h, attention_mask=mask, position_ids=pos,
                        position_embeddings=cos_sin)
    return _first(out), pos


_MASK_ARGS: dict = {}


def causal_mask(config, h: Tensor, pos: Tensor):
    """The mask the model builds for a fresh causal pass over ``h`` (no cache, no padding)."""
    from transformers.masking_utils import create_causal_mask

    if not _MASK_ARGS:
        _MASK_ARGS["params"] = set(inspect.signature(create_causal_mask).parameters)
    params = _MASK_ARGS["params"]
    kw = dict(config=config, attention_mask=None, position_ids=pos)
    kw["inputs_embeds" if "inputs_embeds" in params else "input_embeds"] = h
    if "cache" in params:
        kw["cache"] = None
    else:  # transformers 4.5x
        kw["past_key_values"] = None
        kw["cache_position"] = torch.arange(h.shape[1], device=h.device)
    return create_causal_mask(**kw)
