r"""A stage that owns its computation: forward, backward (whole, or split into its input and
weight halves) and output, over the weight versions its :class:`~.context.StageContext`
holds. The executor only moves messages and batches to it and decides *when*; the stage
decides *what* is computed.

For a stage :math:`y = f(x; w)` with upstream gradient :math:`\bar y` (the loss scaled by
:math:`1/m` on the last stage, :math:`\bar y = 1`):

- forward: :math:`y = f(x; w_v)` on fresh leaves over version v (one set of leaves per
  gradient key, so the microbatches of a step accumulate into the same ``.grad``);
- backward-input (I): :math:`\bar x = (\partial f/\partial x)^\top \bar y`, sent upstream;
- backward-weight (W): :math:`\bar w \mathrel{+}= (\partial f/\partial w)^\top \bar y`;
- backward (B) = I then W in one graph walk.

The weight half does not walk the graph again: the input half records, at every node of the
path from :math:`y` to :math:`x` that also leads to a weight, the gradient flowing into it
(:func:`torch.distributed.pipelining._backward.stage_backward_input`), and the weight half
starts from those nodes (:func:`~torch.distributed.pipelining._backward.stage_backward_weight`),
so it runs only the weight products :math:`\bar w = \bar h^\top a`. On the first stage the
input needs no gradient, so I does nothing and W is the whole backward. Same operations on
the same operands as B: the split changes no bit of any gradient (tested against 1F1B).

``x`` and ``y`` may be tuples or dicts of tensors (hidden states with position ids, a mask,
…; :mod:`.messages`): a tuple output is the next stage's positional arguments, a dict its
keyword arguments, and :math:`\bar x`, :math:`\bar y` are then the tuples of the
floating-point parts' gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from . import messages
from .context import StageContext, alias
from .on_weights import OnWeights


@dataclass
class InFlight:
    """A microbatch forwarded and not yet fully backwarded on this stage."""

    x: Tensor | tuple
    """The stage's input (its floating parts' ``.grad`` receive :math:`\\bar x`)."""
    out: Tensor | tuple
    """The stage's output (the scaled loss on the last stage)."""
    version: int
    """The weight version the forward read (alive until the weight half is done)."""
    leaves: dict[str, Tensor]
    """The leaves the forward read; the weight gradient accumulates in their ``.grad``."""
    weight_half: list | None = None
    """After the input half: the recorded gradients the weight half starts from."""
    seed: Tensor | None = None
    """On the last stage: the gradient of the loss the backward starts from, :math:`s`."""


@dataclass
class Stage(StageContext):
    """One stage with its computation (module docstring)."""

    num_microbatches: int = 1
    loss_fn: Callable | None = None
    forward_fn: Callable | None = None
    inflight: dict[tuple[int, int], InFlight] = field(default_factory=dict)
    seeds: dict = field(default_factory=dict)
    """(dtype, shape, scale) → the loss's backward seed (:meth:`seed`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.on_weights = OnWeights(self.module)
        """The module on given weights (``functional_call``'s result, slots found once)."""

    # -- output --------------------------------------------------------------------------------
    def output(self, weights, x, y=None):
        """The stage's output on ``weights``: the loss on the last stage (``loss_fn(stage(x),
        y)``, or ``stage(x, y)`` without a ``loss_fn``), the activation elsewhere. Training
        and evaluation both call it."""
        args = x if isinstance(x, tuple) else (x,)
        if not self.is_last:
            return self._call(weights, args)
        if self.loss_fn is not None:
            return self.loss_fn(self._call(weights, args), y)
        return self._call(weights, (*args, y))

    def _call(self, weights, args):
        fn = self.forward_fn
        return self.on_weights(weights, args) if fn is None else fn(self.module, weights, args)

    # -- forward -------------------------------------------------------------------------------
    def leaves_for(self, key, version: int) -> dict[str, Tensor]:
        """The leaves gradient ``key`` accumulates into, created over version ``version`` at
        the key's first forward."""
        got = self.accum.get(key)
        if got is not None:
            return got[0]
        ws = self.versions[version]
        leaves = {n: (alias(ws[n]).requires_grad_(True) if p.requires_grad else ws[n])
                  for n, p in self.params}
        self.accum[key] = (leaves, ws)
        return leaves

    def forward(self, key, step: int, mb: int, version: int, x: Tensor, y=None,
                scale: float = 1.0) -> Tensor | None:
        """Forward microbatch (step, mb) on ``version``; returns the activation to send (None
        on the last stage, which adds loss/m to the step's loss and backwards the loss from
        its seed ``scale``, :meth:`seed`)."""
        leaves = self.leaves_for(key, version)
        if not self.is_first:
            for t in messages.differentiable(x):
                t.requires_grad_(True)
        sent = seed = None
        with torch.enable_grad():
            if self.is_last:
                out = self.output(leaves, x, y)
                if not (isinstance(out, Tensor) and out.numel() == 1):
                    raise ValueError("the last stage must produce a scalar loss (give loss_fn, "
                                     "or make stage(x, targets) return the loss)")
                contrib = out.detach().double()
                if contrib.dim():
                    contrib = contrib.reshape(())
                contrib = contrib * (1.0 / self.num_microbatches)
                prev = self.losses.get(step)
                self.losses[step] = contrib if prev is None else prev + contrib
                seed = self.seed(out, scale)
            else:
                out = self.output(leaves, x)
                messages.check(out, "a non-last stage")
                if not messages.differentiable(out):
                    raise ValueError("a non-last stage must return at least one floating-point "
                                     "tensor (the activation the gradient flows back through)")
                sent = out.detach().contiguous() if isinstance(out, Tensor) else \
                    {k: t.detach() for k, t in out.items()} if isinstance(out, dict) else \
                    tuple(t.detach() for t in out)
        self.inflight[(step, mb)] = InFlight(x, out, version, leaves, seed=seed)
        return sent

    def seed(self, loss: Tensor, scale: float) -> Tensor:
        r"""The gradient the last stage's backward hands the loss :math:`L`: the backward of
        :math:`L\cdot s` starts from ones and multiplies them by :math:`s`, so seeding it
        with ``ones_like(L) * s`` — the same operation on the same operands — gives the same
        bits without the two products per microbatch; made once per (dtype, shape, s)."""
        key = (loss.dtype, loss.shape, scale)
        got = self.seeds.get(key)
        if got is None:
            got = self.seeds[key] = torch.ones_like(loss, requires_grad=False) * scale
        return got

    # -- backward ------------------------------------------------------------------------------
    def _input_grad(self, f: InFlight):
        if self.is_first:
            return None
        if isinstance(f.x, Tensor):
            g = f.x.grad if f.x.grad is not None else torch.zeros_like(f.x)
            return g.contiguous()
        gs = [(t.grad if t.grad is not None else torch.zeros_like(t)).contiguous()
              for t in messages.differentiable(f.x)]
        return messages.gradient(gs)

    @staticmethod
    def _roots(f: InFlight, grad) -> tuple[list[Tensor], list[Tensor] | None]:
        """The outputs the backward starts from, with their gradients: the loss, or the
        floating parts of a tuple output that depend on something differentiable."""
        if grad is None:  # the last stage: the loss, from its seed
            return [f.out], [f.seed]
        if isinstance(f.out, Tensor):
            return [f.out], [grad]
        pairs = [(o, g) for o, g in zip(messages.differentiable(f.out), grad)
                 if o.requires_grad]
        return [o for o, _ in pairs], [g for _, g in pairs]

    def backward(self, step: int, mb: int, grad) -> Tensor | tuple | None:
        """Both halves in one walk; returns :math:`\\bar x` (None on the first stage)."""
        f = self.inflight.pop((step, mb))
        outs, grads = self._roots(f, grad)
        if outs:  # a tuple output none of whose parts depends on a weight or the input
            torch.autograd.backward(outs, grad_tensors=grads)
        return self._input_grad(f)

    def backward_input(self, step: int, mb: int, grad: Tensor | None) -> Tensor | None:
        """The input half: :math:`\\bar x`, recording what the weight half starts from."""
        f = self.inflight[(step, mb)]
        if self.is_first:
            f.weight_half = [grad]  # nothing upstream: the weight half is the whole backward
            return None
        weights = [t for t in f.leaves.values() if t.requires_grad]
        outs, grads = self._roots(f, grad)
        _, groups = stage_backward_input(outs, grads, messages.differentiable(f.x),
                                         iter(weights))
        f.weight_half = groups
        return self._input_grad(f)

    def backward_weight(self, step: int, mb: int) -> None:
        """The weight half: :math:`\\bar w \\mathrel{+}= (\\partial f/\\partial w)^\\top
        \\bar y` into the leaves' ``.grad``; frees the microbatch."""
        f = self.inflight.pop((step, mb))
        if f.weight_half is None:
            raise RuntimeError(f"weight half of ({step}, {mb}) before its input half")
        if self.is_first:
            outs, grads = self._roots(f, f.weight_half[0])
            if outs:
                torch.autograd.backward(outs, grad_tensors=grads)
            return
        weights = [t for t in f.leaves.values() if t.requires_grad]
        stage_backward_weight(iter(weights), f.weight_half)

    def oldest_inflight(self, default: int) -> int:
        """The oldest version an in-flight microbatch (not yet fully backwarded) read."""
        return min((f.version for f in self.inflight.values()), default=default)
