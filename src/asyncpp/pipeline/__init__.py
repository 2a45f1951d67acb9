r"""Pipeline parallelism: schedules as programs, a timing simulator, and a multi-process executor
that interprets them.

Schedules (GPipe, 1F1B with flush, original PipeDream, PipeDream-2BW, WPipe) are plain
per-stage action lists (:mod:`asyncpp.pipeline.schedules`), analysed and drawn without any
communication (:func:`simulate`, :mod:`asyncpp.pipeline.timeline`, ``asyncpp-schedule``).
The executor runs
the same lists over ``torch.distributed``; its updates go through the delay core
(:class:`asyncpp.delay.DelayedOptimizer`), so a P-stage run equals the single-process
simulation:

========== ================================================================ ============
schedule   single-process equivalent                                        bubble (ss)
========== ================================================================ ============
gpipe      plain synchronous training                                       (P−1)/(m+P−1)
1f1b       plain synchronous training                                       (P−1)/(m+P−1)
zb-h1      plain synchronous training (1F1B with each backward split into   < 1F1B's
           its input and weight halves, the weight halves moved into idle
           time; :mod:`asyncpp.pipeline.schedules.zb_h1`)
2bw        ``DelayedOptimizer(opt, delay=1, correction=...)``, one step      0
           per batch of m microbatches (gradient formulation:
           :math:`x_{t+1} = x_t - U(g_{t-1};\,x_t)`, :math:`x_1 = x_0`)
pipedream  ``DelayedOptimizer(opt, delay=[P-1-s per stage's groups])``,      0
           one step per *microbatch* (each microbatch is a minibatch)
wpipe      ``DelayedOptimizer(opt, delay=[1 for s < P/2, 0 for s ≥ P/2])``,  per device
           one step per batch (P partitions on P/2 devices, two each;      (simulate_
           see :mod:`asyncpp.pipeline.schedules`)                          devices)
========== ================================================================ ============

Using the executor from a training loop (run under ``torchrun --nproc-per-node=dp*P``)::

    import torch
    import transformers

    import asyncpp.models.hf
    from asyncpp.delay import DelayedOptimizer
    from asyncpp.optim import build_optimizer
    from asyncpp.pipeline import (PipelineExecutor, PipelineTopology, build_stage,
                                  init_distributed, stage_delay)

    device = init_distributed()                  # gloo on CPU, NCCL on CUDA (from the device)
    topo = PipelineTopology.create(num_stages=P, timeout=300)   # rank = dp_rank * P + stage
    # 1. This rank's stage: build the full model (same seed everywhere, or on the meta device
    #    and materialise), list its layers in order, keep this stage's. Names stay the full
    #    model's ("layers.3.attn.wq.weight"); a tied embedding/head becomes one copy on the
    #    first and one on the last stage (stage.tied_parameters says which).
    #    asyncpp's Transformer: model.pipeline_layers(); a Hugging Face GPT-2 / Llama:
    #    asyncpp.models.hf.layers(model); your own: any [(name, module)] list whose
    #    composition maps token ids to logits (a layer returning a tuple, e.g. hidden states
    #    and position ids, gives the next layer -- on the next stage too -- its arguments).
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.from_pretrained("examples/byom/gpt2-tiny"))
    layers = asyncpp.models.hf.layers(model)   # [(name, module)]: wte, wpe, drop, h.i, ln_f,
                                               # lm_head -- the model's own names
    stage = build_stage(layers, topo.stage, P).to(device)  # balanced by parameter count;
                                                           # boundaries=[...] to choose
    # (Any nn.Module works as a stage, e.g. a model with the other stages' layers deleted;
    #  then pass ExecutorOptions(tied_parameters={"output.weight": "tok"}) yourself.)
    # 2. Its optimizer, wrapped in the delay core with the schedule's delay for this stage.
    opt = build_optimizer("muon", stage.named_parameters(), lr=0.02,   # the CLI's defaults
                          transposed_pattern=asyncpp.models.hf.transposed_pattern(model))
    dopt = DelayedOptimizer(opt, delay=stage_delay("2bw", P, topo.stage), correction="ef",
                            sync_start=0, sync_cooldown=0, total_steps=T)
    # 3. The executor (collective: compares the configuration of all ranks, syncs weights).
    ex = PipelineExecutor(stage, dopt, schedule="2bw", num_microbatches=m, topology=topo,
                          loss_fn=lambda logits, y: torch.nn.functional.cross_entropy(
                              logits.flatten(0, -2), y.flatten()),
                          options=ExecutorOptions(max_grad_norm=1.0, timeout=300,
                                                  config=train_config_as_dict))
    # 4. Steps, streamed: the executor pulls each step's (inputs, targets) from the iterator
    #    when its stage first needs it (the first stage reads inputs, the last targets; others
    #    may yield (None, None)), and yields a StepOutput as this stage completes each step —
    #    2BW and PipeDream never drain between steps. The loss (last stage) and squared
    #    gradient norm are device tensors: fetch them when you log, not every step.
    for out in ex.run_steps(loader, num_steps=T):   # drains once, at the end
        ...                                         # out.step, out.loss, out.grad_sq
    #    (ex.train_steps(list_of_batches) runs a few steps and returns their losses on every
    #    rank: one drain and one host synchronisation per call.)
    #    Learning rate: before_update=lambda a: set_lr(lr_at(a)) in the constructor is called
    #    with each update's simulated step a(u) right before it is applied.
    val = ex.evaluate(val_batches)           # forward only, on the newest weights
    # 5. Checkpoints: one file per rank; holds every live weight version (2BW: 2), the
    #    DelayedOptimizer state (optimizer state, EF memory, step counter) and next_step.
    torch.save(ex.state_dict(), f"ckpt/rank{dist.get_rank()}.pt")
    ex.load_state_dict(torch.load(f"ckpt/rank{dist.get_rank()}.pt", weights_only=True))

Programs and several stages per rank: every action carries its stage and prints in a short
text form (``1F2.3@v1``: stage 1, forward of step 2 microbatch 3 on version 1;
:mod:`asyncpp.pipeline.actions`, with its parser); each schedule is one class in
:data:`PROGRAMS`; the executor (:mod:`asyncpp.pipeline.runtime`) interprets a rank's program
through a handler table over per-stage contexts, a transport and an update queue. A rank may
run several stages — WPipe's partitions d and P/2 + d, or a looped placement (interleaved
1F1B) — by passing mappings and ``placement``::

    devs = default_devices(build("wpipe", P, m))          # [[0, P/2], [1, P/2 + 1], ...]
    mine = devs[topo.stage]                               # topo over P/2 ranks
    ex = PipelineExecutor({s: stages[s] for s in mine}, {s: dopts[s] for s in mine},
                          schedule="wpipe", num_microbatches=m, topology=topo,
                          placement=devs, loss_fn=...,
                          options=ExecutorOptions(clip_scope="stage"))

Weights: ``stage.parameters()`` are the newest version (2BW: the single-process
simulation's weights after ``DelayedOptimizer.flush()``); ``ex.weights()`` is the version the
next step reads (the simulation's weights before that flush). Which schedule has which facts
(asynchronous, delays, minimum microbatches, sync windows, tied weights) is
:data:`SPECS` (:mod:`asyncpp.pipeline.registry`, importable without torch).

Failure handling: every wait has ``timeout``; a dead or silent peer raises
:class:`PipelineError` (a clear message naming the rank and the message it waited for), the
rank exits, and its peers' waits fail in turn. Differing configurations across ranks raise
``ValueError`` on every rank at construction.
"""

import importlib

from .registry import ASYNC_SCHEDULES, PIPELINE_SCHEDULES, SPECS, ScheduleSpec, get_spec

# Loaded on first use, so that the registry (and the configuration that reads it) does not import
# torch.
_LAZY = {
    "Action": "actions",
    "Backward": "schedules",
    "Forward": "schedules",
    "Interval": "simulator",
    "OptimizerStep": "schedules",
    "PROGRAMS": "schedules",
    "Program": "schedules",
    "PipelineError": "executor",
    "StepOutput": "executor",
    "PipelineExecutor": "executor",
    "ExecutorOptions": "executor",
    "PipelineTopology": "topology",
    "Recv": "schedules",
    "SCHEDULES": "schedules",
    "Schedule": "schedules",
    "Send": "schedules",
    "SimResult": "simulator",
    "StageModule": "stages",
    "balanced_boundaries": "stages",
    "build": "schedules",
    "build_stage": "stages",
    "partition": "stages",
    "build_stages": "stages",
    "init_distributed": "topology",
    "layer_costs": "stages",
    "simulate": "simulator",
    "simulate_devices": "simulator",
    "default_devices": "simulator",
    "looped_devices": "simulator",
    "rank_programs": "simulator",
    "from_str": "actions",
    "to_str": "actions",
    "stage_delay": "executor",
    "steady_state_bubble": "simulator",
    "version_of": "schedules",
}

__all__ = [
    "ASYNC_SCHEDULES",
    "PIPELINE_SCHEDULES",
    "SCHEDULES",
    "SPECS",
    "ScheduleSpec",
    "get_spec",
    "Action",
    "Backward",
    "Forward",
    "Interval",
    "OptimizerStep",
    "PROGRAMS",
    "Program",
    "PipelineError",
    "PipelineExecutor",
    "ExecutorOptions",
    "PipelineTopology",
    "Recv",
    "Schedule",
    "Send",
    "SimResult",
    "StepOutput",
    "StageModule",
    "balanced_boundaries",
    "build",
    "build_stage",
    "build_stages",
    "partition",
    "init_distributed",
    "layer_costs",
    "simulate",
    "simulate_devices",
    "default_devices",
    "looped_devices",
    "rank_programs",
    "from_str",
    "to_str",
    "stage_delay",
    "steady_state_bubble",
    "version_of",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
