r"""The single-process step backend: a pipeline's delays realised by one
:class:`~asyncpp.delay.DelayedOptimizer` per stage.

One optimizer step :math:`t` of a run with P stages and m microbatches:

1. learning rate :math:`\eta_t` (:func:`asyncpp.train.components.lr_factor`) on every group;
2. gradient :math:`g_t = \frac1m\sum_{i=1}^m \nabla \ell(x_t; \xi_{t,i})` (microbatch
   accumulation, exactly what a pipeline computes for one batch). PipeDream instead makes one
   update per microbatch (each microbatch is a minibatch, as in the executor), so a step of
   PipeDream is m updates, all with :math:`\eta_t`, and its delays count updates;
3. clipping of :math:`g_t` *when it is computed, before it enters the delay queue*:
   ``global`` scales all stages by :math:`\min(1, c/(\|g_t\|+10^{-6}))`, ``stage`` scales stage
   s by :math:`\min(1, c/(\|g_{t,s}\|+10^{-6}))` (:mod:`asyncpp.optim.clip`, on the device);
4. each stage's :class:`~asyncpp.delay.DelayedOptimizer` consumes :math:`g_{t,s}` and applies
   the update due now: :math:`\tau_s = 0` (none, gpipe, 1f1b), 1 (2bw) or :math:`P-1-s`
   (pipedream), with the configured correction and synchronous start/cooldown.

The stages are parameter groups of one model (:func:`asyncpp.models.partition_layers`), each
with its own optimizer — exactly what every rank of the pipeline executor builds for its stage,
so the two realise the same update rule. At the end of the run the pending gradients are
applied (:meth:`DelayedOptimizer.flush`), as a draining pipeline would, before the final
validation. With ``run.compile`` the model *and the loss* are one compiled function.

Resuming a ``torchrun`` checkpoint (:mod:`asyncpp.train.reshard`): it holds the last update
already applied, so step S runs on the older version :math:`x_S` and the newer
:math:`x_{S+1}` then replaces the weights (before the step where it is synchronous), after
which the queue holds :math:`g_S` as if this process had run from the start.

Time (``summary.json``'s ``stage_times``): one entry for the whole model, busy while a step
computes (data, forward, backward, clipping, updates), idle while the trainer handles a
completed step; no communication. The first step of the process is warm-up and excluded
(:mod:`asyncpp.pipeline.runtime.stage_clock`).
"""

from __future__ import annotations

import torch

from ..data import BatchSampler
from ..delay import DriftMeter
from ..delay.drift import SpectralDrift, applied_lr
from ..models import build_model, stage_named_parameters
from ..optim import clip_coefficient, scale_, squared_norm
from ..pipeline.runtime.stage_clock import BUSY, StageClock
from . import checkpoint as ckpt_io
from . import reshard
from .components import (
    Evaluation,
    apply_lr,
    autocast_context,
    build_stage_optimizer,
    evaluate,
    lm_loss,
    lr_at,
    to_device,
)
from .config import Config, from_dict
from .stage_report import rank_entry
from .steps import Prefetcher, StepOut


class SimulationBackend:
    """Steps of ``cfg`` in this process (see the module docstring)."""

    is_writer = True
    world = 1
    lookahead = 0

    def __init__(self, cfg: Config, data, device: torch.device, stop: dict) -> None:
        self.cfg, self.data, self.device, self.stop = cfg, data, device, stop
        self.has_validation = data.val is not None
        self.next_step = 0
        self.meter = None
        self.spectral: list[SpectralDrift] = []
        self.valid = ckpt_io.ValidSteps()  # retention's memo of resumable checkpoints
        self.clock = StageClock([None])

    def barrier(self) -> None:
        pass

    def pending_signal(self) -> int | None:
        return self.stop.get("signal")

    # -- set-up ----------------------------------------------------------------------------
    def setup(self, ckpt: dict | None) -> int:
        cfg, device = self.cfg, self.device
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        mc = cfg.model_config()
        P, m = cfg.pipeline.stages, cfg.pipeline.microbatches
        if cfg.model.external is not None:
            from .external_model import full_model, stage_groups

            self.model = model = full_model(mc, cfg.run.seed, device)
            named = stage_groups(mc, model, P)
        else:
            self.model = model = build_model(mc, device=device, seed=cfg.run.seed)
            named = stage_named_parameters(model, P)
        torch.manual_seed(cfg.run.seed)
        self.stage_params = [[p for _, p in group] for group in named]
        self.dopts = [build_stage_optimizer(cfg, group, s, device)
                      for s, group in enumerate(named)]
        self.k = cfg.schedule_spec.updates_per_step(m)
        self.sampler = BatchSampler(self.data.train, cfg.train.batch_size, seed=cfg.run.seed)
        if cfg.delay.track_updates:
            self.meter = DriftMeter.for_optimizers(self.dopts, cfg.train.steps * self.k)
        if cfg.delay.spectral_drift:
            self.spectral = [SpectralDrift(lambda g, p, d=d: applied_lr(d.param_groups[g], p))
                             for d in self.dopts]
        start = 0
        self.ahead: dict[int, dict] = {}
        if ckpt is not None and (ckpt.get("resharded_from") or "ahead" in ckpt):
            # another layout's checkpoint, or this one's saved before its master was installed
            state = reshard.from_checkpoint(ckpt, from_dict(ckpt["config"]))
            self.ahead = reshard.load_into_simulation(self, state)
            if self.meter is not None:  # only in the layout that wrote it (train.layouts)
                self.meter.load_state_dict(ckpt["drift"])
            for sp, d, st in zip(self.spectral, self.dopts, ckpt.get("spectral", [])):
                sp.load_state_dict(st, d)
            self.sampler.load_state_dict(state.sampler)
            ckpt_io.set_rng_state(state.rng)
            start = state.step
            self.valid.add(start)
        elif ckpt is not None:
            model.load_state_dict(ckpt["model"])
            for d, state in zip(self.dopts, ckpt["optimizers"]):
                d.load_state_dict(to_device(state, device))
            if self.meter is not None:
                self.meter.load_state_dict(ckpt["drift"])
            for sp, d, state in zip(self.spectral, self.dopts, ckpt.get("spectral", [])):
                sp.load_state_dict(state, d)
            self.sampler.load_state_dict(ckpt["sampler"])
            ckpt_io.set_rng_state(ckpt["rng"])
            start = int(ckpt["step"])
            self.valid.add(start)
        self.batches = Prefetcher(self.sampler, device)
        self.next_step = start

        def loss_of(x, y):
            with autocast_context(cfg, device):
                return lm_loss(model(x), y)

        # The loss inside the compiled graph: one graph from tokens to the scalar loss.
        self.loss_of = torch.compile(loss_of) if cfg.run.compile else loss_of
        model.train()
        return start

    # -- steps -------------------------------------------------------------------------------
    def delay_of(self, step: int) -> int:
        i = step * self.k
        return max(d.delay_at(i, g) for d in self.dopts for g in range(len(d.param_groups)))

    def end_after(self, step: int) -> None:
        self._end = min(self._end, step + 1)

    def run(self, first: int, num_steps: int):
        self._end = first + num_steps
        self.clock.start()
        try:
            yield from self._steps(first)
        finally:
            self.clock.stop()

    def _steps(self, first: int):
        cfg, model, clock = self.cfg, self.model, self.clock
        m, k = cfg.pipeline.microbatches, self.k
        clip, scope = cfg.train.grad_clip, cfg.train.clip_scope
        skip_nonfinite = cfg.train.on_nonfinite == "skip"
        t = first
        while t < self._end:
            clock.push(BUSY)
            factor = lr_at(cfg, t)
            for d in self.dopts:
                apply_lr(d.optimizer, cfg, factor)
            x, y = next(self.batches)
            mbs = list(zip(x.chunk(m), y.chunk(m)))
            # 2BW/GPipe/1F1B: one update per batch; PipeDream: one per microbatch.
            groups = [[mb] for mb in mbs] if k > 1 else [mbs]
            loss = torch.zeros((), dtype=torch.float64, device=self.device)
            aux = torch.zeros((), dtype=torch.float64, device=self.device) \
                if model.config.is_moe else None
            sqs, skipped, spectral = [], False, []
            for group in groups:
                n = len(group)
                if aux is not None:
                    model.set_aux_loss_scale(1.0 / n)
                for xm, ym in group:
                    lm = self.loss_of(xm, ym)
                    (lm / n).backward()
                    loss += lm.detach().double() / m
                    if aux is not None:
                        aux += model.aux_loss().detach().double() / m
                stage_sq = [squared_norm([p.grad for p in ps], device=self.device)
                            for ps in self.stage_params]
                total = torch.stack(stage_sq).sum()
                sqs.append(total)
                if skip_nonfinite and not bool(torch.isfinite(total) & torch.isfinite(loss)):
                    # A host check per update: the price of skipping (the default, "stop",
                    # checks at the log interval instead).
                    for ps in self.stage_params:
                        for p in ps:
                            p.grad = None
                    skipped = True
                    continue
                if clip > 0:
                    coefs = [clip_coefficient(total, clip)] * len(stage_sq) \
                        if scope == "global" else [clip_coefficient(q, clip) for q in stage_sq]
                    for ps, c in zip(self.stage_params, coefs):
                        scale_([p.grad for p in ps], c)
                # A resume from the applied form (asyncpp.train.reshard): the master replaces
                # the weights once, before a synchronous step, after a delaying one.
                for s, d in enumerate(self.dopts):
                    if self.ahead.get(s) and d.delay_at(d.step_count) == 0:
                        self._install_ahead(s)
                    d.step()
                    d.zero_grad(set_to_none=True)
                    if self.ahead.get(s):
                        self._install_ahead(s)
                if self.spectral:
                    got = [sp.observe(d) for sp, d in zip(self.spectral, self.dopts)]
                    if all(v is not None for v in got):
                        spectral.append(max(got))
            if t == cfg.train.steps - 1:  # the run's end: apply what is pending, as a drain
                self.finish()
            drift = self.meter.collect(self.dopts) if self.meter is not None else []
            self.next_step = t + 1
            clock.pop()
            clock.step_done()
            yield StepOut(t, loss, torch.stack(sqs), aux, drift, skipped, spectral)
            t += 1

    @torch.no_grad()
    def _install_ahead(self, stage: int) -> None:
        for p, w in self.ahead.pop(stage).items():
            p.copy_(w)

    def _ahead_by_name(self) -> dict:
        name_of = {id(p): n for n, p in self.model.named_parameters()}
        return {name_of[id(p)]: w for ws in self.ahead.values() for p, w in ws.items()}

    # -- metrics -----------------------------------------------------------------------------
    def post(self, outs: list[StepOut], stop: bool):
        return outs, stop

    def collect(self, handle):
        outs, stop = handle
        cols = [torch.cat([o.loss.reshape(1), o.grad_sq.reshape(-1),
                           (o.aux if o.aux is not None else o.loss * 0).reshape(1)])
                for o in outs]
        rows = torch.stack(cols).tolist()  # the one host synchronisation of the interval
        values = []
        for o, r in zip(outs, rows):
            v = {"loss": r[0], "grad_sq": r[1:-1], "drift": o.drift, "spectral": o.spectral}
            if o.aux is not None:
                v["aux"] = r[-1]
            values.append(v)
        return values, self.stop.get("signal"), stop

    # -- drains --------------------------------------------------------------------------------
    def finish(self) -> None:
        for d in self.dopts:
            d.flush()

    def evaluate(self, final: bool) -> Evaluation:
        model = self.model
        was = model.training
        model.eval()
        try:
            # spread sets are cut to the pipeline's microbatches so that this and the
            # multi-process backend score the same windows
            multiple = 1 if self.cfg.train.val_sample == "prefix" and not (
                final and self.cfg.train.final_eval == "full") else \
                self.cfg.pipeline.microbatches
            return evaluate(self.loss_of, self.data, self.cfg, final, self.device, multiple)
        finally:
            model.train(was)

    def save(self, step: int, config: dict) -> None:
        ckpt_io.save_checkpoint(self.cfg.run_dir, {
            "step": step, "config": config, "model": self.model.state_dict(),
            "optimizers": [d.state_dict() for d in self.dopts],
            "sampler": self.batches.state_dict(), "rng": ckpt_io.rng_state(),
            # a master not installed yet (every step since a resume from the applied form
            # was skipped as non-finite): saved, so the checkpoint still holds it
            **({"ahead": self._ahead_by_name()} if any(self.ahead.values()) else {}),
            **({"drift": self.meter.state_dict()} if self.meter is not None else {}),
            **({"spectral": [sp.state_dict(d) for sp, d in zip(self.spectral, self.dopts)]}
               if self.spectral else {})},
            keep=self.cfg.train.keep_checkpoints, is_valid=self.valid)
        self.valid.add(step)

    def summary_fields(self) -> dict:
        out = self.meter.summary() if self.meter is not None else {}
        if self.spectral:
            # Every stage sees every update, so the per-update maximum is over all of them:
            # recompute it from the stages' series (identical lengths).
            series = [max(vs) for vs in zip(*(sp.values for sp in self.spectral))]
            half = series[len(series) // 2:]
            out["spectral_drift_mean"] = sum(series) / len(series) if series else None
            out["spectral_drift_mean_second_half"] = sum(half) / len(half) if half else None
        return out

    def rank_reports(self) -> list[dict]:
        """This process's memory and its one entry of time (stage ``None``: all stages)."""
        return [rank_entry(0, 0, list(range(self.cfg.pipeline.stages)), self.device,
                           self.clock.report())]

    def export(self):
        if not self.cfg.train.export:
            return None
        data = self.data
        eos = data.tokenizer.eos_id if data.tokenizer is not None else None
        if self.cfg.model.external is not None:
            from .external_model import export

            return export(self.cfg.model_config(), self.model.state_dict(),
                          self.cfg.run_dir / "export", tokenizer_file=data.tokenizer_file,
                          eos_token_id=eos)
        from ..models.export import export_hf

        return export_hf(self.model, self.cfg.run_dir / "export",
                         tokenizer_file=data.tokenizer_file, eos_token_id=eos)
