r"""The one training loop of ``asyncpp-train``, with two step backends.

:class:`Trainer` owns the run directory (configuration, ``metrics.jsonl``, ``summary.json``,
plot), evaluation, checkpoint cadence, stop control and the non-finite check. *How* steps run
is a backend's business:

- :class:`~asyncpp.train.simulation.SimulationBackend`: one process; the pipeline's delays
  are realised by one :class:`~asyncpp.delay.DelayedOptimizer` per stage;
- :class:`~asyncpp.train.pipelined.PipelineBackend`: one rank of a ``torchrun`` launch
  running one stage on :class:`~asyncpp.pipeline.PipelineExecutor`, streaming steps without
  draining the pipeline between them.

**Segments and drains.** The trainer runs steps in segments that end where the semantics need a
quiet pipeline: an evaluation (``train.eval_every``), a checkpoint (``train.checkpoint_every``),
``train.stop_after``, a stop request, and the end of the run (2BW's synchronous start/cooldown
switches drain inside the executor). A drain costs the pipeline's fill and drain once:
:math:`(P-1)` microbatch slots of idle time per stage, i.e. :math:`(P-1)/(m\,n+P-1)` of a
segment of n steps.

**No host synchronisation on the hot path.** Each step's loss and squared gradient norm stay on
the device; every ``train.log_every`` steps (and at every drain) they are fetched at once —
one device-to-host copy per rank — and, under torchrun, summed over ranks by one small
all-reduce on a CPU (gloo) group, together with every rank's stop request. That all-reduce is
waited ``G = lookahead + 1`` steps later (lookahead :math:`\lceil (P-1)/m\rceil` for the
streaming schedules, 0 otherwise), by which time every rank has posted it, so nobody waits.
``metrics.jsonl`` still gets one line per step.

Bounds, with L = ``train.log_every``: a non-finite loss or gradient norm at step t stops the run
(with an error naming step t and the last good checkpoint) by the end of step
:math:`\lceil t/L\rceil L + G` (one process: :math:`\lceil t/L\rceil L`); a stop request (signal,
``should_stop``) seen by any rank before its step :math:`kL` completes ends the run after step
:math:`kL + G + \text{lookahead}`, with a checkpoint, on every rank.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import checkpoint as ckpt_io
from .components import (
    Evaluation,
    TrainingError,
    clear_run_dir,
    data_provenance,
    lr_at,
    model_flops_per_token,
    peak_memory_mb,
    peak_tflops,
)
from .config import Config, to_toml
from .metrics import MetricsWriter, tensorboard_available, truncate_metrics
from .restarts import mark_launch
from .stage_report import summary_sections

log = logging.getLogger(__name__)

__all__ = ["Hooks", "RunResult", "Trainer", "TrainingError"]


@dataclass
class Hooks:
    """How the trainer talks to its caller (the CLI owns the terminal)."""

    on_start: Callable[[int, int], None] = lambda start, total: None
    on_step: Callable[[dict], None] = lambda record: None
    on_message: Callable[[str], None] = lambda text: None
    should_stop: Callable[[], bool] = lambda: False


@dataclass
class RunResult:
    """What a run (or a resumed part of it) did; the same on every rank under torchrun."""

    run_dir: Path
    steps_done: int
    finished: bool
    start_step: int = 0  # the step this launch resumed from (0: a fresh run)
    final_train_loss: float | None = None
    final_val_loss: float | None = None
    final_validation: Evaluation | None = None  # the final validation, per source
    first_train_loss: float | None = None
    tokens_per_s: float | None = None
    steady_tokens_per_s: float | None = None
    first_step_s: float | None = None
    mfu: float | None = None
    wall_s: float = 0.0
    stage_report: dict | None = None
    """``stage_times`` (busy/comm/idle time per stage and rank), ``ranks`` (peak memory of every
    rank) and ``peak_mem_mb`` (:func:`~asyncpp.train.stage_report.summary_sections`) of a run
    that finished in this launch."""
    plot: Path | None = None
    export: Path | None = None
    exit_code: int = 0
    error: str | None = None  # why the run failed (exit status 1), for the caller to print


def subnormals_flushed() -> bool:
    """Whether float32 arithmetic here flushes subnormals to zero now (``run.flush_denormal``):
    the smallest normal float32, 2^-126, halved is subnormal under IEEE rules and 0 when
    flushed. Recorded in the summary so a result says which arithmetic trained it."""
    import torch

    tiny = torch.tensor(2.0 ** -126, dtype=torch.float32)
    return bool((tiny * 0.5 == 0).item())


def _steady_rate(times: list[float], tokens_per_step: int) -> float | None:
    """Tokens/s over the steady steps: the first ⌈10 %⌉ (at least 2) of the invocation's steps
    are warm-up (compile, allocator), and steps over 10× the median (recompiles) are left out."""
    if len(times) < 3:
        return tokens_per_step * len(times) / sum(times) if times and sum(times) > 0 else None
    skip = max(2, math.ceil(0.1 * len(times)))
    body = times[skip:] if len(times) > skip else times[-1:]
    med = sorted(body)[len(body) // 2]
    body = [t for t in body if t <= 10 * med]
    total = sum(body)
    return tokens_per_step * len(body) / total if total > 0 else None


class Trainer:
    """Run (or resume) one configuration on one step backend
    (:class:`~asyncpp.train.steps.StepBackend`; see the module docstring)."""

    def __init__(self, cfg: Config, backend, *, hooks: Hooks | None = None,
                 manifest: dict | None = None, data=None) -> None:
        self.cfg, self.backend, self.manifest, self.data = cfg, backend, manifest, data
        self.hooks = hooks or Hooks()
        self.writer = backend.is_writer
        self.stop_signal: int | None = None
        self.resolved = dataclasses.replace(
            cfg.resolved(), train=dataclasses.replace(cfg.train, stop_after=0),
            run=dataclasses.replace(cfg.run, overwrite=False))

    # -- the run directory -------------------------------------------------------------------
    def _write_run_files(self, resume: bool) -> None:
        run_dir = self.cfg.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        if self.cfg.run.overwrite and not resume:
            clear_run_dir(run_dir)
        if not resume:
            mark_launch(run_dir)  # a torchrun restart before the first checkpoint starts afresh
        for orphan in ckpt_io.remove_orphans(run_dir):  # writes a kill -9 cut short
            log.info("removed %s, left by an interrupted checkpoint write", orphan)
        (run_dir / "config.toml").write_text(to_toml(self.resolved))
        (run_dir / "config.json").write_text(json.dumps(self.resolved.to_dict(), indent=2)
                                             + "\n")
        if self.data is not None and self.data.tokenizer_file is not None:
            shutil.copyfile(self.data.tokenizer_file, run_dir / "tokenizer.json")
        if self.cfg.model.hf:  # the model's shape as trained: export/eval from any folder
            from .external_model import snapshot_hf_config

            snapshot_hf_config(self.cfg.model.hf, run_dir)

    # -- the loop ------------------------------------------------------------------------------
    def run(self, resume: bool = False) -> RunResult:
        """Write the run files (rank 0), set the backend up, run segment by segment to the end
        (or a stop), writing metrics, validating, checkpointing; then the summary and plot.
        ``resume``: continue the checkpoint given as ``manifest``. Raises
        :class:`TrainingError` on a non-finite loss or gradient."""
        cfg, be, hooks = self.cfg, self.backend, self.hooks
        if self.writer:
            self._write_run_files(resume)
        be.barrier()
        t_wall = time.perf_counter()
        start = be.setup(self.manifest)
        if self.manifest is not None:
            if self.writer:
                truncate_metrics(cfg.run_dir, start)
            hooks.on_message(f"resumed from step {start}")
        T = cfg.train.steps
        self.tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
        metrics = None
        if self.writer:
            use_tb = cfg.log.tensorboard == "on" or (cfg.log.tensorboard == "auto"
                                                     and tensorboard_available())
            metrics = MetricsWriter(cfg.run_dir, tensorboard=use_tb)
        self.metrics = metrics
        result = RunResult(run_dir=cfg.run_dir, steps_done=start, finished=False,
                           start_step=start)
        self.result = result
        self._times: list[float] = []
        self._rows: list = []          # completed steps not yet posted
        self._posted: list = []        # (post step, metas, handle)
        self._ready: list[dict] = []   # records resolved, not yet written
        self._last_ckpt = start if self.manifest is not None else -1
        stop_limit = start + cfg.train.stop_after if cfg.train.stop_after else T
        hooks.on_start(start, T)
        step = start
        stopped = False
        self._t_last = time.perf_counter()
        self._t_start = self._t_last
        try:
            while step < min(T, stop_limit):
                end = self._segment_end(step, min(T, stop_limit))
                self._seg_last = end - 1
                self._stop_at = None
                for out in be.run(step, end - step):
                    self._on_step(out)
                step = be.next_step
                self._flush()
                last = step == T
                if last:
                    be.finish()
                val = None
                if be.has_validation and (last or (cfg.train.eval_every
                                                   and step % cfg.train.eval_every == 0)):
                    val = be.evaluate(final=last)
                self._emit(val)
                if last and val is not None:
                    result.final_val_loss = val.loss
                    result.final_validation = val
                if last or (cfg.train.checkpoint_every
                            and step % cfg.train.checkpoint_every == 0):
                    self._save(step)
                if self._stop_at is not None or step >= stop_limit and step < T:
                    self._save(step)
                    hooks.on_message(f"stopped at step {step}; continue with --resume")
                    stopped = True
                    break
                self._t_last = time.perf_counter()
            result.steps_done = step
            result.finished = step >= T
        except TrainingError as e:  # the caller prints it (once)
            result.steps_done = step
            result.error = str(e)
            result.exit_code = 1
            raise
        finally:
            self._close()
        result.wall_s = time.perf_counter() - t_wall
        done = len(self._times)
        result.tokens_per_s = done * self.tokens_per_step / result.wall_s if done else None
        result.steady_tokens_per_s = _steady_rate(self._times, self.tokens_per_step)
        peak = peak_tflops(cfg, be.device)
        if peak and result.steady_tokens_per_s:
            flops = model_flops_per_token(cfg) * result.steady_tokens_per_s
            result.mfu = flops / (peak * 1e12 * be.world)
        if result.finished and step > start:
            # collective (every rank finished the same step), before rank 0 writes
            result.stage_report = summary_sections(be.rank_reports())
            self._finish(peak)
        elif result.finished:
            hooks.on_message(f"the run is already complete ({T} steps); nothing to do")
        result.exit_code = 0 if (result.finished or stopped) else 1
        if self.stop_signal is not None:
            result.exit_code = 128 + int(self.stop_signal)
        return result

    def _close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None

    def _segment_end(self, step: int, limit: int) -> int:
        """The next drain point after ``step``: an evaluation or checkpoint step, or ``limit``."""
        end = limit
        for every in (self.cfg.train.eval_every if self.backend.has_validation else 0,
                      self.cfg.train.checkpoint_every):
            if every:
                end = min(end, (step // every + 1) * every)
        return end

    def _on_step(self, out) -> None:
        now = time.perf_counter()
        dt = now - self._t_last
        self._t_last = now
        self._times.append(dt)
        if self.result.first_step_s is None:
            self.result.first_step_s = now - self._t_start
        self._rows.append((out, dt))
        s = out.step
        if (s + 1) % self.cfg.train.log_every == 0 and s < self._seg_last:
            self._post(s)
        self._resolve(upto=s)
        if self.backend.lookahead == 0 and self._local_stop() and s < self._seg_last:
            self._stop_at = s
            self.backend.end_after(s)

    def _local_stop(self) -> bool:
        sig = self.backend.pending_signal()
        if sig is not None:
            self.stop_signal = sig
        return sig is not None or self.hooks.should_stop()

    def _post(self, step: int) -> None:
        rows, self._rows = self._rows, []
        if not rows:
            return
        handle = self.backend.post([o for o, _ in rows], self._local_stop())
        self._posted.append((step, rows, handle))

    def _resolve(self, upto: int | None) -> None:
        """Resolve posted exchanges due by step ``upto`` (all of them when None)."""
        G = self.backend.lookahead + 1 if self.backend.lookahead else 0
        while self._posted and (upto is None or self._posted[0][0] + G <= upto):
            step, rows, handle = self._posted.pop(0)
            values, stop_sig, stop_any = self.backend.collect(handle)
            if stop_sig:
                self.stop_signal = stop_sig
            self._records(rows, values)
            if stop_any and self._stop_at is None:
                # Every rank resolves this exchange at the same step (or at the same drain), so
                # all choose the same end; the first stage has not started a step past it.
                end = step + G + self.backend.lookahead
                self._stop_at = end
                if upto is not None and end < self._seg_last:
                    self.backend.end_after(end)
            if upto is not None:
                self._emit_ready()

    def _flush(self) -> None:
        """At a drain: post what is left and resolve everything."""
        self._post(self._seg_last)
        self._resolve(None)

    def _records(self, rows, values) -> None:
        cfg, be = self.cfg, self.backend
        for (out, dt), v in zip(rows, values):
            loss, gsq, aux = v["loss"], v["grad_sq"], v.get("aux")
            gnorm = sum(math.sqrt(max(g, 0.0)) if math.isfinite(g) else g for g in gsq) \
                / max(len(gsq), 1)
            if not (math.isfinite(loss) and math.isfinite(gnorm)) and not out.skipped:
                what = "loss" if not math.isfinite(loss) else "gradient"
                good = ckpt_io.list_checkpoints(cfg.run_dir)
                where = f"; last good checkpoint: {good[-1][1]}" if good else ""
                hint = "" if be.world > 1 else " or set train.on_nonfinite='skip'"
                raise TrainingError(f"non-finite {what} at step {out.step + 1} (loss {loss}, "
                                    f"grad norm {gnorm}){where}; lower optimizer.lr{hint}")
            t = out.step
            rec = {"step": t + 1, "tokens": (t + 1) * self.tokens_per_step,
                   "lr": cfg.optimizer.lr * lr_at(cfg, t), "delay": be.delay_of(t),
                   "train_loss": loss, "grad_norm": gnorm,
                   "tokens_per_s": self.tokens_per_step / dt if dt > 0 else None,
                   "step_time_s": dt, "peak_mem_mb": peak_memory_mb(be.device)}
            if aux is not None:
                rec["aux_loss"] = aux
            if out.skipped:
                rec["skipped"] = True
            if v.get("drift"):
                rec.update(be.meter.step_record(v["drift"]))
            if v.get("spectral"):
                rec["spectral_drift"] = sum(v["spectral"]) / len(v["spectral"])
            if self.result.first_train_loss is None and t == 0:
                self.result.first_train_loss = loss
            self.result.final_train_loss = loss
            self._ready.append(rec)

    def _emit_ready(self) -> None:
        for rec in self._ready:
            self._write(rec)
        self._ready = []

    def _emit(self, val: Evaluation | None) -> None:
        """Write the drained segment's records; the last carries ``val_loss`` (and, when the
        split has several sources, ``val_loss_by_source``) if validated."""
        if self._ready and val is not None:
            self._ready[-1]["val_loss"] = val.loss
            if len(val.by_source) > 1:
                self._ready[-1]["val_loss_by_source"] = val.by_source
        self._emit_ready()

    def _write(self, rec: dict) -> None:
        if self.metrics is not None:
            self.metrics.write(rec)
        self.hooks.on_step(rec)

    def _save(self, step: int) -> None:
        if self._last_ckpt == step:
            return
        self.backend.save(step, self.resolved.to_dict())
        self._last_ckpt = step

    def _finish(self, peak: float | None) -> None:
        cfg, be, r = self.cfg, self.backend, self.result
        if not self.writer:
            return
        # tokens_per_s: this launch's steps over its whole wall time (setup, warm-up,
        # validations and checkpoints included); steady_tokens_per_s: the steps after the
        # warm-up only (_steady_rate) — the rate a longer run approaches.
        summary = {"steps": r.steps_done, "steps_this_launch": r.steps_done - r.start_step,
                   "resumed_from_step": r.start_step, "final_train_loss": r.final_train_loss,
                   "final_val_loss": r.final_val_loss, "tokens_per_s": r.tokens_per_s,
                   "steady_tokens_per_s": r.steady_tokens_per_s, "first_step_s": r.first_step_s,
                   "model_tflops": (model_flops_per_token(cfg) * r.steady_tokens_per_s / 1e12
                                    if r.steady_tokens_per_s else None),
                   "peak_tflops": peak, "mfu": r.mfu, "wall_s": r.wall_s,
                   "params": cfg.model_config().num_params(),
                   "subnormals_flushed": subnormals_flushed(), **be.summary_fields(),
                   **(r.stage_report or {})}
        data = getattr(be, "data", None)
        if data is not None:
            summary["data"] = data_provenance(data)
        ev = r.final_validation
        if ev is not None:
            summary.update(final_val_loss_by_source=ev.by_source, final_val_loss_by_kind=ev.by_kind,
                           final_val_windows=ev.windows, final_val_tokens=ev.tokens,
                           final_val_full_split=ev.full, final_val_loss_sample=ev.sample_loss)
        (cfg.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        r.export = be.export()
        if cfg.log.plot:
            try:
                from .plot import plot_runs

                r.plot = plot_runs([cfg.run_dir], cfg.run_dir / "loss.png")
            except ImportError:
                log.warning("matplotlib is not installed; no loss plot (pip install matplotlib)")
