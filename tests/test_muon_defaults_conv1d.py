"""Muon as a library user meets it: its defaults are the CLI's (one definition), and a weight
stored ``(in, out)`` — GPT-2's ``Conv1D`` — marked by name steps exactly as the same map
stored ``(out, in)`` by ``nn.Linear``, transposed."""

from __future__ import annotations

import inspect

import torch

from asyncpp.optim import Muon, build_optimizer
from asyncpp.train.config import OptimizerSection


def test_library_defaults_are_the_clis():
    sig = inspect.signature(Muon).parameters
    cli = OptimizerSection()
    assert sig["adamw_lr"].default == cli.adamw_lr
    assert sig["ns_dtype"].default == cli.ns_dtype == "auto"
    # "auto" on the CPU is float32: the default step is the explicit float32 step, bit for bit
    torch.manual_seed(0)
    w0, g = torch.randn(16, 8), torch.randn(16, 8)
    out = {}
    for kw in ({}, {"ns_dtype": "float32"}, {"ns_dtype": "bfloat16"}):
        w = torch.nn.Parameter(w0.clone())
        opt = Muon([w], lr=0.02, **kw)
        w.grad = g.clone()
        opt.step()
        out[kw.get("ns_dtype", "default")] = w.detach()
    assert torch.equal(out["default"], out["float32"])
    assert not torch.equal(out["default"], out["bfloat16"])


def _two_steps(transposed_pattern):
    """A (8 out × 4 in) map as Linear (8, 4) and as Conv1D (4, 8); float64 throughout."""
    torch.manual_seed(1)
    w = torch.randn(8, 4, dtype=torch.float64)
    grads = [torch.randn(8, 4, dtype=torch.float64) for _ in range(2)]
    linear = torch.nn.Parameter(w.clone())
    conv = torch.nn.Parameter(w.T.clone())
    named = [("h.0.mlp.fc.weight", linear), ("h.0.mlp.c_fc.weight", conv)]
    kw = {} if transposed_pattern is None else {"transposed_pattern": transposed_pattern}
    opt = build_optimizer("muon", named, lr=0.05, ns_dtype="float64", **kw)
    for g in grads:
        linear.grad, conv.grad = g.clone(), g.T.clone()
        opt.step()
    return linear.detach(), conv.detach()


def test_conv1d_weights_marked_by_name_step_as_their_linear_transpose():
    linear, conv = _two_steps(r"\.c_fc\.weight$")
    torch.testing.assert_close(conv.T, linear, rtol=0, atol=1e-12)
    # unmarked, the shape rule reads 4/8 instead of 8/4: the step is √2 too short
    linear, conv = _two_steps(None)
    assert (conv.T - linear).abs().max() > 1e-3
