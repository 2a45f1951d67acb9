r"""A LLaMA-style decoder whose forward tolerates missing pieces (torchtitan style).

Block :math:`\ell` (pre-norm, no biases):

.. math::
    h &= x + W_o\,\mathrm{Attn}\big(\mathrm{RoPE}(W_q n),\ \mathrm{RoPE}(W_k n),\ W_v n\big),
        \quad n = \mathrm{RMSNorm}(x)\\
    y &= h + W_2\big(\mathrm{silu}(W_1 m) \odot W_3 m\big), \quad m = \mathrm{RMSNorm}(h)

with :math:`\mathrm{RMSNorm}(x) = w \odot x / \sqrt{\mathrm{mean}(x^2) + \epsilon}`, causal
grouped-query attention through ``F.scaled_dot_product_attention`` and RoPE in the
"rotate-half" convention of HF ``LlamaForCausalLM`` (so export needs no weight permutation).
Every block is a function of the hidden state alone (the RoPE tables are recomputed in each
attention call — :math:`O(Td)` work, negligible next to the matmuls), so the model is a plain
composition of modules (:meth:`~asyncpp.models.Transformer.pipeline_layers`).

Pipeline splitting is a module-dict operation: ``layers`` is an ``nn.ModuleDict`` keyed by the
*global* layer index, and ``tok_embeddings`` / ``norm`` / ``output`` may be ``None``. A stage
without an embedding takes hidden states as input; a stage without an output head returns
hidden states. Parameter names (``tok_embeddings.*``, ``output.*``) let
``build_optimizer('muon', ...)`` route the embedding and head to AdamW.
"""

from __future__ import annotations

import math
import zlib

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig
from .moe import MoE


class RMSNorm(nn.Module):
    r""":math:`y = w \odot x / \sqrt{\mathrm{mean}(x^2) + \epsilon}` (computed in float32)."""

    def __init__(self, dim: int, eps: float = 1e-5, device=None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device))

    def forward(self, x: Tensor) -> Tensor:
        r""":math:`x / \sqrt{\mathrm{mean}(x^2) + \epsilon} \odot w`, computed in fp32, returned in
        the dtype of ``x``."""
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).type_as(x)


def rope_tables(head_dim: int, max_seq_len: int, theta: float,
                device=None) -> tuple[Tensor, Tensor]:
    r"""cos/sin tables of shape (T, d): :math:`\omega_i = \theta^{-2i/d}`, angle :math:`t\omega_i`,
    each frequency repeated for both halves (rotate-half convention)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device)
                           / head_dim))
    t = torch.arange(max_seq_len, dtype=torch.float32, device=device)
    freqs = torch.outer(t, inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    r"""RoPE on (B, T, H, d): :math:`x\cos + \mathrm{rot}(x)\sin`, :math:`\mathrm{rot}(a, b) =
    (-b, a)` over the two halves of the head dimension."""
    T = x.shape[1]
    c = cos[:T].view(1, T, 1, -1)
    s = sin[:T].view(1, T, 1, -1)
    x1, x2 = x.chunk(2, dim=-1)
    rot = torch.cat([-x2, x1], dim=-1)
    return (x.float() * c + rot.float() * s).type_as(x)


class Attention(nn.Module):
    """Causal grouped-query attention with RoPE (``wq``, ``wk``, ``wv``, ``wo``; no biases)."""

    def __init__(self, cfg: ModelConfig, device=None) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.rope_theta = cfg.rope_theta
        kv = cfg.n_kv_heads * cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False, device=device)
        self.wk = nn.Linear(cfg.dim, kv, bias=False, device=device)
        self.wv = nn.Linear(cfg.dim, kv, bias=False, device=device)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False, device=device)

    def forward(self, x: Tensor) -> Tensor:
        """Causal grouped-query self-attention with RoPE over ``x`` of shape (B, T, dim)."""
        B, T, _ = x.shape
        cos, sin = rope_tables(self.head_dim, T, self.rope_theta, device=x.device)
        q = apply_rope(self.wq(x).view(B, T, self.n_heads, self.head_dim), cos, sin)
        k = apply_rope(self.wk(x).view(B, T, self.n_kv_heads, self.head_dim), cos, sin)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.n_kv_heads != self.n_heads
        )
        return self.wo(out.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    r"""SwiGLU: :math:`W_2(\mathrm{silu}(W_1 x) \odot W_3 x)`."""

    def __init__(self, dim: int, hidden: int, device=None) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False, device=device)
        self.w2 = nn.Linear(hidden, dim, bias=False, device=device)
        self.w3 = nn.Linear(dim, hidden, bias=False, device=device)

    def forward(self, x: Tensor) -> Tensor:
        r"""SwiGLU: :math:`W_2(\mathrm{silu}(W_1 x) \odot W_3 x)`."""
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm transformer block; the MLP is dense SwiGLU or a mixture of experts."""

    def __init__(self, cfg: ModelConfig, device=None) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps, device=device)
        self.attention = Attention(cfg, device=device)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps, device=device)
        if cfg.is_moe:
            self.feed_forward = MoE(cfg.dim, cfg.expert_dim, cfg.n_experts, cfg.top_k,
                                    cfg.aux_loss_coef, device=device)
        else:
            self.feed_forward = FeedForward(cfg.dim, cfg.ffn_dim, device=device)

    def forward(self, x: Tensor) -> Tensor:
        """Pre-norm block: attention, then the feed-forward (dense or MoE), each residual."""
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """LLaMA-style decoder; any of ``tok_embeddings``, ``norm``, ``output`` may be ``None`` and
    ``layers`` may hold any subset of the blocks (keyed by global index, run in key order).

    ``forward(x)``: ``x`` is (B, T) token ids when ``tok_embeddings`` is present, else (B, T, D)
    hidden states; returns (B, T, V) logits when ``output`` is present, else hidden states.
    """

    def __init__(self, cfg: ModelConfig, device=None) -> None:
        super().__init__()
        self.config = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim, device=device)
        self.layers = nn.ModuleDict({str(i): Block(cfg, device=device)
                                     for i in range(cfg.n_layers)})
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps, device=device)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False, device=device)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def forward(self, x: Tensor) -> Tensor:
        """Logits (B, T, vocab) for token ids ``x`` (B, T); a pipeline stage whose embedding,
        final norm or head was removed passes hidden states through instead."""
        if x.shape[1] > self.config.max_seq_len:
            raise ValueError(
                f"sequence length {x.shape[1]} exceeds model.max_seq_len="
                f"{self.config.max_seq_len}; raise max_seq_len or shorten data.seq_len"
            )
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h

    # -- initialisation ------------------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        r"""Deterministic init, independent of which pieces this module still holds: each
        parameter draws from its own generator seeded by ``crc32(f"{seed}:{name}")``, so a
        pipeline stage initialises its layers exactly as the whole model would.

        Linear/embedding weights :math:`\sim\mathcal N(0, \sigma^2)`; the residual projections
        (``wo``, ``w2``) use :math:`\sigma/\sqrt{2L}`; norms are 1.
        A model built on the ``meta`` device works after ``to_empty`` + this call.
        """
        cfg = self.config
        seen = set()
        for name, p in self.named_parameters(remove_duplicate=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if cfg.tie_embeddings and name == "output.weight":
                name = "tok_embeddings.weight"
            if p.ndim == 1:
                p.fill_(1.0)
                continue
            std = cfg.init_std
            if name.endswith(("attention.wo.weight", "w2.weight", "experts.w2")):
                std = std / math.sqrt(2 * cfg.n_layers)
            gen = torch.Generator(device=p.device)
            gen.manual_seed(zlib.crc32(f"{seed}:{name}".encode()))
            p.normal_(0.0, std, generator=gen)

    def pipeline_layers(self) -> list[tuple[str, nn.Module]]:
        """The model as an ordered composition ``name → module`` with ``forward(x)`` each:
        ``[tok_embeddings, layers.i…, norm, output]`` (pieces that are ``None`` omitted). Names
        are the full model's, so ``asyncpp.pipeline.stages.build_stages`` can split it and a
        stage's ``state_dict`` keys match the whole model's."""
        out: list[tuple[str, nn.Module]] = []
        if self.tok_embeddings is not None:
            out.append(("tok_embeddings", self.tok_embeddings))
        out += [(f"layers.{k}", blk) for k, blk in self.layers.items()]
        if self.norm is not None:
            out.append(("norm", self.norm))
        if self.output is not None:
            out.append(("output", self.output))
        return out

    # -- helpers for the training loop ----------------------------------------------------------
    def aux_loss(self) -> Tensor | None:
        """Sum of the load-balancing losses of this module's MoE layers from the last forward
        (already weighted by ``aux_loss_coef``; for logging — the gradient is attached inside
        the forward, see :class:`~asyncpp.models.moe.MoE`)."""
        vals = [blk.feed_forward.last_aux_loss for blk in self.layers.values()
                if isinstance(blk.feed_forward, MoE) and blk.feed_forward.last_aux_loss is not None]
        return torch.stack(vals).sum() if vals else None

    def set_aux_loss_scale(self, scale: float) -> None:
        """Scale of the load-balancing gradient (1/microbatches under gradient accumulation)."""
        for blk in self.layers.values():
            if isinstance(blk.feed_forward, MoE):
                blk.feed_forward.aux_loss_scale = float(scale)

    def num_params(self) -> int:
        """Distinct parameters held by this module (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())


def build_model(cfg: ModelConfig | str, *, device=None, seed: int = 0) -> Transformer:
    """Build and initialise a decoder from a :class:`ModelConfig` or a named config.

    On ``device="meta"`` nothing is allocated or initialised (shape inspection, parameter
    counts, pipeline planning); call ``to_empty(device=...)`` and :meth:`Transformer.init_weights`
    to materialise.
    """
    if isinstance(cfg, str):
        from .config import get_model_config

        cfg = get_model_config(cfg)
    model = Transformer(cfg, device=device)
    if str(device) != "meta":
        model.init_weights(seed)
    return model
