r"""The building blocks of a training run that do not depend on how steps are executed:
device, optimizer and learning-rate schedule, loss, evaluation, model FLOPs, run-directory
preparation and the resume check. The trainer (:mod:`asyncpp.train.trainer`) and both of its
step backends use them.

Learning rate of step :math:`t`: :math:`\eta_t = \eta_\text{peak}\, f(t)` on every
parameter group (Muon's matrix groups with ``optimizer.lr``, its AdamW side with
``optimizer.adamw_lr``), with linear warmup over :math:`W` steps and cosine decay to
:math:`r = ` ``min_lr_ratio``:

.. math::
    f(t) = \begin{cases} (t+1)/W & t < W\\
    r + (1-r)\,\tfrac12\big(1 + \cos(\pi\,(t-W)/(T-W))\big) & t \ge W\end{cases}
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import resource
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data import DataBundle, Source, ValBatch, load_data, validation_plan
from ..delay import DelayedOptimizer
from ..optim import build_optimizer
from . import checkpoint as ckpt_io
from .config import Config, ConfigError, from_dict
from .layouts import Layout, change_error, checkpoint_layout, resume_note
from .metrics import tensorboard_available
from .restarts import MARKER

log = logging.getLogger(__name__)

# Config fields that may differ between a checkpoint and the run resuming it.
RESUME_FREE = {
    "run": {"name", "dir", "device", "compile", "overwrite", "threads", "peak_tflops",
            "peer_timeout_s", "checkpoint_timeout_s"},
    "data": {"cache_dir"},
    "train": {"eval_every", "eval_batches", "log_every", "checkpoint_every", "keep_checkpoints",
              "stop_after", "export", "val_sample", "final_eval"},
    # a change of layout is checked by asyncpp.train.layouts.change_error instead
    "pipeline": {"simulate", "stages", "microbatches"},
    "log": {"progress", "tensorboard", "plot", "wandb"},
}

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0, "L40S": 362.0,
               "B200": 2250.0, "GH200": 989.0}
"""Dense bf16 peak TFLOP/s by device-name fragment (the MFU's denominator, when
``run.peak_tflops`` is 0)."""


class TrainingError(RuntimeError):
    """The run cannot continue (non-finite loss, ...); the message names the step."""


# -- building blocks (also for the multi-process executor) ----------------------------------------
def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA if available, else CPU; a CUDA request without CUDA is a ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"run.device={name!r} but CUDA is not available; use --run.device cpu")
    return dev


def optimizer_hparams(cfg: Config, device: torch.device) -> dict:
    """Keyword arguments of :func:`asyncpp.optim.build_optimizer` for ``cfg.optimizer``."""
    o = cfg.optimizer
    if o.name == "muon":
        ns = o.ns_dtype if o.ns_dtype != "auto" else (
            "bfloat16" if device.type == "cuda" else "float32")
        return dict(lr=o.lr, momentum=o.momentum, nesterov=o.nesterov,
                    weight_decay=o.weight_decay, ns_steps=o.ns_steps, ns_dtype=ns,
                    adjust_lr_fn=o.adjust_lr_fn, adamw_lr=o.adamw_lr,
                    adamw_betas=(o.beta1, o.beta2), adamw_eps=o.eps,
                    adamw_weight_decay=o.adamw_weight_decay)
    if o.name == "adamw":
        return dict(lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay)
    if o.name == "adan":
        # torch convention (β₁, β₂, β₃); the reference implementation's defaults are
        # (0.98, 0.92, 0.99): ``--optimizer.beta1 0.98`` gives them exactly.
        return dict(lr=o.lr, weight_decay=o.weight_decay, momentum=o.beta1,
                    betas=(o.beta1, o.adan_beta2, o.adan_beta3))
    if o.name == "soap":
        return dict(lr=o.lr, weight_decay=o.weight_decay, momentum=o.beta1,
                    max_precondition_dim=o.soap_max_precondition_dim)
    # Lion, MARS: β1 through "momentum", the other betas at their defaults.
    return dict(lr=o.lr, weight_decay=o.weight_decay, momentum=o.beta1)


def build_stage_optimizer(cfg: Config, named_params, stage: int,
                          device: torch.device, dp_group=None) -> DelayedOptimizer:
    """The optimizer of pipeline stage ``stage`` over its ``(name, param)`` pairs, wrapped in a
    :class:`DelayedOptimizer` with the stage's delay τₛ and the configured correction. With
    ``dp_group`` (the stage's data-parallel replicas) and Muon with ``optimizer.shard`` on or
    auto, the Muon side is a :class:`~asyncpp.optim.DistributedMuon` (ZeRO-1: each replica
    keeps the momentum of, and orthogonalises, its share of the matrices)."""
    hp = optimizer_hparams(cfg, device)
    flipped = getattr(cfg.model_config(), "transposed_pattern", None)
    if cfg.optimizer.name == "muon" and flipped:  # GPT-2's Conv1D matrices are (in, out)
        if dp_group is not None and cfg.optimizer.shard != "off":
            raise ConfigError("optimizer.shard does not handle transposed (Conv1D) matrices; "
                              "set --optimizer.shard off for this model")
        hp = {**hp, "transposed_pattern": flipped}
    opt = build_optimizer(cfg.optimizer.name, named_params, **hp)
    if dp_group is not None and cfg.optimizer.name == "muon" and cfg.optimizer.shard != "off":
        from ..optim import DistributedMuon

        groups = [{"params": g["params"], "use_muon": g["use_muon"]} for g in opt.param_groups]
        opt = DistributedMuon(groups, process_group=dp_group, **hp)
    d = cfg.delay
    gamma = d.ef_gamma if d.ef_gamma == "auto" else float(d.ef_gamma)
    return DelayedOptimizer(opt, delay=cfg.stage_delays()[stage], correction=d.correction,
                            **({"ef_gamma": gamma} if d.correction == "ef" else {}),
                            **({"nesterov_beta": d.nesterov_beta if d.nesterov_beta == "auto"
                                else float(d.nesterov_beta)}
                               if d.correction == "nesterov" else {}),
                            taylor_lambda=d.taylor_lambda, sync_start=d.sync_start,
                            sync_cooldown=d.sync_cooldown, total_steps=cfg.train.steps,
                            formulation=d.formulation, track_updates=d.track_updates,
                            # EF on a synchronous schedule (one process): the τ = 0 control
                            ef_without_delay=d.correction == "ef" and not cfg.is_async)


def lr_factor(step: int, total: int, warmup_frac: float, min_ratio: float) -> float:
    """f(t) of the module docstring (step is 0-based)."""
    W = round(warmup_frac * total)
    if W and step < W:
        return (step + 1) / W
    progress = min(1.0, (step - W) / max(1, total - W))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def apply_lr(optimizer: torch.optim.Optimizer, cfg: Config, factor: float) -> None:
    r"""Set :math:`\eta_t` on every group: Muon groups ``lr``, Muon's AdamW groups
    ``adamw_lr``, other optimizers' groups ``lr`` — each its own peak times ``factor``."""
    o = cfg.optimizer
    for g in optimizer.param_groups:
        if "use_muon" in g and not g["use_muon"]:
            g["adamw_lr"] = o.adamw_lr * factor
        else:
            g["lr"] = o.lr * factor


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    r"""Mean next-token cross-entropy :math:`-\frac{1}{BT}\sum \log p(y_{b,t}\mid x_{b,\le t})`
    (computed in float32)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


@dataclasses.dataclass(frozen=True)
class Evaluation:
    r"""One validation: the loss over the split and per source.

    With sources :math:`s` holding :math:`W_s` of the split's windows and mean losses
    :math:`L_s` over the evaluated windows of each,

    .. math::
        L = \sum_s \frac{W_s}{\sum_r W_r}\, L_s ,

    i.e. every source counts in proportion to its share of the validation split, whatever the
    sample drew (the mean over every window when the whole split is read)."""

    loss: float
    by_source: dict[str, float]
    by_kind: dict[str, float]
    windows: int  # windows evaluated
    tokens: int  # tokens scored (windows × seq_len)
    full: bool  # the whole split was read
    # with ``full``: the loss of the sample the run validated on before, on the same weights
    # (sample − full measures the sample's error)
    sample_loss: float | None = None


def data_provenance(data: DataBundle) -> dict:
    """The identity of a run's data for ``summary.json``: the tokenizer file and its sha256,
    the corpus manifest's sha256 (shards built by ``asyncpp-corpus``), and the sizes of both
    splits (training windows: what an epoch reads)."""
    from ..data.corpus_build import sha256_file

    def sha(path):
        return sha256_file(Path(path)) if path is not None and Path(path).is_file() else None

    out = {"description": data.description,
           "tokenizer_file": str(data.tokenizer_file) if data.tokenizer_file else None,
           "tokenizer_sha256": sha(data.tokenizer_file),
           "manifest_sha256": sha(data.manifest),
           "manifest_content_sha256": _manifest_content_sha256(data.manifest),
           "corpus_id": _corpus_id(data.manifest),
           "train_tokens": data.train.num_tokens,
           "train_windows": data.train.num_windows}
    if data.val is not None:
        out.update(val_tokens=data.val.num_tokens, val_windows=data.val.num_windows,
                   val_sources={s.name: [s.kind, s.num_windows] for s in data.val_sources or []})
    return out


def _manifest_content_sha256(manifest: Path | None) -> str | None:
    """sha256 of the corpus manifest's canonical JSON without its build record (``built_utc``,
    ``build_s``, ``command``): equal for every rebuild of the same corpus, unlike the file's
    own hash (``manifest_sha256``), which changes with the build time."""
    if manifest is None:
        return None
    import hashlib
    import json

    body = {k: v for k, v in json.loads(Path(manifest).read_text()).items()
            if k not in ("built_utc", "build_s", "command")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _corpus_id(manifest: Path | None) -> str | None:
    """The corpus id of ``asyncpp-corpus`` (a hash of the shards' sha256s: the same for every
    byte-identical rebuild, unlike the manifest's own hash, which holds the build time)."""
    if manifest is None:
        return None
    import json

    from ..data.corpus_build import corpus_id

    return corpus_id(json.loads(Path(manifest).read_text()))


def validation_set(data: DataBundle, cfg: Config, final: bool, multiple: int
                   ) -> list[ValBatch]:
    """The batches of one validation (:func:`asyncpp.data.validation_plan`; the prefix set of
    :func:`asyncpp.data.eval_batches` with ``train.val_sample = "prefix"``). ``multiple``: a
    batch is cut to a multiple of it (the pipeline's microbatches)."""
    t = cfg.train
    full = final and t.final_eval == "full"
    if t.val_sample == "prefix" and not full:
        n = min(data.val.num_windows, t.batch_size * t.eval_batches)
        out = [ValBatch("all", tuple(range(i, min(i + t.batch_size, n))))
               for i in range(0, n, t.batch_size)]
        return [b for b in out if len(b.indices) % multiple == 0]
    sources = data.val_sources or [Source("all", "all", 0, data.val.num_windows)]
    return validation_plan(sources, t.batch_size, t.eval_batches, full=full, multiple=multiple)


def summarize_evaluation(losses: list[float], batches: list[ValBatch], data: DataBundle,
                         seq_len: int, full: bool) -> Evaluation:
    """Combine per-batch mean losses (``losses[k]`` of ``batches[k]``) into an
    :class:`Evaluation` (per source: the mean over its windows)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for v, b in zip(losses, batches):
        n = len(b.indices)
        sums[b.source] = sums.get(b.source, 0.0) + v * n
        counts[b.source] = counts.get(b.source, 0) + n
    by_source = {k: sums[k] / counts[k] for k in sums}
    sources = {s.name: s for s in (data.val_sources or [])}
    W = {k: (sources[k].num_windows if k in sources else counts[k]) for k in by_source}
    total = sum(W.values())
    loss = sum(W[k] / total * by_source[k] for k in by_source) if total else float("nan")
    kinds: dict[str, list[str]] = {}
    for k in by_source:
        kinds.setdefault(sources[k].kind if k in sources else k, []).append(k)
    by_kind = {kind: sum(W[k] * by_source[k] for k in ks) / sum(W[k] for k in ks)
               for kind, ks in kinds.items()}
    n = sum(counts.values())
    return Evaluation(loss, by_source, by_kind, n, n * seq_len, full)


def evaluation_plans(data: DataBundle, cfg: Config, final: bool, multiple: int
                     ) -> tuple[list[ValBatch], list[ValBatch]]:
    """(the batches of the validation, the sample's batches scored beside it): the second is
    non-empty only for a final validation over the whole split."""
    plan = validation_set(data, cfg, final, multiple)
    full = final and cfg.train.final_eval == "full"
    return plan, (validation_set(data, cfg, False, multiple) if full else [])


def combine_evaluation(losses: list[float], plan: list[ValBatch], sample: list[ValBatch],
                       data: DataBundle, cfg: Config, final: bool) -> Evaluation:
    """The :class:`Evaluation` of ``plan`` + ``sample`` scored together (``losses`` in that
    order)."""
    full = final and cfg.train.final_eval == "full"
    ev = summarize_evaluation(losses[:len(plan)], plan, data, cfg.data.seq_len, full)
    if sample:
        s = summarize_evaluation(losses[len(plan):], sample, data, cfg.data.seq_len, False)
        ev = dataclasses.replace(ev, sample_loss=s.loss)
    return ev


@torch.no_grad()
def evaluate(loss_of, data: DataBundle, cfg: Config, final: bool, device,
             multiple: int = 1) -> Evaluation:
    """Validation loss over :func:`validation_set`; ``loss_of(x, y)`` returns the mean loss of
    one batch (kept on the device, fetched once)."""
    plan, sample = evaluation_plans(data, cfg, final, multiple)
    losses = []
    for b in plan + sample:
        x, y = data.val.batch(b.indices)
        losses.append(loss_of(x.to(device), y.to(device)).double())
    values = torch.stack(losses).tolist() if losses else []
    return combine_evaluation(values, plan, sample, data, cfg, final)


def peak_memory_mb(device: torch.device) -> float:
    """CUDA: max allocated; CPU: the process's max resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def model_flops_per_token(cfg: Config) -> float:
    r"""Training FLOPs per token, :math:`6N + 12\,L\,d\,T` (N parameters, L layers, width d,
    sequence length T: forward and backward of the matmuls plus the attention scores)."""
    mc = cfg.model_config()
    if cfg.model.external is not None:  # blocks and width as far as the model states them
        attn = 12.0 * mc.blocks * mc.dim * cfg.data.seq_len if mc.blocks and mc.dim else 0.0
        return 6.0 * mc.num_params() + attn
    return 6.0 * mc.num_params() + 12.0 * mc.n_layers * mc.dim * cfg.data.seq_len


def peak_tflops(cfg: Config, device: torch.device) -> float | None:
    """The MFU's denominator: ``run.peak_tflops`` if set, else the dense bf16 peak of a known
    CUDA device (:data:`PEAK_TFLOPS`), else ``None`` (CPU, unknown GPU: no MFU)."""
    if cfg.run.peak_tflops > 0:
        return float(cfg.run.peak_tflops)
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for frag, tf in sorted(PEAK_TFLOPS.items(), key=lambda kv: -len(kv[0])):
        if frag in name:
            return tf
    return None


def lr_at(cfg: Config, step: int) -> float:
    """f(t) for step t of ``cfg`` (clamped to the last step)."""
    t = cfg.train
    return lr_factor(min(step, t.steps - 1), t.steps, t.warmup_frac, t.min_lr_ratio)


def autocast_context(cfg: Config, device: torch.device):
    """bf16 autocast on ``device`` when ``run.precision`` is bf16, else a no-op context."""
    if cfg.run.precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def check_resume_config(saved: dict, cfg: Config) -> None:
    """ConfigError naming the first setting that differs from the checkpoint's (except the
    bookkeeping fields in ``RESUME_FREE``)."""
    mine = cfg.resolved().to_dict()
    defaults = Config().to_dict()
    for sec, body in mine.items():
        for k, v in body.items():
            if k in RESUME_FREE.get(sec, ()):
                continue
            # A setting added after the checkpoint was written had its default then.
            old = saved.get(sec, {}).get(k, defaults.get(sec, {}).get(k))
            if old != v:
                raise ConfigError(
                    f"the checkpoint was made with {sec}.{k}={old!r}, this run has {v!r}; resume "
                    f"with the checkpoint's settings (config.toml in the run directory)")


def prepare_run(cfg: Config, *, resume: bool,
                distributed: bool = False) -> tuple[DataBundle, dict | None, torch.device]:
    """Everything that can fail on bad input, before anything is written: device, data,
    tokenizer/vocabulary, resume checkpoint and its config, run directory state
    (``distributed``: called by a rank of a torchrun launch)."""
    device = resolve_device(cfg.run.device)
    if cfg.log.tensorboard == "on" and not tensorboard_available():
        raise ConfigError("log.tensorboard='on' but tensorboard is not installed; "
                          "`pip install tensorboard` or use --log.tensorboard auto")
    run_dir = cfg.run_dir
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"run.dir={str(run_dir)!r} is a file; choose a folder")
    mc = cfg.model_config()
    try:  # unwritable folder, a path below a file, too little free space: before training
        ckpt_io.check_writable(run_dir, ckpt_io.estimate_run_bytes(
            mc.num_params(), cfg.train.keep_checkpoints))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    ckpt = None
    if resume:
        found = ckpt_io.list_checkpoints(run_dir)
        if not found:
            raise ConfigError(f"--resume: no checkpoint in {str(run_dir)!r}; start without "
                              "--resume or point --run.dir at the run")
        here = Layout(1, cfg.pipeline.stages)

        def accept(step: int, ck: dict) -> None:
            """A torchrun checkpoint resumed in one process: its shards must load, too."""
            old = checkpoint_layout(ck)
            if not distributed and old.distributed and old != here:
                ck["shards"] = ckpt_io.load_shards(run_dir, step, old.processes)

        # The newest checkpoint that passes its checksum; the notes name the ones skipped.
        ckpt, notes = ckpt_io.load_newest_valid(run_dir, accept=accept)
        ckpt["skipped"] = notes
        check_resume_config(ckpt["config"], cfg)
        if not distributed:  # under torchrun: train.pipelined.prepare_distributed
            old, saved = checkpoint_layout(ckpt), from_dict(ckpt["config"])
            err = change_error(saved, cfg, old, here, int(ckpt["step"]))
            if err:
                raise ConfigError(err)
            if old != here or saved.pipeline.microbatches != cfg.pipeline.microbatches:
                ckpt["resharded_from"] = str(old)
                notes.append(resume_note(saved, cfg, old, here, int(ckpt["step"])))
    elif run_dir.exists() and any(run_dir.iterdir()) and not cfg.run.overwrite:
        raise ConfigError(f"run directory {str(run_dir)!r} already holds files; pass --resume to "
                          "continue that run, --run.overwrite true to replace it, or another "
                          "--run.name / --run.dir")
    data = load_data(cfg.data, mc.vocab_size)
    return data, ckpt, device


def clear_run_dir(run_dir: Path) -> None:
    for name in ("metrics.jsonl", "config.toml", "config.json", "summary.json", "loss.png",
                 "tokenizer.json", MARKER):
        (run_dir / name).unlink(missing_ok=True)
    for sub in ("checkpoints", "tb", "export", "hf-config"):
        shutil.rmtree(run_dir / sub, ignore_errors=True)


def to_device(obj, device, _key=None):
    """``obj`` (nested dicts/lists of tensors, e.g. an optimizer state dict) with every tensor
    moved to ``device`` — except optimizer ``step`` counters, which stay on the CPU (as
    ``torch.optim`` keeps them), so reading one is never a device synchronisation."""
    if isinstance(obj, torch.Tensor):
        return obj if _key == "step" else obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device, k) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj
