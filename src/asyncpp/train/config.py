"""The run configuration: a frozen dataclass tree, read from TOML and dotted CLI overrides.

Precedence: dataclass defaults < TOML file (``--config``) < ``--section.key value`` overrides.
Every check happens in :func:`validate` — types, ranges, allowed values and impossible
combinations — before any tensor, file or process group exists; a failure is a
:class:`ConfigError` with one line naming the value and the fix. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from ..models.config import MODEL_CONFIGS, ModelConfig
from ..names import CORRECTIONS, FORMULATIONS, MUON_ADAMW_LR, MUON_NS_DTYPE, OPTIMIZERS
from ..pipeline.registry import ASYNC_SCHEDULES, CONFIG_SCHEDULES, get_spec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCHEDULES = CONFIG_SCHEDULES
PLACEMENTS = ("auto", "one-per-rank", "paired", "looped")
"""The values of ``pipeline.placement`` (:func:`resolve_placement`)."""
OPTIMIZER_NAMES = OPTIMIZERS
__all__ = ["ASYNC_SCHEDULES", "SCHEDULES", "OPTIMIZER_NAMES"]  # re-exported for callers


class ConfigError(ValueError):
    """A user error in the configuration (the CLI prints it on one line and exits with 2)."""


def opt(default, help: str, *, choices=None, lo=None, hi=None, lo_open=False):
    """A config field with its help text and the bounds :func:`validate` enforces."""
    return field(default=default, metadata={"help": help, "choices": choices, "lo": lo,
                                            "hi": hi, "lo_open": lo_open})


@dataclass(frozen=True)
class RunSection:
    name: str = opt("run", "run name; the run directory defaults to runs/<name>")
    dir: str = opt("", "run directory; empty = runs/<name>")
    seed: int = opt(0, "seed of the initialisation and the data order", lo=0)
    device: str = opt("auto", "auto, cpu, cuda or cuda:N")
    precision: str = opt("fp32", "fp32, or bf16 (autocast; GPU)", choices=("fp32", "bf16"))
    compile: bool = opt(False, "torch.compile the model (GPU)")
    threads: int = opt(0, "CPU threads for torch (0 = torch's default)", lo=0)
    flush_denormal: bool = opt(False, "CPU: flush subnormal floats to zero while the run trains "
                               "(torch.set_flush_denormal; IEEE behaviour restored after). A "
                               "long CPU run slows by an order of magnitude once softmax tails "
                               "or optimizer moments reach the subnormal range (below 1.2e-38 "
                               "in float32); flushed, such values are 0. Off: IEEE arithmetic")
    overwrite: bool = opt(False, "delete the previous run's outputs in run.dir")
    peak_tflops: float = opt(0.0, "peak TFLOP/s of one device for the MFU (0 = from the device "
                             "name: 989 for H100/H200 bf16; none known on CPU)", lo=0.0)
    peer_timeout_s: float = opt(300.0, "torchrun: seconds a rank waits for a silent peer before "
                                "every rank stops with an error naming it", lo=0.0, lo_open=True)
    checkpoint_timeout_s: float = opt(1800.0, "torchrun: seconds a rank waits for the others "
                                      "to finish writing their checkpoint shards (a slow "
                                      "network file system) before every rank stops with an "
                                      "error naming the step", lo=0.0, lo_open=True)


@dataclass(frozen=True)
class ModelSection:
    name: str = opt("tiny", "named shape: " + ", ".join(MODEL_CONFIGS),
                    choices=tuple(MODEL_CONFIGS))
    vocab_size: int | None = opt(None, "override the vocabulary size", lo=1)
    dim: int | None = opt(None, "override the width", lo=1)
    n_layers: int | None = opt(None, "override the number of layers", lo=1)
    n_heads: int | None = opt(None, "override the number of attention heads", lo=1)
    n_kv_heads: int | None = opt(None, "override the number of key/value heads", lo=1)
    ffn_dim: int | None = opt(None, "override the SwiGLU width", lo=1)
    max_seq_len: int | None = opt(None, "override the longest sequence accepted", lo=1)
    rope_theta: float | None = opt(None, "override the RoPE base", lo=0, lo_open=True)
    norm_eps: float | None = opt(None, "override the RMSNorm epsilon", lo=0, lo_open=True)
    tie_embeddings: bool | None = opt(None, "override embedding/head tying")
    init_std: float | None = opt(None, "override the init standard deviation", lo=0,
                                 lo_open=True)
    n_experts: int | None = opt(None, "override the experts per MoE layer (0 = dense)", lo=0)
    top_k: int | None = opt(None, "override the experts per token", lo=1)
    moe_ffn_dim: int | None = opt(None, "override the expert width", lo=0)
    aux_loss_coef: float | None = opt(None, "override the load-balancing weight", lo=0)
    hf: str = opt("", "a Hugging Face causal LM folder with a config.json (GPT-2 or the Llama "
                  "family; its weights if present, else initialised under run.seed; nothing "
                  "is downloaded) instead of a named shape")
    factory: str = opt("", "package.module:function returning your nn.Module with "
                       "pipeline_layers(), or (model, layers), instead of a named shape")

    @property
    def external(self) -> tuple[str, str] | None:
        """``("hf", path)`` or ``("factory", spec)`` when the model is not asyncpp's own."""
        if self.hf:
            return "hf", self.hf
        if self.factory:
            return "factory", self.factory
        return None


@dataclass(frozen=True)
class DataSection:
    source: str = opt("bible", "bible (embedded KJV), files, hf or shards",
                      choices=("bible", "files", "hf", "shards"))
    path: str = opt("", "files/shards: a file, folder or glob (.txt/.md/.jsonl/.parquet/.bin)")
    val_path: str = opt("", "shards: validation shards (default: tail of the last shard)")
    text_field: str = opt("text", "jsonl/parquet/hf: the field holding the text")
    hf_name: str = opt("", "hf: dataset name, e.g. roneneldan/TinyStories")
    hf_config: str = opt("", "hf: dataset configuration")
    hf_split: str = opt("train", "hf: split to read")
    max_documents: int = opt(0, "use only the first N documents (0 = all)", lo=0)
    tokenizer: str = opt("bpe", "bpe (train a byte-level BPE on the data) or a tokenizer.json path")
    vocab_size: int = opt(0, "vocabulary of the trained BPE (0 = model.vocab_size)", lo=0)
    seq_len: int = opt(128, "tokens per training sequence", lo=1)
    val_fraction: float = opt(0.02, "held-out fraction for validation", lo=0.0, hi=0.5)
    shard_dtype: str = opt("auto", "token dtype of headerless shards",
                           choices=("auto", "uint16", "uint32"))
    cache_dir: str = opt("", "tokenizer/token cache (default: $ASYNCPP_CACHE or ~/.cache/asyncpp)")


@dataclass(frozen=True)
class TrainSection:
    steps: int = opt(200, "optimizer steps of the whole run", lo=1)
    batch_size: int = opt(16, "sequences per optimizer step (all microbatches)", lo=1)
    warmup_frac: float = opt(0.1, "linear warmup, as a fraction of train.steps", lo=0.0, hi=1.0)
    min_lr_ratio: float = opt(0.1, "cosine decays to this fraction of the peak lr", lo=0.0,
                              hi=1.0)
    grad_clip: float = opt(1.0, "clip the gradient norm to this (0 = off)", lo=0.0)
    clip_scope: str = opt("global", "global (norm over all stages) or stage (each stage alone)",
                          choices=("global", "stage"))
    eval_every: int = opt(50, "validate every N steps (0 = only at the end)", lo=0)
    eval_batches: int = opt(8, "validation batches of train.batch_size sequences", lo=1)
    val_sample: str = opt("spread", "validation set during training: spread (a fixed sample "
                          "over the whole split, every source in proportion) or prefix (the "
                          "split's first windows, in order)", choices=("spread", "prefix"))
    final_eval: str = opt("full", "the final validation: full (every window of the split) or "
                          "sample (the set of train.val_sample)", choices=("full", "sample"))
    log_every: int = opt(10, "fetch loss and gradient norm from the device every N steps "
                         "(metrics.jsonl still gets every step); non-finite values stop the "
                         "run within N steps (+ the pipeline depth under torchrun)", lo=1)
    checkpoint_every: int = opt(0, "checkpoint every N steps (0 = only at the end)", lo=0)
    keep_checkpoints: int = opt(2, "checkpoints kept on disk", lo=1)
    stop_after: int = opt(0, "stop this invocation after N steps with a checkpoint (0 = never)",
                          lo=0)
    on_nonfinite: str = opt("stop", "non-finite loss/gradient: stop or skip the step",
                            choices=("stop", "skip"))
    export: bool = opt(False, "write export/ (safetensors + config.json for LlamaForCausalLM)")


@dataclass(frozen=True)
class OptimizerSection:
    name: str = opt("adamw", "one of " + ", ".join(OPTIMIZER_NAMES), choices=OPTIMIZER_NAMES)
    lr: float = opt(3e-3, "peak learning rate (Muon: of the matrix parameters)", lo=0.0)
    weight_decay: float = opt(0.0, "decoupled weight decay", lo=0.0)
    beta1: float = opt(0.9, "first-moment coefficient (AdamW-type)", lo=0.0, hi=0.9999)
    beta2: float = opt(0.95, "second-moment coefficient (AdamW-type)", lo=0.0, hi=0.99999)
    eps: float = opt(1e-8, "denominator epsilon (AdamW-type)", lo=0.0, lo_open=True)
    momentum: float = opt(0.95, "Muon momentum", lo=0.0, hi=0.9999)
    nesterov: bool = opt(True, "Muon Nesterov momentum")
    ns_steps: int = opt(5, "Muon Newton-Schulz iterations", lo=0, hi=99)
    ns_dtype: str = opt(MUON_NS_DTYPE,
                        "Newton-Schulz precision (auto: bfloat16 on GPU, float32 on CPU)",
                        choices=("auto", "bfloat16", "float32", "float64", "native"))
    adjust_lr_fn: str = opt("original", "Muon shape rule", choices=("original",
                                                                    "match_rms_adamw", "none"))
    adamw_lr: float = opt(MUON_ADAMW_LR,
                          "Muon: peak lr of the AdamW side (embeddings, head, norms)", lo=0.0)
    adamw_weight_decay: float = opt(0.0, "Muon: weight decay of the AdamW side", lo=0.0)
    adan_beta2: float = opt(0.92, "Adan: gradient-difference EMA coefficient and weight, torch "
                            "convention (Alg. 1 of the paper writes 1 - this: 0.08). Adan's beta1 "
                            "is optimizer.beta1 (default 0.9, the AdamW value; Adan's reference "
                            "default is 0.98)", lo=0.0, hi=0.9999)
    adan_beta3: float = opt(0.99, "Adan: second-moment EMA coefficient, torch convention (the "
                            "paper's Alg. 1: 0.01)", lo=0.0, hi=0.9999)
    soap_max_precondition_dim: int = opt(
        10000, "SOAP: a tensor side longer than this keeps the identity basis (Adam on that "
        "side; SOAP's own default 10000, under which GPT-2's 50,257-token vocabulary side is "
        "one-sided)", lo=1)
    shard: str = opt("auto", "Muon under data parallelism: shard momentum and Newton-Schulz "
                     "across replicas (ZeRO-1, DistributedMuon): auto (on when dp > 1), on, off",
                     choices=("auto", "on", "off"))


@dataclass(frozen=True)
class DelaySection:
    correction: str = opt("none", "none, ef (error feedback), taylor or nesterov (delay-aware "
                          "Nesterov look-ahead, Ajanthan et al. 2025)", choices=CORRECTIONS)
    ef_gamma: str = opt("1", "EF(γ): each step applies (1+γ)·uₙ − γ·uₙ₋₁ for the update uₙ; "
                        "a number γ ≥ 0 (1 = the paper's EF, 0 = none, tau = γ equal to the "
                        "delay) or auto: T3's γ*(β, τ) per stage (β = momentum, or β₁ for "
                        "Adam-type optimizers, a heuristic there)")
    taylor_lambda: float = opt(0.1, "lambda of the Taylor (DC-ASGD) correction", lo=0.0)
    nesterov_beta: str = opt("auto", "nesterov: β of the look-ahead θ = x + c·(x − x′) from the "
                             "previous weights x′, c = β + β² + … (τ + 1 terms, τ the stage's "
                             "delay); auto (the optimizer's momentum, or β₁ for Adam-type "
                             "optimizers) or a number in [0, 1)")
    sync_start: int = opt(0, "first N steps synchronous", lo=0)
    sync_cooldown: int = opt(0, "last N steps synchronous", lo=0)
    formulation: str = opt("gradient", "gradient (what the pipeline realises) or update",
                           choices=FORMULATIONS)
    track_updates: bool = opt(False, "log the update norm ‖uₙ‖ and drift ‖uₙ − uₙ₋₁‖ per step "
                              "(metrics.jsonl) and their mean ratio (summary.json); costs one "
                              "parameter-sized buffer")
    spectral_drift: bool = opt(False, "with track_updates, also log T2's drift in its own norm "
                               "per step: δ = the largest over matrices of the spectral norm "
                               "‖uₙ/lrₙ − uₙ₋₁/lrₙ₋₁‖ (metrics.jsonl: spectral_drift; "
                               "summary.json: its mean); one SVD per matrix per update, one "
                               "process only")


@dataclass(frozen=True)
class PipelineSection:
    schedule: str = opt("none", "none, gpipe, 1f1b, zb-h1, zb-v (synchronous) or pipedream, "
                        "2bw, wpipe (async; wpipe: even stages = partitions, under torchrun "
                        "two per rank on P/2 ranks, see pipeline.placement)",
                        choices=SCHEDULES)
    stages: int = opt(1, "pipeline stages P", lo=1)
    microbatches: int = opt(1, "microbatches m per step (divides train.batch_size)", lo=1)
    placement: str = opt("auto", "torchrun: which stages each rank runs. one-per-rank (world = "
                         "dp·P); paired (P/2 ranks, two stages each: wpipe's d and P/2+d, "
                         "zb-v's d and P-1-d); looped (stage s on rank s mod world, P a "
                         "multiple of the world size); auto: one-per-rank if the world size is "
                         "a multiple of P, else paired for wpipe/zb-v on P/2 ranks, else looped",
                         choices=PLACEMENTS)
    simulate: bool = opt(False, "run the schedule's delays in one process (DelayedOptimizer)")


@dataclass(frozen=True)
class LogSection:
    progress: bool = opt(True, "progress bar with ETA on stderr")
    tensorboard: str = opt("auto", "TensorBoard events: auto (if installed), on, off",
                           choices=("auto", "on", "off"))
    plot: bool = opt(True, "write loss.png into the run directory at the end")
    wandb: str = opt("", "Weights & Biases project to log every step's record to (needs the "
                     "wandb extra; empty: off)")


@dataclass(frozen=True)
class Config:
    run: RunSection = field(default_factory=RunSection)
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    train: TrainSection = field(default_factory=TrainSection)
    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    delay: DelaySection = field(default_factory=DelaySection)
    pipeline: PipelineSection = field(default_factory=PipelineSection)
    log: LogSection = field(default_factory=LogSection)

    # -- derived --------------------------------------------------------------------------
    def model_config(self) -> ModelConfig:
        """The resolved model shape: the named config with this section's overrides, or the
        description of a model given by ``model.hf`` / ``model.factory``
        (``asyncpp.models.external.ExternalModelConfig``)."""
        over = {f.name: getattr(self.model, f.name) for f in dataclasses.fields(self.model)
                if f.name not in ("name", *EXTERNAL) and getattr(self.model, f.name) is not None}
        ext = self.model.external
        if ext is not None:
            if self.model.hf and self.model.factory:
                raise ConfigError("model.hf and model.factory both name a model; give one")
            if over:
                raise ConfigError(f"model.{next(iter(over))} overrides a named shape, but the "
                                  f"model comes from model.{ext[0]}={ext[1]!r}; change the "
                                  "model itself (its config.json, or your factory)")
            from ..models.external import describe

            try:
                return describe(*ext)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        try:
            return MODEL_CONFIGS[self.model.name].replace(**over)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir or os.path.join("runs", self.run.name))

    @property
    def is_async(self) -> bool:
        return self.schedule_spec.asynchronous

    @property
    def schedule_spec(self):
        """The :class:`asyncpp.pipeline.ScheduleSpec` of ``pipeline.schedule``."""
        return get_spec(self.pipeline.schedule)

    def stage_delays(self) -> list[int]:
        """Delay τₛ of each stage s: 2bw 1, pipedream P−1−s, synchronous schedules 0."""
        return self.schedule_spec.stage_delays(self.pipeline.stages)

    def to_dict(self) -> dict:
        """Plain nested dict; ``None`` fields (model overrides not given) are left out."""
        return {s.name: {k: v for k, v in dataclasses.asdict(getattr(self, s.name)).items()
                         if v is not None} for s in dataclasses.fields(self)}

    def resolved(self) -> Config:
        """A copy whose model section spells out every field of the resolved shape."""
        if self.model.external is not None:
            return self
        mc = self.model_config()
        vals = {f.name: getattr(mc, f.name) for f in dataclasses.fields(ModelSection)
                if f.name not in ("name", *EXTERNAL)}
        return dataclasses.replace(self, model=ModelSection(name=self.model.name, **vals))


EXTERNAL = ("hf", "factory")
"""The model-section fields that name a model asyncpp did not define."""

SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(Config)}


# -- parsing ------------------------------------------------------------------------------------
def _field_types(cls) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _base_type(tp):
    """``int | None`` → (int, True); ``int`` → (int, False)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return tp, False


def _type_name(tp) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[tp]


NUMBER_OR_WORD = {"delay.ef_gamma", "delay.nesterov_beta"}
"""String fields that also take a TOML number (kept as its text)."""


def _coerce(key: str, value, tp):
    """Check a TOML value against the field type (ints are accepted for floats)."""
    base, optional = _base_type(tp)
    if value is None and optional:
        return None
    if key in NUMBER_OR_WORD and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = repr(float(value))
    ok = (isinstance(value, bool) if base is bool else
          isinstance(value, int) and not isinstance(value, bool) if base is int else
          isinstance(value, (int, float)) and not isinstance(value, bool) if base is float else
          isinstance(value, str))
    if not ok:
        raise ConfigError(f"{key} must be {_type_name(base)}, got {_show(value)}")
    if base is float:
        try:
            return float(value)
        except OverflowError:
            raise ConfigError(f"{key} must be a finite number, got {_show(value)}") from None
    return value


def parse_cli_value(key: str, text: str, tp):
    """A CLI string converted to the field's type."""
    base, optional = _base_type(tp)
    t = text.strip()
    if base is bool:
        low = t.lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
    elif base is int:
        try:
            return int(t)
        except ValueError:
            pass
    elif base is float:
        try:
            return float(t)
        except ValueError:
            pass
    else:
        return text
    raise ConfigError(f"--{key} must be {_type_name(base)}, got {text!r}")


def _show(value) -> str:
    """``repr`` for messages: at most 60 characters, and safe for huge integers."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<an integer of {value.bit_length()} bits>"
    try:
        r = repr(value)
    except ValueError:  # an integer too long to print, nested in a list or table
        r = f"<a {type(value).__name__}>"
    return r if len(r) <= 60 else r[:57] + "..."


def _unknown(key: str, allowed) -> ConfigError:
    near = difflib.get_close_matches(key.split(".")[-1], list(allowed), n=1)
    hint = f"; did you mean {near[0]!r}?" if near else f"; allowed: {', '.join(allowed)}"
    return ConfigError(f"unknown config key {key!r}{hint}")


def from_dict(d: dict) -> Config:
    """Build a :class:`Config` from a nested dict (TOML layout), rejecting unknown keys and
    values of the wrong type."""
    if not isinstance(d, dict):
        raise ConfigError("a config is a table of sections ([run], [model], ...)")
    sections = {}
    for sname, body in d.items():
        if sname not in SECTIONS:
            raise _unknown(sname, SECTIONS)
        if not isinstance(body, dict):
            raise ConfigError(f"[{sname}] must be a table of keys, got {_show(body)}")
        cls = SECTIONS[sname]
        hints = _field_types(cls)
        vals = {}
        for k, v in body.items():
            if k not in hints:
                raise _unknown(f"{sname}.{k}", hints)
            vals[k] = _coerce(f"{sname}.{k}", v, hints[k])
        sections[sname] = cls(**vals)
    return Config(**sections)


def merge(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` (both nested two levels) applied."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for k, v in overrides.items():
        if k in out and not isinstance(out[k], dict) and k in SECTIONS:
            raise ConfigError(f"[{k}] must be a table of keys, got {_show(out[k])}; write it as a "
                              f"[{k}] section")
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k].update(v)
        else:
            out[k] = v
    return out


def parse_overrides(pairs: list[tuple[str, str]]) -> dict:
    """``[("optimizer.name", "muon"), ...]`` → nested dict with typed values."""
    out: dict[str, dict] = {}
    for key, text in pairs:
        parts = key.split(".")
        if len(parts) != 2 or parts[0] not in SECTIONS:
            raise _unknown(key, [f"{s}.<key>" for s in SECTIONS])
        sec, k = parts
        hints = _field_types(SECTIONS[sec])
        if k not in hints:
            raise _unknown(key, hints)
        out.setdefault(sec, {})[k] = parse_cli_value(key, text, hints[k])
    return out


def read_toml(path: str | os.PathLike) -> dict:
    """The TOML file at ``path`` as a dict (clear errors for missing/malformed files)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; check --config")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text") from None
    except ValueError as e:  # TOMLDecodeError, or an integer literal of > 4300 digits
        first = (str(e).splitlines() or [type(e).__name__])[0][:120]
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {first}") from None


def load_config(path: str | None = None, overrides: list[tuple[str, str]] | None = None
                ) -> Config:
    """Defaults < TOML at ``path`` < ``overrides``; validated (raises :class:`ConfigError`)."""
    d = read_toml(path) if path else {}
    cfg = from_dict(merge(d, parse_overrides(overrides or [])))
    validate(cfg)
    return cfg


# -- validation ---------------------------------------------------------------------------------
def _check_field(key: str, value, meta) -> None:
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key} must be a finite number, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        raise ConfigError(f"{key}={_show(value)} is out of range; it must be below 2**63")
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{key}={_show(value)} is not allowed; choose one of "
                          f"{', '.join(choices)}")
    lo, hi = meta.get("lo"), meta.get("hi")
    if lo is not None and (value <= lo if meta.get("lo_open") else value < lo):
        op = ">" if meta.get("lo_open") else ">="
        raise ConfigError(f"{key}={_show(value)} is out of range; it must be {op} {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{key}={_show(value)} is out of range; it must be <= {hi}")


def validate(cfg: Config, world_size: int | None = None) -> None:
    """Every check of a configuration, in one place (raises :class:`ConfigError`)."""
    for s in dataclasses.fields(cfg):
        sec = getattr(cfg, s.name)
        for f in dataclasses.fields(sec):
            _check_field(f"{s.name}.{f.name}", getattr(sec, f.name), f.metadata)
    mc = cfg.model_config()
    r, d, t, o, dl, p = cfg.run, cfg.data, cfg.train, cfg.optimizer, cfg.delay, cfg.pipeline
    dev = r.device
    if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
        raise ConfigError(f"run.device={dev!r} is not allowed; use auto, cpu, cuda or cuda:N")
    if not r.name or "/" in r.name or r.name in (".", ".."):
        raise ConfigError(f"run.name={r.name!r} must be a plain non-empty name; use run.dir for "
                          "a path")
    ext = cfg.model.external
    fix = f"in model.{ext[0]}'s model" if ext else "with --model.{}"
    if d.seq_len > mc.max_seq_len:
        raise ConfigError(f"data.seq_len={d.seq_len} exceeds model.max_seq_len="
                          f"{mc.max_seq_len}; lower data.seq_len or raise it "
                          + fix.format("max_seq_len"))
    if d.vocab_size and d.vocab_size > mc.vocab_size:
        raise ConfigError(f"data.vocab_size={d.vocab_size} exceeds model.vocab_size="
                          f"{mc.vocab_size}; lower data.vocab_size or set it "
                          + fix.format("vocab_size"))
    if d.tokenizer == "bpe" and d.source != "shards" and (d.vocab_size or mc.vocab_size) < 258:
        raise ConfigError(f"a byte-level BPE needs a vocabulary of at least 258, got "
                          f"{d.vocab_size or mc.vocab_size}; raise data.vocab_size")
    if d.source in ("files", "shards") and not d.path:
        raise ConfigError(f"data.source={d.source!r} needs data.path (a file, folder or glob)")
    if d.source == "hf" and not d.hf_name:
        raise ConfigError("data.source='hf' needs data.hf_name (e.g. roneneldan/TinyStories)")
    if d.path and d.source not in ("files", "shards"):
        # otherwise the run would silently train on data.source's corpus instead
        raise ConfigError(f"data.path={d.path!r} is read only with data.source files or "
                          f"shards, but data.source={d.source!r}; add --data.source files")
    if t.batch_size % p.microbatches:
        raise ConfigError(f"train.batch_size={t.batch_size} is not divisible by "
                          f"pipeline.microbatches={p.microbatches}; make it a multiple")
    if p.stages > mc.n_layers:
        raise ConfigError(f"pipeline.stages={p.stages} exceeds the model's {mc.n_layers} layers; "
                          f"use at most {mc.n_layers} stages or a deeper model")
    spec = cfg.schedule_spec
    if not spec.needs_pipeline and p.stages > 1:
        raise ConfigError(f"pipeline.stages={p.stages} needs a pipeline schedule; set "
                          "--pipeline.schedule gpipe, 1f1b, zb-h1, pipedream, 2bw or wpipe (or "
                          "stages 1)")
    bad = spec.stages_error(p.stages)
    if bad:
        raise ConfigError(f"pipeline.schedule={p.schedule!r}: {bad}; set --pipeline.stages "
                          f"{p.stages + 1}")
    need = spec.min_microbatches(p.stages)
    if p.microbatches < need:
        raise ConfigError(f"pipeline.schedule={p.schedule!r} on {p.stages} stages needs "
                          f"pipeline.microbatches >= {need}, got {p.microbatches}; set "
                          f"--pipeline.microbatches {need}")
    # EF alone, without a delay (a synchronous schedule, in one process): the control that tells
    # what the extrapolation does to the optimizer from what it corrects of the delay
    ef_alone = not cfg.is_async and dl.correction == "ef"
    if ef_alone and dl.ef_gamma == "auto":
        raise ConfigError("delay.ef_gamma=auto picks T3's γ*(β, τ) for a delay τ ≥ 1 (it is 0, "
                          "no EF, without a delay); with a synchronous schedule give γ as a "
                          "number, e.g. --delay.ef_gamma 1")
    if ef_alone and world_size is not None and world_size > 1:
        raise ConfigError("delay.correction='ef' with a synchronous schedule (EF without a "
                          "delay) runs in one process; launch it without torchrun, or choose "
                          "--pipeline.schedule 2bw for EF on a delayed pipeline")
    if not cfg.is_async:
        checks = [("sync_start", dl.sync_start, 0), ("sync_cooldown", dl.sync_cooldown, 0)]
        if not ef_alone:
            checks.insert(0, ("correction", dl.correction, "none"))
        for key, val, default in checks:
            if val != default:
                raise ConfigError(
                    f"delay.{key}={val!r} needs an asynchronous schedule but pipeline.schedule="
                    f"{p.schedule!r} has no delay; set --pipeline.schedule 2bw (or pipedream), "
                    f"or --delay.{key} {default}")
    if p.stages > 1:
        if (dl.sync_start or dl.sync_cooldown) and not spec.sync_windows:
            raise ConfigError("delay.sync_start / delay.sync_cooldown are supported with "
                              "pipeline.schedule='2bw' (and trivially gpipe/1f1b), not "
                              f"{p.schedule}; set them to 0 or use --pipeline.schedule 2bw")
        if mc.tie_embeddings and not spec.tied_weights:
            first = spec.stage_delay(p.stages, 0)
            # two reasons a schedule refuses a tie: the two ends update at different delays
            # (PipeDream), or it runs the two ends as two stages of one device (ZB-V's V)
            why = (f"gives the first and last stage different delays ({first} and 0)"
                   if first else "runs the first and last stage as two stages of one device")
            raise ConfigError(
                f"pipeline.schedule={p.schedule!r} {why}, so the tied embedding/head of model "
                f"{mc.name!r} cannot be updated consistently; set "
                + ("tie_word_embeddings false in its config" if ext else
                   "--model.tie_embeddings false") + " or use --pipeline.schedule 2bw")
    if o.shard == "on" and o.name != "muon":
        raise ConfigError(f"optimizer.shard='on' shards Muon only, not {o.name!r}; use "
                          "--optimizer.shard auto")
    if dl.ef_gamma != "auto":
        try:
            g = float(dl.ef_gamma)
        except ValueError:
            g = float("nan")
        if not (math.isfinite(g) and g >= 0):
            raise ConfigError(f"delay.ef_gamma={dl.ef_gamma!r} must be a number >= 0 or auto")
        if g != 1 and dl.correction != "ef":
            raise ConfigError(f"delay.ef_gamma={dl.ef_gamma} applies to --delay.correction ef, "
                              f"not {dl.correction!r}; set the correction or leave ef_gamma at 1")
    elif dl.correction != "ef":
        raise ConfigError("delay.ef_gamma=auto applies to --delay.correction ef; set it")
    if dl.nesterov_beta != "auto":
        try:
            nb = float(dl.nesterov_beta)
        except ValueError:
            nb = float("nan")
        if not (math.isfinite(nb) and 0 <= nb < 1):
            raise ConfigError(f"delay.nesterov_beta={dl.nesterov_beta!r} must be a number in "
                              "[0, 1) or auto")
        if dl.correction != "nesterov":
            raise ConfigError(f"delay.nesterov_beta={dl.nesterov_beta} applies to "
                              f"--delay.correction nesterov, not {dl.correction!r}; set the "
                              "correction or leave nesterov_beta at auto")
    if dl.correction == "taylor" and dl.formulation != "gradient":
        raise ConfigError("delay.correction='taylor' modifies the stale gradient and needs "
                          "delay.formulation='gradient'")
    if dl.sync_start + dl.sync_cooldown > t.steps:
        raise ConfigError(f"delay.sync_start + delay.sync_cooldown = "
                          f"{dl.sync_start + dl.sync_cooldown} exceeds train.steps={t.steps}")
    if o.name == "muon" and mc.n_layers < 1:  # pragma: no cover - n_layers >= 1 is enforced
        raise ConfigError("optimizer 'muon' needs hidden matrices")
    if r.precision == "bf16" and dev == "cpu" and r.compile:
        raise ConfigError("run.compile with bf16 autocast on CPU is not supported; use a GPU "
                          "or --run.compile false")
    if world_size is not None and world_size > 1 and p.schedule == "none" and not p.simulate:
        raise ConfigError(f"pipeline.schedule='none' trains in one process, but torchrun "
                          f"launched {world_size}; choose a pipeline schedule (e.g. "
                          f"--pipeline.schedule 1f1b --pipeline.stages {world_size}) or run "
                          "without torchrun")
    if world_size is not None and world_size > 1 and p.schedule != "none" and not p.simulate:
        resolve_placement(cfg, world_size)  # raises ConfigError for a placement that cannot work
    if dl.spectral_drift and not dl.track_updates:
        raise ConfigError("delay.spectral_drift reads the updates delay.track_updates records; "
                          "set --delay.track_updates true")
    if dl.spectral_drift and world_size is not None and world_size > 1:
        raise ConfigError("delay.spectral_drift needs every stage in one process (its maximum "
                          "runs over all stages' matrices); use pipeline.simulate=true")
    if p.simulate and world_size is not None and world_size > 1:
        raise ConfigError("--simulate runs the pipeline in one process; launch without torchrun")


# -- placement under torchrun ---------------------------------------------------------------------
@dataclass(frozen=True)
class Placement:
    """Which stages each rank of one pipeline runs under ``torchrun``: ``ranks[r]`` are the
    stages of pipeline rank r; ``dp`` pipelines (data-parallel replicas) fill the world. The
    name is ``one-per-rank`` whenever every rank runs one stage (a looped placement on P ranks
    is one)."""

    name: str
    ranks: tuple[tuple[int, ...], ...]
    dp: int

    @property
    def several_per_rank(self) -> bool:
        return any(len(d) > 1 for d in self.ranks)


def _placement_fix(P: int, world: int) -> str:
    divisors = [w for w in range(2, P) if P % w == 0]
    several = (f", or {' or '.join(map(str, divisors))} processes for several stages per rank "
               "(--pipeline.placement looped)") if divisors else ""
    return f"launch a multiple of {P} processes (one stage per rank){several}"


def resolve_placement(cfg: Config, world: int) -> Placement:
    r"""The :class:`Placement` of ``pipeline.placement`` for a torchrun world of ``world``
    ranks, or :class:`ConfigError` naming why it cannot work and what to launch instead:

    - ``one-per-rank``: world = dp·P, rank r runs stage r mod P of replica r div P;
    - ``paired`` (wpipe, zb-v; world = P/2): rank d runs WPipe's partitions d and P/2 + d, or
      ZB-V's stages d and P − 1 − d (the schedule's own placement,
      :func:`asyncpp.pipeline.default_devices`);
    - ``looped`` (P a multiple of world = R): rank d runs stages d, d + R, d + 2R, …
      (:func:`asyncpp.pipeline.looped_devices`);
    - ``auto``: one-per-rank if world mod P = 0, else paired for wpipe/zb-v on P/2 ranks,
      else looped if P mod world = 0.

    Several stages per rank hold no weight tied between the first and the last stage and clip
    each stage by its own norm (``train.clip_scope = stage``): a global norm would join the
    updates of stages the schedule keeps apart on one rank."""
    p, spec = cfg.pipeline, cfg.schedule_spec
    P, name = p.stages, p.placement
    pairs = spec.grouped or spec.v_shaped
    if name == "auto":
        name = ("one-per-rank" if world % P == 0 else
                "paired" if pairs and 2 * world == P else
                "looped" if P % world == 0 else None)
        if name is None:
            raise ConfigError(f"the world size {world} is not divisible by pipeline.stages="
                              f"{P}, nor is {P} a multiple of it; " + _placement_fix(P, world))
    if name == "one-per-rank":
        if world % P:
            raise ConfigError(f"the world size {world} is not divisible by pipeline.stages={P} "
                              f"(pipeline.placement={p.placement}); " + _placement_fix(P, world))
        return Placement("one-per-rank", tuple((s,) for s in range(P)), world // P)
    if name == "paired":
        if not pairs:
            raise ConfigError(f"pipeline.placement='paired' places the stages two per rank as "
                              f"wpipe and zb-v do, but pipeline.schedule={p.schedule!r} has no "
                              "such pairing; use --pipeline.placement looped (or auto)")
        if 2 * world != P:
            n = P // 2
            raise ConfigError(f"pipeline.placement='paired' runs the {P} stages two per rank "
                              f"on {n} rank{'s' * (n != 1)}, but torchrun launched {world}; "
                              f"launch {n} process{'es' * (n != 1)}")
        ranks = tuple((d, P // 2 + d) if spec.grouped else (d, P - 1 - d)
                      for d in range(P // 2))
    else:  # looped
        if P % world:
            raise ConfigError(f"pipeline.placement='looped' puts stage s on rank s mod {world}, "
                              f"so pipeline.stages={P} must be a multiple of the world size "
                              f"{world}; launch a divisor of {P} processes")
        ranks = tuple(tuple(range(d, P, world)) for d in range(world))
    placed = Placement(name, ranks, 1)
    if not placed.several_per_rank:
        return Placement("one-per-rank", ranks, 1)
    where = f"{P} stages on {world} ranks (pipeline.placement={name})"
    if cfg.model_config().tie_embeddings:
        ext = cfg.model.external
        raise ConfigError(f"{where} cannot hold the embedding/head tied between the first and "
                          "the last stage; set " + ("tie_word_embeddings false in its config"
                                                    if ext else "--model.tie_embeddings false"))
    if cfg.train.grad_clip > 0 and cfg.train.clip_scope == "global":
        raise ConfigError(f"{where} must clip each stage by its own gradient norm (a global norm "
                          "would join updates the schedule keeps apart on one rank); set "
                          "--train.clip_scope stage or --train.grad_clip 0")
    return placed


# -- writing ------------------------------------------------------------------------------------
def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(v, ensure_ascii=False)


def to_toml(cfg: Config) -> str:
    """The configuration as TOML (``load_config`` of it gives back an equal ``Config``)."""
    lines = []
    for sname, body in cfg.to_dict().items():
        lines.append(f"[{sname}]")
        for k, v in body.items():
            lines.append(f"{k} = {_toml_value(v)}")
        lines.append("")
    return "\n".join(lines)


def field_help() -> dict[str, list[tuple]]:
    """Per section: (key, default, type name, help, choices) of every field — for ``--help``."""
    out = {}
    for sname, cls in SECTIONS.items():
        hints = _field_types(cls)
        rows = []
        for f in dataclasses.fields(cls):
            base, _ = _base_type(hints[f.name])
            rows.append((f.name, f.default, base.__name__, f.metadata.get("help", ""),
                         f.metadata.get("choices")))
        out[sname] = rows
    return out


def rank_differences(per_rank: list[dict]) -> list[str]:
    """One line per configuration key whose value differs across ranks, naming each rank's
    value: ``run.dir: rank 0 has 'a', rank 1 has 'b'`` (ranks with equal values grouped,
    ``ranks 0, 2 have 'a'``; a key missing on a rank shows as ``(unset)``). ``per_rank[r]`` is
    rank r's ``Config.to_dict()``; keys are ``section.key`` in sorted order."""
    flat = [{f"{s}.{k}": v for s, body in d.items() for k, v in body.items()} for d in per_rank]
    keys = sorted(set().union(*flat)) if flat else []
    missing = object()
    lines = []
    for key in keys:
        values = [f.get(key, missing) for f in flat]
        if all(v == values[0] for v in values):
            continue
        groups: dict[str, list[int]] = {}
        for r, v in enumerate(values):
            groups.setdefault("(unset)" if v is missing else repr(v), []).append(r)
        parts = [(f"rank {rs[0]} has" if len(rs) == 1 else
                  f"ranks {', '.join(map(str, rs))} have") + f" {shown}"
                 for shown, rs in groups.items()]
        lines.append(f"{key}: {', '.join(parts)}")
    return lines
