r"""The system under test: how ``verify/`` builds the production optimizers, and runs them.

:class:`System` is the one place where the properties obtain the code they check:
``asyncpp.optim.Muon``, ``torch.optim.SGD`` (EMA momentum: ``momentum=β, dampening=β``),
``asyncpp.delay.DelayedOptimizer`` and ``asyncpp.optim.newton_schulz``. The mutants of
:mod:`verify.mutants` are subclasses of :class:`System` that hand out broken variants of exactly
these objects, so a mutation test runs the same property code against them.

The runners below drive the optimizers on the problems of :mod:`verify.problems` and record what
the properties measure, in float64.

Index conventions (production, ``formulation="gradient"``): :math:`x_t` is the iterate before
production step t; step t feeds :math:`g(x_t;\xi_t)` and applies the optimizer to the gradient of
step :math:`t-\tau` (nothing moves while :math:`t<\tau`). In the theory's indexing
:math:`y_k := x_{k+\tau}`, the momentum of step k consumes :math:`g(y_{k-\tau})` with
:math:`y_j := x_0` for :math:`j\le 0` — the warm-up of the pipeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.optim import Optimizer

from asyncpp.delay import DelayedOptimizer
from asyncpp.optim import Muon, newton_schulz

from .problems import DTYPE, nuclear_norm, spectral_norm


class System:
    """The production code paths (subclass to mutate)."""

    name = "production"

    def muon(self, params, *, lr: float, beta: float, ns_dtype: str = "float64",
             nesterov: bool = False) -> Optimizer:
        r"""Muon with the theory's update :math:`x \leftarrow x - \eta\,\mathrm{NS}(v)`,
        :math:`m \leftarrow \beta m + (1-\beta)g`, v = m (or the Nesterov combination): no
        weight decay, no shape rescaling of the step (``adjust_lr_fn="none"``), so
        :math:`\eta` = ``lr``."""
        return Muon(params, lr=lr, momentum=beta, nesterov=nesterov, weight_decay=0.0,
                    adjust_lr_fn="none", ns_dtype=ns_dtype)

    def sgd(self, groups: list[tuple[list, float, float]]) -> Optimizer:
        r"""``torch.optim.SGD`` with one group per ``(params, lr, β)``, each with
        ``momentum=β, dampening=β``: :math:`b \leftarrow \beta b + (1-\beta)g` (first step
        :math:`b = g`), :math:`x \leftarrow x - \eta b`."""
        return torch.optim.SGD([{"params": p, "lr": lr, "momentum": b, "dampening": b}
                                for p, lr, b in groups], lr=groups[0][1])

    def delayed(self, opt: Optimizer, delay, correction: str = "none",
                track_updates: bool = False, ef_gamma=1.0) -> DelayedOptimizer:
        """The production delay core, ``formulation="gradient"`` (what the pipeline realises);
        ``ef_gamma``: γ of EF(γ) (only passed by the EF(γ) properties)."""
        return DelayedOptimizer(opt, delay=delay, correction=correction,
                                track_updates=track_updates, ef_gamma=ef_gamma)

    def newton_schulz(self, G: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The production iteration with its shipped defaults (5 steps, default coefficients)."""
        return newton_schulz(G, dtype=dtype)


PRODUCTION = System()


@dataclass
class Trajectory:
    """What one run records, per production step t (x_t = the iterate before step t)."""

    grad_norm: np.ndarray                 # ||grad f(x_t)||_dual
    f: np.ndarray                         # f(x_t)
    mom_err: np.ndarray | None = None     # ||B_t - grad f(x_t)||_dual, B_t = buffer after step t
    virtual_norm: np.ndarray | None = None  # ||grad f(x_t + u_prev)||_dual (EF virtual point)
    updates: list = field(default_factory=list)  # applied optimizer updates u (per step >= tau)
    stats: list = field(default_factory=list)
    diverged: bool = False

    def drift_norms(self) -> np.ndarray:
        """Per applied step, ||u^(t) - u^(t-1)||_F as recorded by the delay core's tracking."""
        return np.array([s["drift_norm"] for s in self.stats])


def _blocks(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def run(problem, system: System = PRODUCTION, *, lr: float, beta: float, delay,
        ef: bool, steps: int, seed: int, ns_dtype: str = "float64", nesterov: bool = False,
        track_updates: bool = False, momentum_error: bool = False,
        record_updates: bool = False, virtual: bool = False) -> Trajectory:
    r"""Run ``steps`` production steps of delayed Muon on ``problem`` from :math:`X_0`.

    One Muon parameter group per block (``delay`` may be one τ per block: T4). Step t feeds
    :math:`g(x_t;\xi_t) = \nabla f(x_t) + \xi_t` (noise stream seeded by ``seed``) and records
    :math:`\|\nabla f(x_t)\|_\dagger`, :math:`f(x_t)`; optionally the error
    :math:`\|B_t - \nabla f(x_t)\|_\dagger` of the momentum buffers B_t that step t used
    (from step max τ on; a buffer not created yet counts as the zero buffer it starts from),
    the applied updates :math:`u` (read from the delay core's
    EF memory ``prev_update``; needs ``ef`` or ``track_updates``), and the dual norm of the
    gradient at the EF virtual point :math:`x_t + u_\text{prev}`.
    """
    x0 = _blocks(problem.x0)
    Xs = [torch.nn.Parameter(x.clone().to(DTYPE)) for x in x0]
    opt = system.muon([{"params": [X]} for X in Xs], lr=lr, beta=beta, ns_dtype=ns_dtype,
                      nesterov=nesterov)
    dopt = system.delayed(opt, delay, "ef" if ef else "none", track_updates=track_updates)
    gen = torch.Generator().manual_seed(int(seed))
    gn = np.full(steps, np.inf)
    fv = np.full(steps, np.inf)
    me = np.full(steps, np.nan) if momentum_error else None
    vn = np.full(steps, np.nan) if virtual else None
    updates = []
    diverged = False
    taus = delay if isinstance(delay, (list, tuple)) else [delay] * len(Xs)
    for t in range(steps):
        Gs = _blocks(problem.grad(Xs if len(Xs) > 1 else Xs[0]))
        gn[t] = sum(nuclear_norm(G) for G in Gs)
        fv[t] = problem.f(Xs if len(Xs) > 1 else Xs[0])
        if not math.isfinite(gn[t]):
            diverged = True
            break
        if virtual:
            W = []
            for g, X in enumerate(Xs):
                pu = dopt.prev_update[g]
                W.append(X.detach() + (pu[0] if pu is not None and pu[0] is not None else 0.0))
            vn[t] = sum(nuclear_norm(G) for G in _blocks(problem.grad(W if len(W) > 1 else W[0])))
        noise = _blocks(problem.noise(gen))
        for X, G, xi in zip(Xs, Gs, noise):
            X.grad = G + xi
        dopt.step()
        if momentum_error and all(t >= d for d in taus):
            # a block whose buffer does not exist yet has the zero buffer it starts from
            bufs = [opt.state.get(X, {}).get("momentum_buffer") for X in Xs]
            me[t] = sum(nuclear_norm(G if b is None else b - G) for b, G in zip(bufs, Gs))
        if record_updates and t >= taus[0]:
            pu = dopt.prev_update[0]
            # no update applied yet (EF memory empty): the zero update
            updates.append(torch.zeros_like(Xs[0]) if pu is None or pu[0] is None
                           else pu[0].detach().clone())
    return Trajectory(gn, fv, me, vn, updates, list(getattr(dopt, "stats", [])), diverged)


@dataclass
class ScalarRun:
    """Outcome of the scalar-quadratic stability run: per group, per coordinate."""

    verdict: list            # [[verdict per coordinate] per group]: converged|diverged|undecided
    growth: list             # measured asymptotic growth factor per step, same layout
    steps: int


def run_scalar_sgd(system: System, *, groups: list[tuple[float, float]],
                   hs: list[tuple[float, ...]], delay: int, ef: bool, max_steps: int,
                   window: int, small: float = 1e-3, large: float = 1e3,
                   ef_gamma: float | None = None) -> ScalarRun:
    r"""Delayed EMA-momentum SGD on separable quadratics :math:`\sum_i h_i x_i^2/2`, from
    :math:`x_0 = 1`; one SGD parameter group per ``(β, lr)`` of ``groups`` holding one
    coordinate per curvature of the matching entry of ``hs`` (each coordinate an independent
    copy of the scalar recursion of T3). ``ef_gamma``: EF(γ) instead of EF (None: the
    system's default, γ = 1).

    A coordinate has *converged* once :math:`\max(|x|,|b|)` over the last ``window`` steps is
    below ``small``, *diverged* once it exceeds ``large`` (or is not finite). Its growth factor
    is :math:`(a_\text{end}/a_\text{mid})^{1/(t_\text{end}-t_\text{mid})}` of the windowed
    amplitude between the middle and the end of its run.
    """
    xs = [torch.nn.Parameter(torch.ones(len(h), dtype=DTYPE)) for h in hs]
    curv = [torch.tensor(h, dtype=DTYPE) for h in hs]
    opt = system.sgd([([x], lr, b) for x, (b, lr) in zip(xs, groups)])
    if ef_gamma is None:
        dopt = system.delayed(opt, delay, "ef" if ef else "none")
    else:
        dopt = system.delayed(opt, delay, "ef", ef_gamma=ef_gamma)
    coords = [(g, i) for g, h in enumerate(hs) for i in range(len(h))]
    amp: list[list[float]] = []
    verdict: dict = {}
    t = 0
    while t < max_steps and len(verdict) < len(coords):
        for x, h in zip(xs, curv):
            x.grad = h * x.detach()
        dopt.step()
        row = []
        for x in xs:
            buf = opt.state[x].get("momentum_buffer")
            xv = x.detach().tolist()
            bv = buf.tolist() if buf is not None else [0.0] * len(xv)
            row += [max(abs(u), abs(v)) if math.isfinite(u) and math.isfinite(v) else math.inf
                    for u, v in zip(xv, bv)]
        amp.append(row)
        t += 1
        if t >= window:
            for c in range(len(coords)):
                if c not in verdict:
                    recent = max(a[c] for a in amp[-window:])
                    if recent > large:
                        verdict[c] = ("diverged", t)
                    elif recent < small:
                        verdict[c] = ("converged", t)
    verdicts, growth = [], []
    for c in range(len(coords)):
        stop = verdict[c][1] if c in verdict else t
        seq = [a[c] for a in amp[:stop]]
        mid = stop // 2
        lo = max(seq[max(0, mid - window):mid + 1] or [1.0])
        hi = max(seq[max(0, stop - window):stop] or [1.0])
        if stop - mid > 0 and lo > 0 and math.isfinite(hi) and hi > 0:
            growth.append((hi / lo) ** (1.0 / (stop - mid)))
        else:
            growth.append(math.inf if not math.isfinite(hi) else 0.0)
        verdicts.append(verdict[c][0] if c in verdict else "undecided")
    shape_v, shape_g, k = [], [], 0
    for h in hs:
        shape_v.append(verdicts[k:k + len(h)])
        shape_g.append(growth[k:k + len(h)])
        k += len(h)
    return ScalarRun(shape_v, shape_g, t)


def ns_band(system: System, G: torch.Tensor, dtype: torch.dtype) -> dict:
    r"""Measure the inexact-LMO constants of one Newton–Schulz call on G (float64 arithmetic):
    :math:`\|d\|_2` (vs :math:`1+\varepsilon_1`), :math:`\langle G, d\rangle/\|G\|_*`
    (vs :math:`1-\varepsilon_2`), and the singular values :math:`s_{\min}, s_{\max}` of d."""
    d = system.newton_schulz(G, dtype).double()
    s = torch.linalg.svdvals(d)
    nuc = nuclear_norm(G)
    return {"spectral": spectral_norm(d), "s_min": float(s.min()), "s_max": float(s.max()),
            "alignment": float((G.double() * d).sum()) / nuc if nuc > 0 else 1.0}


def cantelli_margin(samples: np.ndarray, delta: float) -> float:
    r"""One-sided margin t with :math:`P(\bar Y - \mathbb E Y \ge t) \le \delta`.

    Cantelli's inequality for the mean of n i.i.d. samples,
    :math:`P(\bar Y - \mu \ge t) \le v/(v + t^2)` with :math:`v = \operatorname{Var}\bar Y = s^2/n`,
    solved for the level: :math:`t = \sqrt{v(1-\delta)/\delta}`. The unbiased sample variance
    :math:`s^2` is plugged in for the variance (the only approximation; it is distribution-free
    otherwise).
    """
    n = len(samples)
    if n < 2:
        return 0.0
    v = float(np.var(samples, ddof=1)) / n
    return math.sqrt(v * (1 - delta) / delta)
