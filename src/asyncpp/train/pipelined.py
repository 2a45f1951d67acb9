r"""The ``torchrun`` step backend: this rank runs its pipeline stage (or stages) on
:class:`~asyncpp.pipeline.PipelineExecutor`, streaming steps without draining between them.

World layout (``pipeline.placement``, :func:`~asyncpp.train.config.resolve_placement`): one
stage per rank, ``WORLD_SIZE = dp · P`` with ``P = pipeline.stages``, rank ``r`` is stage
``r mod P`` of data-parallel replica ``r div P`` (stage-fastest, as
:meth:`PipelineTopology.create` splits it); or several stages per rank, one pipeline over the
whole world — ``paired`` (WPipe's partitions d and P/2 + d on rank d of P/2, ZB-V's d and
P − 1 − d) or ``looped`` (stage s on rank s mod WORLD_SIZE). Several stages per rank run in
the order the simulator merged their programs, interleaved by readiness, with gloo; each
stage clips by its own norm, no weight is tied between the first and the last stage, and a
stop takes effect at the end of the call of ``train.log_every`` steps in progress (the
executor cannot shorten a running merged program). Stage s holds the layers of
:func:`asyncpp.models.pipeline_boundaries` — the same groups as the single-process simulation —
initialised by :meth:`Transformer.init_weights` (per-parameter seeds, so a stage draws exactly
the weights the whole model would).

One optimizer step t (``train.batch_size`` = B sequences in all): every rank draws the same
batch from the same sampler; replica k takes rows :math:`[kB/dp, (k+1)B/dp)` and splits them
into m microbatches, so :math:`g_t = \frac{1}{dp\,m}\sum_{k,i}\nabla\ell(x;\xi_{t,k,i})` — the
simulation's mean over the m microbatches of the whole batch (B divisible by dp·m). The update
that applies a gradient at simulated step a (``OptimizerStep.applied_at``; PipeDream counts
microbatch updates) uses :math:`\eta_{\min(\lfloor a/k\rfloor,\,T-1)}` with k = m for PipeDream,
1 otherwise — exactly the rate the simulation uses for that gradient. Clipping ``global``: the
norm over all stages (one asynchronous scalar all-reduce per update); ``stage``: each stage's
own. Validation runs on the weights the next step reads (the simulation's weights at that
point); the final one on the newest weights (the simulation's after ``flush``).

Outputs: rank 0 writes the run directory and shows the progress bar (``summary.json`` holds
every rank's peak memory and each stage's busy, communication and idle time, gathered from the
executors' clocks at the end, :mod:`asyncpp.train.stage_report`); every rank writes its
checkpoint shard ``checkpoints/step-N.shards/rank-R.pt`` (``PipelineExecutor.state_dict()``:
every live weight version, optimizer + delay/EF state; data position; RNG), committed by rank 0
writing the manifest ``checkpoints/step-N.pt`` after all shards are on disk (all files
atomic). Checkpoints are taken at drains (the pipeline is quiet: no in-flight microbatch, no
queued update), so resuming is bit-exact. A checkpoint written by another layout (one process,
or another world size or P) is read by full-model parameter names where
:func:`asyncpp.train.layouts.change_error` allows it (:mod:`asyncpp.train.reshard`).

Compile: with ``run.compile`` each rank compiles its stage's forward (``functional_call`` over
the version's weights; the last stage's includes the loss), so the graph does not depend on
which weight version a microbatch reads.
"""

from __future__ import annotations

import shutil

import torch
import torch.distributed as dist
from torch.func import functional_call

from ..data import BatchSampler
from ..delay import DriftMeter
from ..models import build_model, pipeline_boundaries, split_stage
from ..pipeline import ExecutorOptions, PipelineExecutor, PipelineTopology, build_stage
from ..pipeline.agreement import first_error
from ..pipeline.runtime.on_weights import OnWeights
from . import checkpoint as ckpt_io
from . import reshard
from .components import (
    Evaluation,
    TrainingError,
    apply_lr,
    autocast_context,
    build_stage_optimizer,
    combine_evaluation,
    evaluation_plans,
    lm_loss,
    lr_at,
    prepare_run,
    validation_set,
)
from .config import Config, ConfigError, from_dict, resolve_placement
from .layouts import Layout, change_error, checkpoint_layout
from .stage_report import rank_entry
from .steps import Prefetcher, StepOut


def check_layout(cfg: Config, world: int) -> tuple[int, int]:
    """``(dp, P)`` of a world of ``world`` ranks (dp pipelines of
    :func:`~asyncpp.train.config.resolve_placement`); ``ConfigError`` unless the placement
    works, B mod (dp·m) = 0 and the run uses only settings the executor realises."""
    P, m, B = cfg.pipeline.stages, cfg.pipeline.microbatches, cfg.train.batch_size
    if cfg.pipeline.schedule == "none":
        raise ConfigError(f"pipeline.schedule='none' trains in one process, but {world} ranks "
                          "were launched; choose a pipeline schedule or run without torchrun")
    dp = resolve_placement(cfg, world).dp
    if B % (dp * m):
        raise ConfigError(
            f"train.batch_size={B} must split into {dp} data-parallel replicas × {m} "
            f"microbatches under torchrun ({world} ranks / {P} stages); use a multiple of "
            f"{dp * m}")
    mc = cfg.model_config()
    if cfg.train.clip_scope == "stage" and cfg.train.grad_clip > 0 and mc.tie_embeddings \
            and P > 1:
        raise ConfigError("train.clip_scope='stage' with tied embeddings has no multi-process "
                          "equivalent (the tied matrix belongs to stage 0 only in the "
                          "simulation); use --train.clip_scope global or "
                          "--model.tie_embeddings false")
    if cfg.train.on_nonfinite == "skip":
        raise ConfigError("train.on_nonfinite='skip' is not supported under torchrun (the "
                          "update is applied inside the pipeline before the loss is known); use "
                          "--train.on_nonfinite stop")
    if cfg.train.export:
        raise ConfigError("train.export is done after a torchrun launch, not inside it (each "
                          "rank holds one stage): drop --train.export and run `asyncpp-export "
                          f"{cfg.run_dir} --out DIR` when training ends (it merges the ranks' "
                          "checkpoint shards)")
    return dp, P


def agree(error: str | None) -> None:
    """Collective: raise ``ConfigError`` on every rank if any rank reports an error."""
    bad = first_error(error)
    if bad:
        raise ConfigError(bad[1])


def launch_layout(cfg: Config, world: int) -> Layout:
    """The layout of this torchrun launch of ``world`` ranks."""
    placed = resolve_placement(cfg, world)
    return Layout(world, cfg.pipeline.stages, placed.dp, placed.name)



def prepare_distributed(cfg: Config, resume: bool):
    """:func:`prepare_run` on rank 0 first (it trains/caches the tokenizer), then on the
    others from the cache; the layout and the resume checkpoint checked on every rank.
    Returns ``(data, manifest)``."""
    rank, world = dist.get_rank(), dist.get_world_size()
    err = None
    try:
        check_layout(cfg, world)
    except ConfigError as e:
        err = str(e)
    agree(err)
    prepared = None
    for turn in (0, 1):
        err = None
        if (rank == 0) == (turn == 0):
            try:
                prepared = prepare_run(cfg, resume=resume, distributed=True)
            except (ConfigError, ValueError) as e:
                err = str(e)
            except OSError as e:  # e.g. an unwritable cache folder
                err = (f"{e.strerror or e}: {e.filename!r}; check data.path, data.cache_dir / "
                       "$ASYNCPP_CACHE and run.dir")
        agree(err)
    data, manifest, _ = prepared
    err = None
    if manifest is not None:
        err = change_error(from_dict(manifest["config"]), cfg, checkpoint_layout(manifest),
                           launch_layout(cfg, world), int(manifest["step"]))
    # A missing or damaged shard: train.run.complete_checkpoint falls back to an older one.
    agree(err)
    return data, manifest


class PipelineBackend:
    """Steps of ``cfg`` on this rank's pipeline stage (see the module docstring)."""

    def __init__(self, cfg: Config, data, device: torch.device, stop: dict) -> None:
        self.cfg, self.data, self.device, self.stop = cfg, data, device, stop
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.is_writer = self.rank == 0
        self.has_validation = data.val is not None
        spec = cfg.schedule_spec
        self.k = spec.updates_per_step(cfg.pipeline.microbatches)
        self.lookahead = max(1, spec.lookahead_steps(cfg.pipeline.stages,
                                                     cfg.pipeline.microbatches))
        self.meter = None
        self.next_step = 0

    def barrier(self) -> None:
        dist.barrier()

    def pending_signal(self) -> int | None:
        return self.stop.get("signal")

    # -- set-up ----------------------------------------------------------------------------
    def _build_stage(self, s: int, P: int, m: int):
        """Stage ``s`` of ``P`` on this rank's device: the same sub-modules and initial weights
        as stage s of the whole model (per-parameter seeds)."""
        cfg, device = self.cfg, self.device
        mc = cfg.model_config()
        if cfg.model.external is not None:
            from .external_model import pipeline_stage

            return pipeline_stage(mc, cfg.run.seed, s, P, device)
        model = build_model(mc, device="meta")
        stage = build_stage(model.pipeline_layers(), s, P,
                            boundaries=pipeline_boundaries(mc.n_layers, P))
        split_stage(model, s, P)  # the same sub-modules as `stage`, others dropped
        model.to_empty(device=device)
        if mc.tie_embeddings and model.tok_embeddings is not None \
                and model.output is not None:
            model.output.weight = model.tok_embeddings.weight  # to_empty unties
        model.init_weights(cfg.run.seed)
        model.set_aux_loss_scale(1.0 / (m // self.k))
        return stage

    def setup(self, manifest: dict | None) -> int:
        cfg, device = self.cfg, self.device
        dp, P = check_layout(cfg, self.world)
        self.placed = placed = resolve_placement(cfg, self.world)
        several = placed.several_per_rank
        if several and device.type == "cuda":
            raise ConfigError(f"{P} stages on {self.world} ranks (pipeline.placement="
                              f"{placed.name}) need the gloo backend, which does not run on "
                              f"CUDA devices; launch a multiple of {P} processes (one stage per "
                              "rank) on GPUs, or use --run.device cpu")
        m = cfg.pipeline.microbatches
        self.dp = dp
        timeout = cfg.run.peer_timeout_s
        self.topo = topo = PipelineTopology.create(len(placed.ranks), timeout=timeout)
        # Metrics and stop requests travel on their own CPU group, so their all-reduce never
        # queues behind the pipeline's messages (and needs no device synchronisation).
        self.ctrl = dist.new_group(backend="gloo", timeout=_td(timeout))
        # Checkpoints agree on their own group: a write slower than peer_timeout_s (a network
        # file system) is not a dead peer.
        self.ckpt_group = dist.new_group(backend="gloo",
                                         timeout=_td(cfg.run.checkpoint_timeout_s))
        self.valid = ckpt_io.ValidSteps()
        self.mine = mine = list(placed.ranks[topo.stage])
        modules = {s: self._build_stage(s, P, m) for s in mine}
        torch.manual_seed(cfg.run.seed)
        dp_group = topo.dp_group if dp > 1 else None
        dopts = {s: build_stage_optimizer(cfg, modules[s].named_parameters(), s, device,
                                          dp_group=dp_group) for s in mine}
        self.dopts = list(dopts.values())
        clip = cfg.train.grad_clip if cfg.train.grad_clip > 0 else None
        T, k = cfg.train.steps, self.k

        def before_update(applied_at: int) -> None:
            for d in self.dopts:
                apply_lr(d.optimizer, cfg, lr_at(cfg, applied_at // k))

        last_module = modules.get(P - 1)
        # eager: each stage's parameter slots found once; compiled: dynamo traces
        # functional_call (same tensors, same operations either way)
        on_weights = {id(mod): OnWeights(mod) for mod in modules.values()}

        def call(module, weights, args):
            if cfg.run.compile:
                return functional_call(module, weights, args)
            return on_weights[id(module)](weights, args)

        def forward(module, weights, args):
            with autocast_context(cfg, device):
                if module is last_module:  # the loss in the (compiled) graph; args = (*x, y)
                    return lm_loss(call(module, weights, args[:-1]), args[-1])
                return call(module, weights, args)

        options = ExecutorOptions(
            max_grad_norm=clip, clip_scope=cfg.train.clip_scope,
            timeout=timeout, config=cfg.resolved().to_dict(), before_update=before_update,
            forward_fn=torch.compile(forward) if cfg.run.compile else forward,
            # Update tracking reads each update when its step completes, so nothing may wait.
            eager_updates=cfg.delay.track_updates)
        kw = dict(schedule=cfg.pipeline.schedule, num_microbatches=m, topology=topo,
                  loss_fn=None, options=options)
        if several:
            self.ex = ex = PipelineExecutor(modules, dopts, placement=placed.ranks, **kw)
        else:
            self.ex = ex = PipelineExecutor(modules[mine[0]], dopts[mine[0]], **kw)
        if cfg.delay.track_updates:
            self.meter = DriftMeter.for_optimizers(self.dopts, T * k)
            for s in mine:
                if s == P - 1 and P > 1:
                    named = dict(modules[s].named_parameters())
                    dopts[s].exclude_from_stats(named[n] for n in modules[s].tied_parameters
                                                if n in named)
        sampler = BatchSampler(self.data.train, cfg.train.batch_size, seed=cfg.run.seed)
        B = cfg.train.batch_size
        rows = slice(topo.dp_rank * B // dp, (topo.dp_rank + 1) * B // dp)
        self.batches = Prefetcher(sampler, device, rows, need=(0 in mine, P - 1 in mine))
        start = 0
        if manifest is not None and manifest.get("resharded_from"):
            state = reshard.from_checkpoint(manifest, from_dict(manifest["config"]))
            manifest.pop("shards", None)  # the state holds what this rank needs
            reshard.load_into_executor(ex, cfg, state, device)
            start = state.step
            self.valid.add(start)
            self.batches.load_state_dict(state.sampler)
            ckpt_io.set_rng_state(state.rng)
        elif manifest is not None:
            start = int(manifest["step"])
            shard = ckpt_io.load_checkpoint(ckpt_io.shard_path(cfg.run_dir, start, self.rank))
            ex.load_state_dict(shard["executor"])
            self.valid.add(start)
            if self.meter is not None:
                self.meter.load_state_dict(shard["drift"])
            self.batches.load_state_dict(shard["sampler"])
            ckpt_io.set_rng_state(shard["rng"])
        self.next_step = start
        self.val, self.val_final = [], []
        if self.data.val is not None:
            # the prefix set drops a last batch the microbatches cannot split (as it always
            # did); the spread and full sets are cut to a multiple of m by construction
            self.val = validation_set(self.data, cfg, False, m)
            self.val_final = evaluation_plans(self.data, cfg, True, m)
        self.has_validation = bool(self.val)
        return start

    # -- steps -------------------------------------------------------------------------------
    def delay_of(self, step: int) -> int:
        i = step * self.k
        return 0 if self.dopts[0].schedule.in_sync_window(i) else max(self.cfg.stage_delays())

    def end_after(self, step: int) -> None:
        # run's loop ends at _end in both cases; with one stage per rank the running call is
        # also cut short there, with several it runs to its end (see run)
        self._end = min(self._end, step + 1)
        if not self.placed.several_per_rank:
            self.ex.end_after(step)

    def run(self, first: int, num_steps: int):
        """Stream ``num_steps`` steps. With several stages per rank the executor runs a fixed
        program that cannot be shortened once started, so the steps go in calls of
        ``train.log_every`` steps and a stop (:meth:`end_after`) takes effect at the end of
        the call in progress (a drain there changes no number)."""
        if first != self.ex.next_step:
            raise RuntimeError(f"the executor is at step {self.ex.next_step}, not {first}")
        self._end = first + num_steps
        call = self.cfg.train.log_every if self.placed.several_per_rank else num_steps
        while self.ex.next_step < self._end:
            n = min(call, self._end - self.ex.next_step)
            for out in self.ex.run_steps(self.batches, n):
                drift = self.meter.collect(self.dopts) if self.meter is not None else []
                yield StepOut(out.step, out.loss, out.grad_sq, None, drift)
        self.next_step = self.ex.next_step

    # -- metrics -----------------------------------------------------------------------------
    def post(self, outs: list[StepOut], stop: bool):
        """Start the sum over all ranks of each step's (loss, squared norms, drift) and of the
        stop requests: one device-to-host copy, two small all-reduces on the CPU group."""
        k = self.k
        zero = torch.zeros(1, dtype=torch.float64, device=self.device)
        dev = torch.stack([torch.cat([(o.loss.reshape(1) if o.loss is not None else zero),
                                      o.grad_sq.reshape(-1)]) for o in outs])
        rows = dev.cpu()  # the one host synchronisation of the interval
        if self.meter is not None:
            drift = torch.zeros(len(outs), 2 * k + 1, dtype=torch.float64)
            for i, o in enumerate(outs):
                for j, (u2, d2) in enumerate(o.drift[:k]):
                    drift[i, 2 * j], drift[i, 2 * j + 1] = u2, d2
                drift[i, -1] = len(o.drift)
            rows = torch.cat([rows, drift], dim=1)
        flags = torch.tensor([float(self.stop.get("signal") or 0), 1.0 if stop else 0.0],
                             dtype=torch.float64)
        works = [dist.all_reduce(rows, group=self.ctrl, async_op=True),
                 dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.ctrl, async_op=True)]
        return rows, flags, works, len(outs)

    def collect(self, handle):
        rows, flags, works, n = handle
        for w in works:
            self.ex.wait(w, "the metrics all-reduce",
                         [r for r in range(self.world) if r != self.rank])
        k, dp = self.k, self.dp
        values = []
        for r in rows.tolist():
            v = {"loss": r[0] / dp, "grad_sq": [g / dp for g in r[1:1 + k]]}
            if self.meter is not None:
                d = r[1 + k:]
                if int(d[-1]) != k * self.world:
                    raise RuntimeError(f"update tracking: expected {k} updates on each of "
                                       f"{self.world} ranks, got {int(d[-1])} in all")
                v["drift"] = [(d[2 * j] / dp, d[2 * j + 1] / dp) for j in range(k)]
            values.append(v)
        sig = int(flags[0])
        return values, (sig or None), bool(sig) or bool(flags[1])

    # -- drains --------------------------------------------------------------------------------
    def finish(self) -> None:
        pass  # the executor's drain already applied every update

    def evaluate(self, final: bool) -> Evaluation:
        ex = self.ex
        version = None if final else {s: ex.version_for_step(ex.next_step, stage=s)
                                      for s in ex.contexts}
        plan, sample = self.val_final if final else (self.val, [])
        batches = []
        for b in plan + sample:
            x, y = self.data.val.batch(b.indices)
            batches.append((x.to(self.device), y.to(self.device)))
        losses = ex.evaluate(batches, version=version)
        return combine_evaluation(losses, plan, sample, self.data, self.cfg, final)

    def save(self, step: int, config: dict) -> None:
        """Every rank writes its shard; once every shard is on disk rank 0 commits the
        checkpoint by writing the manifest, then applies retention. Both phases end in an
        agreement on the checkpoint group (its own timeout, ``run.checkpoint_timeout_s``), so
        a full disk on any rank, or a peer that stalls or dies while checkpointing, stops
        every rank with one line and the newest complete checkpoint intact."""
        cfg = self.cfg
        layout = {"world_size": self.world, "stages": cfg.pipeline.stages, "dp": self.dp,
                  "placement": self.placed.name}
        shard = {"format": ckpt_io.FORMAT, "step": step, "rank": self.rank, "layout": layout,
                 "executor": self.ex.state_dict(), "sampler": self.batches.state_dict(),
                 "rng": ckpt_io.rng_state(),
                 **({"drift": self.meter.state_dict()} if self.meter is not None else {})}
        where = ckpt_io.shard_path(cfg.run_dir, step, self.rank)
        err = None
        try:
            ckpt_io.save_shard(where, shard)
        except OSError as e:
            err = f"rank {self.rank}: writing {where} failed ({ckpt_io.disk_error_text(e)})"
        self._checkpoint_agree(step, err)  # every shard is on disk before the manifest
        err = None
        if self.rank == 0:
            try:
                ckpt_io.save_checkpoint(cfg.run_dir, {
                    "step": step, "config": config, "distributed": layout,
                    "sampler": self.batches.state_dict(), "rng": ckpt_io.rng_state()},
                    keep=cfg.train.keep_checkpoints, is_valid=self.valid)
            except OSError as e:
                err = (f"rank 0: writing the checkpoint manifest of step {step} failed "
                       f"({ckpt_io.disk_error_text(e)})")
            else:
                kept = {st for st, _ in ckpt_io.list_checkpoints(cfg.run_dir)}
                for d in ckpt_io.checkpoint_dir(cfg.run_dir).glob("step-*.shards"):
                    if int(d.name[5:13]) not in kept:
                        shutil.rmtree(d, ignore_errors=True)
        self._checkpoint_agree(step, err)
        self.valid.add(step)

    def _checkpoint_agree(self, step: int, error: str | None) -> None:
        """Collective on the checkpoint group: :class:`TrainingError` on every rank naming the
        first rank's failure; :class:`PipelineError` if a peer does not arrive in time."""
        from ..pipeline import PipelineError

        everyone: list = [None] * self.world
        try:
            dist.all_gather_object(everyone, error, group=self.ckpt_group)
        except (dist.DistError, RuntimeError) as e:
            low = str(e).lower()
            how = (f"did not finish within run.checkpoint_timeout_s="
                   f"{self.cfg.run.checkpoint_timeout_s:g} s"
                   if any(k in low for k in ("timed out", "timeout", "time out"))
                   else "failed: a peer is gone")
            raise PipelineError(
                f"rank {self.rank}: the checkpoint of step {step} {how} (a peer stalled or "
                f"died while checkpointing); {ckpt_io.newest_checkpoint_text(self.cfg.run_dir)}"
            ) from None
        bad = [e for e in everyone if e]
        if bad:
            raise TrainingError(f"{bad[0]}; {ckpt_io.newest_checkpoint_text(self.cfg.run_dir)}")

    def summary_fields(self) -> dict:
        cfg = self.cfg
        return {"world_size": self.world, "stages": cfg.pipeline.stages, "dp": self.dp,
                "placement": self.placed.name,
                "rank_stages": [list(d) for d in self.placed.ranks],
                **(self.meter.summary() if self.meter is not None else {})}

    def rank_reports(self) -> list[dict]:
        """Collective on the CPU group: every rank's memory and stage times."""
        t = self.topo
        mine = rank_entry(self.rank, t.dp_rank, self.mine, self.device, self.ex.stage_times())
        everyone: list = [None] * self.world
        dist.all_gather_object(everyone, mine, group=self.ctrl)
        return everyone

    def export(self):
        return None


def _td(seconds: float):
    from datetime import timedelta

    return timedelta(seconds=seconds)

