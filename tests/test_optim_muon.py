"""asyncpp.optim.Muon and Newton–Schulz: agreement with torch.optim.Muon, batching, 3-D stacks,
zero gradients, the singular-value band of the default quintic."""

from __future__ import annotations

import math

import pytest
import torch

import asyncpp.optim.muon as muon_module
from asyncpp.optim import Muon, adjusted_lr, newton_schulz, singular_value_band
from asyncpp.optim.newton_schulz import DEFAULT_COEFFICIENTS

pytestmark = pytest.mark.usefixtures("one_thread")

# Several of equal shape (batched Newton–Schulz), plus tall and wide matrices.
SHAPES = [(16, 16), (16, 16), (16, 16), (32, 8), (32, 8), (8, 24), (12, 20)]
STEPS = 20
LR = 0.02
BF16_EPS = 2.0 ** -8  # unit round-off of bfloat16 (8 significant bits)


def _run_pair(nesterov, weight_decay, rule, ns_dtypes, steps=STEPS, seed=0):
    """Run torch.optim.Muon and asyncpp Muon (one per ns_dtype) on the same random gradients.

    Returns (torch_params, {ns_dtype: params}); gradients do not depend on the parameters, so the
    momentum buffers are identical and any deviation comes from the orthogonalization alone."""
    gen = torch.Generator().manual_seed(seed)
    init = [torch.randn(s, generator=gen) for s in SHAPES]
    grads = [[torch.randn(s, generator=gen) for s in SHAPES] for _ in range(steps)]
    hp = dict(lr=LR, momentum=0.95, nesterov=nesterov, weight_decay=weight_decay,
              adjust_lr_fn=rule)
    ref = [torch.nn.Parameter(t.clone()) for t in init]
    ref_opt = torch.optim.Muon(ref, **hp)
    ours = {d: [torch.nn.Parameter(t.clone()) for t in init] for d in ns_dtypes}
    opts = {d: Muon(ours[d], ns_dtype=d, **hp) for d in ns_dtypes}
    for gs in grads:
        for params in [ref, *ours.values()]:
            for p, g in zip(params, gs):
                p.grad = g.clone()
        ref_opt.step()
        for opt in opts.values():
            opt.step()
    return ref, ours


def _max_dev(a, b) -> float:
    return max(float((x.detach() - y.detach()).abs().max()) for x, y in zip(a, b))


@pytest.mark.parametrize(
    "nesterov,weight_decay,rule",
    [
        (True, 0.1, "original"),
        (False, 0.1, "match_rms_adamw"),
        (True, 0.0, "match_rms_adamw"),
        (False, 0.0, "original"),
    ],
)
def test_matches_torch_muon(nesterov, weight_decay, rule, capsys):
    ref, ours = _run_pair(nesterov, weight_decay, rule, ("bfloat16", "float32", "float64"))
    dev_bf16 = _max_dev(ours["bfloat16"], ref)
    dev_fp32 = _max_dev(ours["float32"], ref)
    dev_fp32_vs_fp64 = _max_dev(ours["float32"], ours["float64"])
    # A-priori scale of the per-step update: lr·r(A,B)·|O|, with |O_ij| ≤ σ_max(O) < 1.25.
    step_scale = max(adjusted_lr(LR, rule, torch.Size(s)) for s in SHAPES) * 1.25
    with capsys.disabled():
        print(f"\n[muon vs torch.optim.Muon, {STEPS} steps, nesterov={nesterov}, "
              f"wd={weight_decay}, {rule}] max|Δθ|: bf16 mode {dev_bf16:.3e}, "
              f"fp32 mode {dev_fp32:.3e} (fp32 vs fp64 mode {dev_fp32_vs_fp64:.3e})")
    # bf16 mode: the same bf16 iteration, so at most bf16 round-off (one ulp of the update per
    # step); measured: bit-identical on CPU.
    assert dev_bf16 <= STEPS * step_scale * BF16_EPS
    # fp32 mode: differs from torch only by torch's bf16 round-off (a few ulps per step) ...
    assert dev_fp32 <= STEPS * step_scale * 4 * BF16_EPS
    # ... and that difference is genuinely bf16's: fp32 and fp64 iterations agree far closer.
    assert dev_fp32_vs_fp64 < 1e-3 * dev_fp32 + 1e-6
    for params in ours.values():
        assert all(torch.isfinite(p).all() for p in params)


def test_newton_schulz_batched_once_per_shape(monkeypatch):
    calls = []
    real = muon_module.newton_schulz

    def spy(G, *args, **kwargs):
        calls.append(tuple(G.shape))
        return real(G, *args, **kwargs)

    monkeypatch.setattr(muon_module, "newton_schulz", spy)
    params = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
    params.append(torch.nn.Parameter(torch.randn(2, 16, 16)))  # expert stack joins (16, 16)
    opt = Muon(params)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()
    assert sorted(calls) == sorted([(5, 16, 16), (2, 32, 8), (1, 8, 24), (1, 12, 20)])


def test_batched_newton_schulz_equals_per_matrix():
    G = torch.randn(4, 12, 20, dtype=torch.float64)
    batched = newton_schulz(G, dtype=torch.float64)
    single = torch.stack([newton_schulz(g, dtype=torch.float64) for g in G])
    torch.testing.assert_close(batched, single, rtol=0, atol=1e-12)
    tall = torch.randn(3, 20, 12, dtype=torch.float64)
    torch.testing.assert_close(newton_schulz(tall, dtype=torch.float64),
                               newton_schulz(tall.mT, dtype=torch.float64).mT, rtol=0, atol=1e-12)


@pytest.mark.parametrize("ns_dtype", ["float64", "bfloat16"])
def test_3d_stack_orthogonalized_per_leading_index(ns_dtype):
    dtype = torch.float64
    gen = torch.Generator().manual_seed(3)
    stack0 = torch.randn(3, 12, 8, generator=gen, dtype=dtype)
    stack = torch.nn.Parameter(stack0.clone())
    slices = [torch.nn.Parameter(stack0[i].clone()) for i in range(3)]
    hp = dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1, ns_dtype=ns_dtype)
    opt3, opt2 = Muon([stack], **hp), Muon(slices, **hp)
    for _ in range(5):
        g = torch.randn(3, 12, 8, generator=gen, dtype=dtype)
        stack.grad = g.clone()
        for i, p in enumerate(slices):
            p.grad = g[i].clone()
        opt3.step()
        opt2.step()
    torch.testing.assert_close(stack.detach(), torch.stack([p.detach() for p in slices]),
                               rtol=0, atol=1e-12)
    # Per-slice (not whole-tensor) orthogonalization: each slice's first update has singular
    # values in the Newton–Schulz band, whatever the other slices hold.
    p = torch.nn.Parameter(torch.zeros(2, 6, 4, dtype=dtype))
    opt = Muon([p], lr=1.0, momentum=0.0, nesterov=False, adjust_lr_fn="none",
               ns_dtype="float64")
    p.grad = torch.stack([torch.randn(6, 4, dtype=dtype), 1e3 * torch.randn(6, 4, dtype=dtype)])
    opt.step()
    for i in range(2):
        lo, hi = singular_value_band(-p.detach()[i])
        assert 0.6 < lo and hi < 1.25


@pytest.mark.parametrize("ns_dtype", ["bfloat16", "float32"])
def test_zero_gradient_gives_zero_update(ns_dtype):
    params = [torch.nn.Parameter(torch.randn(s)) for s in [(8, 8), (8, 8), (4, 6)]]
    before = [p.detach().clone() for p in params]
    opt = Muon(params, ns_dtype=ns_dtype, weight_decay=0.0)
    for _ in range(3):
        for p in params:
            p.grad = torch.zeros_like(p)
        opt.step()
    for p, b in zip(params, before):
        assert torch.isfinite(p).all()
        assert torch.equal(p.detach(), b)
    # In one batch with a non-zero matrix: the zero one still gets exactly zero.
    params[1].grad = torch.randn(8, 8)
    params[0].grad = torch.zeros(8, 8)
    opt.step()
    assert torch.equal(params[0].detach(), before[0])
    assert not torch.equal(params[1].detach(), before[1])
    assert torch.equal(newton_schulz(torch.zeros(3, 5, 7)), torch.zeros(3, 5, 7))


def _quintic_band(lo: float, steps: int = 5) -> tuple[float, float]:
    a, b, c = DEFAULT_COEFFICIENTS
    s = torch.logspace(math.log10(lo), 0, 20001, dtype=torch.float64)
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    return float(s.min()), float(s.max())


def test_newton_schulz_singular_value_band():
    """NS acts on singular values only: σ_i(NS(G)) = p⁵(σ_i/‖G‖_F) for p(s) = as+bs³+cs⁵.
    For normalised singular values in [3e-3, 1] the default quintic lands in [0.6818, 1.2024]."""
    lo_band, hi_band = _quintic_band(3e-3)
    assert 0.68 < lo_band < 0.69 and 1.20 < hi_band < 1.21
    gen = torch.Generator().manual_seed(5)
    for m, n in [(16, 16), (24, 10), (10, 24)]:
        k = min(m, n)
        U, _ = torch.linalg.qr(torch.randn(m, k, generator=gen, dtype=torch.float64))
        V, _ = torch.linalg.qr(torch.randn(n, k, generator=gen, dtype=torch.float64))
        sigma = torch.logspace(-2, 0, k, dtype=torch.float64)
        G = U @ torch.diag(sigma) @ V.T
        O = newton_schulz(G, dtype=torch.float64)
        expected = sigma / sigma.norm()
        a, b, c = DEFAULT_COEFFICIENTS
        for _ in range(5):
            expected = a * expected + b * expected**3 + c * expected**5
        got = torch.linalg.svdvals(O)
        torch.testing.assert_close(got.sort().values, expected.sort().values,
                                   rtol=0, atol=1e-10)
        assert (sigma / sigma.norm()).min() >= 3e-3
        lo, hi = singular_value_band(O)
        assert lo_band - 1e-9 <= lo and hi <= hi_band + 1e-9
        # The default bf16 iteration stays in the band up to bf16 round-off.
        lo16, hi16 = singular_value_band(newton_schulz(G.float()))
        assert lo_band - 0.05 <= lo16 and hi16 <= hi_band + 0.05
