r"""Model shapes: one frozen dataclass and the named configurations.

Parameter count of the dense decoder (no biases), with :math:`V` vocabulary, :math:`D` width,
:math:`L` layers, :math:`H` heads of size :math:`d = D/H`, :math:`H_{kv}` key/value heads and
:math:`F` the SwiGLU width:

.. math::
    N = V D\,(2 - [\text{tied}]) + L\big(2D^2 + 2 D H_{kv} d + 3 D F + 2D\big) + D.

An MoE layer replaces :math:`3DF` by :math:`E\cdot 3 D F_e + D E` (E experts of width
:math:`F_e` plus the router); only :math:`k` of the E experts run per token, so the *active*
count uses :math:`k\cdot 3 D F_e`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a LLaMA-style decoder (dense when ``n_experts == 0``, MoE otherwise).

    Attributes:
        name: the named configuration this came from (informational).
        vocab_size: rows of the embedding / output matrix.
        dim: residual-stream width D.
        n_layers: transformer blocks L.
        n_heads: query heads H (head size D/H).
        n_kv_heads: key/value heads (grouped-query attention); divides ``n_heads``.
        ffn_dim: SwiGLU hidden width F of the dense MLP.
        max_seq_len: longest sequence the model accepts (HF ``max_position_embeddings``).
        rope_theta: RoPE base.
        norm_eps: RMSNorm epsilon.
        tie_embeddings: share the embedding and output matrices.
        init_std: standard deviation of the normal initialisation.
        n_experts: experts per MoE layer (0 = dense model).
        top_k: experts each token is routed to.
        moe_ffn_dim: hidden width of one expert (0 = ``ffn_dim``).
        aux_loss_coef: weight of the load-balancing loss.
    """

    name: str = "custom"
    vocab_size: int = 512
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_dim: int = 192
    max_seq_len: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    init_std: float = 0.02
    n_experts: int = 0
    top_k: int = 2
    moe_ffn_dim: int = 0
    aux_loss_coef: float = 0.01

    def __post_init__(self) -> None:
        self.validate()

    # -- derived ------------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        """The width of one attention head, ``dim // n_heads``."""
        return self.dim // self.n_heads

    @property
    def is_moe(self) -> bool:
        """Whether the feed-forward layers are mixtures of experts (``n_experts > 0``)."""
        return self.n_experts > 0

    @property
    def expert_dim(self) -> int:
        """SwiGLU width of one expert (``moe_ffn_dim``, else ``ffn_dim``)."""
        return self.moe_ffn_dim or self.ffn_dim

    def replace(self, **changes) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first inconsistent field and how to fix it."""
        for f in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim",
                  "max_seq_len"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"model.{f} must be a positive integer, got {v!r}")
        if self.dim % self.n_heads:
            raise ValueError(
                f"model.dim={self.dim} is not divisible by model.n_heads={self.n_heads}; "
                "choose n_heads dividing dim"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"head size dim/n_heads = {self.head_dim} must be even for RoPE; "
                "change model.dim or model.n_heads"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"model.n_heads={self.n_heads} is not divisible by model.n_kv_heads="
                f"{self.n_kv_heads}; choose n_kv_heads dividing n_heads"
            )
        if not (self.rope_theta > 0 and self.norm_eps > 0 and self.init_std > 0):
            raise ValueError("model.rope_theta, model.norm_eps and model.init_std must be > 0")
        if self.n_experts < 0 or self.moe_ffn_dim < 0:
            raise ValueError("model.n_experts and model.moe_ffn_dim must be >= 0")
        if self.n_experts and not (1 <= self.top_k <= self.n_experts):
            raise ValueError(
                f"model.top_k={self.top_k} must lie in [1, n_experts={self.n_experts}]"
            )
        if self.aux_loss_coef < 0:
            raise ValueError(f"model.aux_loss_coef must be >= 0, got {self.aux_loss_coef!r}")

    # -- parameter counts (closed form; tests compare with the built module) --------------------
    def num_params(self, active: bool = False) -> int:
        """Parameter count from the formula in the module docstring (``active``: per token)."""
        D, L, V = self.dim, self.n_layers, self.vocab_size
        kv = self.n_kv_heads * self.head_dim
        attn = 2 * D * D + 2 * D * kv
        if self.is_moe:
            n_run = self.top_k if active else self.n_experts
            mlp = n_run * 3 * D * self.expert_dim + D * self.n_experts
        else:
            mlp = 3 * D * self.ffn_dim
        emb = V * D * (1 if self.tie_embeddings else 2)
        return emb + L * (attn + mlp + 2 * D) + D


def _named() -> dict[str, ModelConfig]:
    c = {}
    # < 1M parameters: unit tests and smoke runs.
    c["tiny"] = ModelConfig(name="tiny", vocab_size=512, dim=64, n_layers=2, n_heads=4,
                            n_kv_heads=2, ffn_dim=192, max_seq_len=256)
    # A few million parameters: CPU experiments and `make demo`.
    c["small"] = ModelConfig(name="small", vocab_size=4096, dim=256, n_layers=4, n_heads=4,
                             n_kv_heads=2, ffn_dim=704, max_seq_len=512)
    # SmolLM2 shapes (PAPER.md): 134.5M and 361.8M parameters with tied embeddings.
    c["smollm-135m"] = ModelConfig(name="smollm-135m", vocab_size=49152, dim=576, n_layers=30,
                                   n_heads=9, n_kv_heads=3, ffn_dim=1536, max_seq_len=2048,
                                   rope_theta=100000.0, init_std=0.041666)
    c["smollm-360m"] = ModelConfig(name="smollm-360m", vocab_size=49152, dim=960, n_layers=32,
                                   n_heads=15, n_kv_heads=5, ffn_dim=2560, max_seq_len=2048,
                                   rope_theta=100000.0, init_std=0.02)
    # MoE: every block's MLP is a top-k mixture of SwiGLU experts.
    c["moe-tiny"] = ModelConfig(name="moe-tiny", vocab_size=512, dim=64, n_layers=2, n_heads=4,
                                n_kv_heads=2, ffn_dim=192, max_seq_len=256, n_experts=4,
                                top_k=2, moe_ffn_dim=96)
    # ≈10B total / ≈1.6B active (OLMoE-style fine-grained experts: 64 experts of width 1024,
    # top-8, on a 2048-wide, 24-layer trunk with GQA 16/4 and a tied 49152 vocabulary).
    # Experts dominate: 24 · 64 · 3 · 2048 · 1024 = 9.66B of the 10.0B.
    c["moe-10b"] = ModelConfig(name="moe-10b", vocab_size=49152, dim=2048, n_layers=24,
                               n_heads=16, n_kv_heads=4, ffn_dim=5632, max_seq_len=4096,
                               rope_theta=100000.0, n_experts=64, top_k=8, moe_ffn_dim=1024)
    return c


MODEL_CONFIGS: dict[str, ModelConfig] = _named()


def get_model_config(name: str, **overrides) -> ModelConfig:
    """The named configuration ``name`` with some fields overridden."""
    if name not in MODEL_CONFIGS:
        raise ValueError(
            f"unknown model {name!r}; choose one of {', '.join(MODEL_CONFIGS)}"
        )
    cfg = MODEL_CONFIGS[name]
    return cfg.replace(**overrides) if overrides else cfg
