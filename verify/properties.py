r"""The properties of ``verify/``, as plain functions of a system under test.

Every property takes an instance (a small frozen dataclass of parameters, drawn by hypothesis
in ``verify/test_*.py`` or fixed in the mutation tests) and a :class:`~verify.systems.System`
(production by default, a mutant in ``verify/test_mutants.py``), runs the production code
paths, compares what it measures with the callables of ``theory/`` and returns
:class:`~verify.report.Record` objects (``passed`` says whether the property holds there).
Nothing here asserts: the tests assert on ``passed``, the mutation tests expect a failure.

Conventions shared by the properties (see ``verify/README.md`` for the full statement):

* Muon runs as the theory's method: ``nesterov`` as drawn, no weight decay,
  ``adjust_lr_fn="none"`` (so η = lr), Newton–Schulz in float64 unless a property draws the
  iteration dtype; the BAND constants (ε₁, ε₂) are :func:`verify.band.band` of that dtype.
* E₀ (assumption INIT) is the exact initial error of the zero momentum buffer,
  :math:`\|\nabla f(x_0)\|_\dagger`, computed on the problem.
* Expectations: the mean over ``seeds`` independent noise streams; the property holds when
  :math:`\bar Y - t \le B` with the one-sided Cantelli margin t at level δ
  (:func:`verify.systems.cantelli_margin`); δ = ``DELTA`` per check. Deterministic instances
  (σ = 0) use one run and t = 0.
* Exact comparisons in float64 allow a relative rounding tolerance ``RTOL``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from theory import delayed_lmo, error_feedback, stability, variable_delay
from theory.assumptions import c as c_sym

from . import band as bandmod
from .problems import (
    block_measurements,
    isotropic_quadratic,
    measurements,
    nuclear_norm,
    quadratic,
    random_spectrum_matrix,
    spectral_norm,
    t1_tightness_problem,
)
from .report import Record
from .systems import PRODUCTION, System, cantelli_margin, run, run_scalar_sgd

#: one-sided false-alarm level of each statistical check (Cantelli); the ci profile makes about
#: 100 statistical checks per run (noisy P1/P4 records), so the family-wise false-alarm rate is
#: ≤ 100·DELTA = 1 % (Bonferroni); ``thorough`` makes ten times as many.
DELTA = 1e-4
#: relative rounding tolerance of float64 comparisons that are exact in real arithmetic
RTOL = 1e-9
FAMILIES = ("quadratic", "isotropic", "cauchy", "cosine")
DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def make_problem(family: str, m: int, n: int, *, sigma: float, seed: int):
    """A problem of ``family`` (:data:`FAMILIES`) with its constants computed."""
    if family == "quadratic":
        return quadratic(m, n, h=1.0, cond_a=10.0, cond_b=3.0, sigma=sigma, seed=seed)
    if family == "isotropic":
        return isotropic_quadratic(m, n, h=1.0, sigma=sigma, seed=seed)
    if family in ("cauchy", "cosine"):
        return measurements(m, n, count=8, phi=family, sigma=sigma, seed=seed, x0_scale=2.0)
    raise ValueError(f"unknown problem family {family!r}; allowed: {FAMILIES}")


@dataclass(frozen=True)
class Instance:
    """One run configuration of delayed Muon on a matrix problem."""

    family: str = "quadratic"
    m: int = 4
    n: int = 3
    beta: float = 0.9
    eta: float = 0.02
    tau: int = 1
    sigma: float = 0.0
    K: int = 100
    seeds: int = 1
    problem_seed: int = 0
    ns_dtype: str = "float64"
    nesterov: bool = False

    def params(self) -> dict:
        return asdict(self)


def _band(r: int, ns_dtype: str) -> tuple[float, float]:
    return bandmod.band(r, DTYPES[ns_dtype])


def _seed(inst, s: int) -> int:
    return 1_000_003 * inst.problem_seed + 7919 * s + 1


def _stat(samples, delta: float) -> tuple[float, float]:
    samples = np.asarray(samples, dtype=float)
    if not np.all(np.isfinite(samples)):
        return math.inf, 0.0
    return float(samples.mean()), cantelli_margin(samples, delta)


# ------------------------------------------------------------------------------------ P1: T1
def t1_bound(inst: Instance, system: System = PRODUCTION, delta: float = DELTA) -> Record:
    r"""T1: :math:`\frac1K\sum_{k<K}\mathbb E\|\nabla f(x_{k+\tau})\|_* \le`
    ``delayed_lmo.bound`` (also records the mean over seeds of the min over k)."""
    prob = make_problem(inst.family, inst.m, inst.n, sigma=inst.sigma, seed=inst.problem_seed)
    eps1, eps2 = _band(min(inst.m, inst.n), inst.ns_dtype)
    avg, mins = [], []
    seeds = inst.seeds if inst.sigma > 0 else 1
    for s in range(seeds):
        tr = run(prob, system, lr=inst.eta, beta=inst.beta, delay=inst.tau, ef=False,
                 steps=inst.tau + inst.K, seed=_seed(inst, s), ns_dtype=inst.ns_dtype,
                 nesterov=inst.nesterov)
        window = tr.grad_norm[inst.tau:inst.tau + inst.K]
        avg.append(float(window.mean()))
        mins.append(float(window.min()))
    mean, margin = _stat(avg, delta)
    E0 = prob.grad_dual_norm(prob.x0)
    B = float(delayed_lmo.bound(prob.delta0, prob.L, prob.rho, inst.sigma, inst.eta,
                                1.0 - inst.beta, inst.K, inst.tau, eps1, eps2, E0=E0,
                                nesterov=inst.nesterov))
    return Record("P1.T1", "upper", mean, B, mean - margin <= B * (1 + RTOL),
                  params=inst.params(),
                  extra={"margin": margin, "mean_of_min": float(np.mean(mins)),
                         "eps1": eps1, "eps2": eps2, "E0": E0, **prob.constants()})


# ------------------------------------------------------------------------- P1/P4: T2 (EF)
def _spectral_drift(updates: list, eta: float, tau: int, K: int) -> float:
    r"""(1/(Kη)) Σ_{k<K} ‖u_{k−1} − u_{k−τ−1}‖₂ (spectral norm; u_j = 0 for j < 0)."""
    def u(i):
        return updates[i] if 0 <= i < len(updates) and updates[i] is not None else None

    total = 0.0
    for k in range(K):
        a, b = u(k - 1), u(k - tau - 1)
        if a is None and b is None:
            continue
        diff = a if b is None else (-b if a is None else a - b)
        total += spectral_norm(diff)
    return total / (K * eta)


def t2_bound(inst: Instance, system: System = PRODUCTION, delta: float = DELTA
             ) -> list[Record]:
    r"""T2 (EF, τ ≥ 1), at the iterates :math:`x_{k+\tau}` and at the virtual points
    :math:`w_k = x_{k+\tau} + u_{k-1}`: the worst-case bound (drift = 2(1+ε₁), property 1) and
    the data-dependent bound with the measured drift (property 4), the latter with the drift
    in the spectral norm (the theorem's norm) and in the Frobenius norm (an upper bound, so a
    weaker check): for τ = 1 from the delay core's ``track_updates`` statistics (checked
    against the recorded updates to 1e-9), for τ = 2 with ``error_feedback.measured_drift`` of
    the recorded updates (the statistics hold consecutive differences only).
    The bound is affine in E[drift], :math:`B(d) = B(0) + s\,d`, so
    :math:`\mathbb E[Y - s\,\mathrm{drift}] \le B(0)` is tested, with the Cantelli margin on
    :math:`Y - s\,\mathrm{drift}` — no separate error budget for estimating the drift.
    """
    if inst.tau < 1:
        raise ValueError(f"T2 needs a delay tau >= 1, got {inst.tau}")
    prob = make_problem(inst.family, inst.m, inst.n, sigma=inst.sigma, seed=inst.problem_seed)
    eps1, eps2 = _band(min(inst.m, inst.n), inst.ns_dtype)
    tau, K, eta = inst.tau, inst.K, inst.eta
    Y_it, Y_v, d_spec, d_fro, consistency = [], [], [], [], 0.0
    seeds = inst.seeds if inst.sigma > 0 else 1
    for s in range(seeds):
        tr = run(prob, system, lr=eta, beta=inst.beta, delay=tau, ef=True, steps=tau + K,
                 seed=_seed(inst, s), ns_dtype=inst.ns_dtype, nesterov=inst.nesterov,
                 track_updates=True,
                 record_updates=True, virtual=True)
        Y_it.append(float(tr.grad_norm[tau:tau + K].mean()))
        Y_v.append(float(tr.virtual_norm[tau:tau + K].mean()))
        ups = tr.updates[:K]
        d_spec.append(_spectral_drift(ups, eta, tau, K))
        recorded = float(error_feedback.measured_drift([u.numpy() for u in ups], eta, tau)) \
            if ups else math.inf
        if tau == 1:
            # The drift from the delay core's own statistics: with u_{-1} = 0 its first record
            # has drift_norm = ||u_0||; the rest are ||u_j - u_{j-1}||_F.
            st = tr.stats[:K - 1]
            tracked = sum(x["drift_norm"] for x in st) / (K * eta)
            consistency = max(consistency, abs(tracked - recorded) / max(recorded, 1e-300))
            d_fro.append(tracked)
        else:
            d_fro.append(recorded)
    E0 = prob.grad_dual_norm(prob.x0)
    common = dict(eps1=eps1, eps2=eps2, E0=E0, nesterov=inst.nesterov)
    args = (prob.delta0, prob.L, prob.rho, inst.sigma, eta, 1.0 - inst.beta, K, tau)
    extra = {"eps1": eps1, "eps2": eps2, "E0": E0, **prob.constants(),
             "drift_spectral": float(np.mean(d_spec)), "drift_frobenius": float(np.mean(d_fro)),
             "tracking_rel_error": consistency}
    out = []
    worst = float(error_feedback.bound(*args, drift=None, point="iterate", **common))
    mean, margin = _stat(Y_it, delta)
    out.append(Record("P1.T2.worst", "upper", mean, worst, mean - margin <= worst * (1 + RTOL),
                      params=inst.params(), extra={**extra, "margin": margin}))
    for point, Y in (("iterate", Y_it), ("virtual", Y_v)):
        b0 = float(error_feedback.bound(*args, drift=0.0, point=point, **common))
        slope = float(error_feedback.bound(*args, drift=1.0, point=point, **common)) - b0
        for norm, D in (("spectral", d_spec), ("stats", d_fro)):
            Z = np.asarray(Y) - slope * np.asarray(D)
            zmean, zmargin = _stat(Z, delta)
            B = b0 + slope * float(np.mean(D))
            ok = zmean - zmargin <= b0 + RTOL * abs(B)
            if norm == "stats":
                ok = ok and consistency <= 1e-9
            out.append(Record(f"P4.T2.drift.{point}.{norm}", "upper", float(np.mean(Y)), B, ok,
                              params=inst.params(),
                              extra={**extra, "margin": zmargin, "slope": slope,
                                     "bound_drift0": b0}))
    return out


def drift_falls_with_beta(inst: Instance, betas: tuple = (0.0, 0.5, 0.9, 0.97),
                          system: System = PRODUCTION) -> Record:
    r"""Property 4b, the mechanism: the measured EF drift
    :math:`\frac1{K\eta}\sum_k\|u_{k-1}-u_{k-2}\|_2` (mean over the seeds) decreases strictly
    along an increasing grid of β on the same noisy problem, seeds and step size."""
    prob = make_problem(inst.family, inst.m, inst.n, sigma=inst.sigma, seed=inst.problem_seed)
    drifts = []
    for beta in betas:
        ds = []
        for s in range(inst.seeds):
            tr = run(prob, system, lr=inst.eta, beta=beta, delay=inst.tau, ef=True,
                     steps=inst.tau + inst.K, seed=_seed(inst, s), ns_dtype=inst.ns_dtype,
                     record_updates=True)
            ds.append(_spectral_drift(tr.updates[:inst.K], inst.eta, inst.tau, inst.K))
        drifts.append(float(np.mean(ds)))
    ok = all(b < a for a, b in zip(drifts, drifts[1:]))
    worst = max(b / a for a, b in zip(drifts, drifts[1:]))
    return Record("P4.drift_vs_beta", "upper", worst, 1.0, ok,
                  params={**inst.params(), "betas": list(betas)}, extra={"drifts": drifts})


# ------------------------------------------------------------------------------ P1: T4
@dataclass(frozen=True)
class BlockInstance:
    """A run of delayed Muon over P blocks with per-block delays (T4)."""

    shapes: tuple = ((3, 2), (2, 2))
    taus: tuple = (1, 0)
    beta: float = 0.9
    eta: float = 0.02
    sigma: float = 0.0
    K: int = 100
    seeds: int = 1
    problem_seed: int = 0
    phi: str = "cauchy"

    def params(self) -> dict:
        return {k: (list(map(list, v)) if k == "shapes" else (list(v) if k == "taus" else v))
                for k, v in asdict(self).items()}


def t4_bound(inst: BlockInstance, system: System = PRODUCTION, delta: float = DELTA) -> Record:
    r"""T4: :math:`\frac1K\sum_{t=\tau_{\max}}^{\tau_{\max}+K-1}\mathbb E\|\nabla f(x_t)\|_\dagger
    \le` ``variable_delay.bound`` with τ_eff from the computed block constants L_s."""
    prob = block_measurements(list(inst.shapes), count=8, phi=inst.phi, sigma=inst.sigma,
                              seed=inst.problem_seed, x0_scale=2.0)
    tmax = max(inst.taus)
    eps1, eps2 = bandmod.band(max(min(s) for s in inst.shapes), torch.float64)
    avg = []
    seeds = inst.seeds if inst.sigma > 0 else 1
    for s in range(seeds):
        tr = run(prob, system, lr=inst.eta, beta=inst.beta, delay=list(inst.taus), ef=False,
                 steps=tmax + inst.K, seed=_seed(inst, s))
        avg.append(float(tr.grad_norm[tmax:tmax + inst.K].mean()))
    mean, margin = _stat(avg, delta)
    E0 = prob.grad_dual_norm(prob.x0)
    B = float(variable_delay.bound(prob.delta0, prob.L, prob.rho, inst.sigma, inst.eta,
                                   1.0 - inst.beta, inst.K, list(inst.taus),
                                   weights=prob.L_blocks, eps1=eps1, eps2=eps2, E0=E0))
    return Record("P1.T4", "upper", mean, B, mean - margin <= B * (1 + RTOL),
                  params=inst.params(),
                  extra={"margin": margin, "eps1": eps1, "eps2": eps2, "E0": E0,
                         "tau_eff": variable_delay.effective_delay(list(inst.taus),
                                                                   prob.L_blocks),
                         **prob.constants()})


# --------------------------------------------------------------------- P2: momentum lemma
def momentum_lemma(inst: Instance, system: System = PRODUCTION) -> Record:
    r"""Lemma (steps M3–M10 of T1, deterministic: σ = 0 so the error is its b-part): along the
    run, the momentum buffer :math:`m_k` used at applied step k satisfies

    .. math::
        \|m_k - \nabla f(x_{k+\tau})\|_* \le (1-\alpha)^{k+1}E_0
        + \big(1 - (1-\alpha)^{k+1}\big)\,L\eta r\Big(\frac{1-\alpha}{\alpha} + \tau\Big)

    at every k < K (the recursion of step M6, B(k) ≤ (1−α)B(k−1) + (1−α)Lηr + αLτηr with
    B(−1) ≤ E₀, unrolled). ``measured``/``bound`` are taken at the k of the largest ratio.
    The buffer is read from the optimizer state ``momentum_buffer``."""
    prob = make_problem(inst.family, inst.m, inst.n, sigma=0.0, seed=inst.problem_seed)
    tau, K, eta = inst.tau, inst.K, inst.eta
    alpha = 1.0 - inst.beta
    w = inst.beta
    eps1, _ = _band(min(inst.m, inst.n), inst.ns_dtype)
    r = 1.0 + eps1
    tr = run(prob, system, lr=eta, beta=inst.beta, delay=tau, ef=False, steps=tau + K, seed=0,
             ns_dtype=inst.ns_dtype, momentum_error=True)
    E0 = prob.grad_dual_norm(prob.x0)
    ks = np.arange(K)
    wk = w ** (ks + 1)
    bound = wk * E0 + (1 - wk) * prob.L * eta * r * (w / alpha + tau)
    err = tr.mom_err[tau:tau + K]
    tol = RTOL * (E0 + prob.L * eta * r * (1 + tau))
    if not np.all(np.isfinite(err)):
        return Record("P2.momentum_lemma", "upper", math.inf, float(bound[0]), False,
                      params=inst.params(), extra={"reason": "non-finite momentum error"})
    ratio = (err - tol) / np.maximum(bound, 1e-300)
    i = int(np.argmax(ratio))
    ok = bool(np.all(err <= bound + tol))
    return Record("P2.momentum_lemma", "upper", float(err[i]), float(bound[i]), ok,
                  params=inst.params(),
                  extra={"k_worst": i, "max_ratio": float(np.max(err / np.maximum(bound, 1e-300))),
                         "E0": E0, "eps1": eps1, **prob.constants()})


# --------------------------------------------------------------------------- P3: NS band
@dataclass(frozen=True)
class BandInstance:
    m: int = 8
    n: int = 5
    batch: int = 1
    log10_cond: float = 2.0
    log10_scale: float = 0.0
    kind: str = "loguniform"
    dtype: str = "bfloat16"
    seed: int = 0

    def params(self) -> dict:
        return asdict(self)


def ns_band_check(inst: BandInstance, system: System = PRODUCTION) -> list[Record]:
    r"""BAND for the production Newton–Schulz: for every matrix of the batch,
    :math:`\|d\|_2 \le 1+\varepsilon_1` and :math:`\langle G, d\rangle \ge
    (1-\varepsilon_2)\|G\|_*` with the constants of :func:`verify.band.band`."""
    dtype = DTYPES[inst.dtype]
    G = torch.stack([random_spectrum_matrix(inst.m, inst.n, cond=10 ** inst.log10_cond,
                                            scale=10 ** inst.log10_scale, seed=inst.seed + i,
                                            kind=inst.kind) for i in range(inst.batch)])
    d = system.newton_schulz(G, dtype).double()
    eps1, eps2 = bandmod.band(min(inst.m, inst.n), dtype)
    s_max, align = 0.0, math.inf
    s_min = math.inf
    for i in range(inst.batch):
        s = torch.linalg.svdvals(d[i])
        s_max = max(s_max, float(s.max()))
        s_min = min(s_min, float(s.min()))
        nuc = nuclear_norm(G[i])
        align = min(align, float((G[i] * d[i]).sum()) / nuc)
    extra = {"eps1": eps1, "eps2": eps2, "s_min": s_min,
             "exact_eps1": bandmod.exact_eps1(), "allowance": bandmod.allowance(dtype)}
    finite = math.isfinite(s_max) and math.isfinite(align)
    return [Record("P3.ns_band.norm", "upper", s_max, 1 + eps1, finite and s_max <= 1 + eps1,
                   params=inst.params(), extra=extra),
            Record("P3.ns_band.alignment", "lower", align, 1 - eps2,
                   finite and align >= 1 - eps2, params=inst.params(), extra=extra,
                   threshold=1.0)]


# ---------------------------------------------------------------------------- P5: T3 exact
def stability_check(pairs: list[tuple[float, float]], tau: int, ef: bool,
                    system: System = PRODUCTION, margin: float = 0.05,
                    max_steps: int = 40_000, gamma: float | None = None) -> list[Record]:
    r"""T3: production ``torch.optim.SGD(momentum=β, dampening=β)`` inside
    ``DelayedOptimizer(delay=τ, correction="ef"|"none")`` on :math:`f = \sum h_i x_i^2/2`
    converges at :math:`\eta h = (1-\text{margin})\,c^*` and diverges at
    :math:`(1+\text{margin})\,c^*`, :math:`c^* =` ``stability.critical_step(β, τ, ef)``.

    One run per (τ, EF) covers every (β, h) pair: one SGD parameter group per pair
    (``lr = c^*/h``, own β) holding two coordinates with curvatures
    :math:`(1\mp\text{margin})h`. torch's first SGD step sets the buffer to the gradient
    itself (no dampening); this changes only the initial state of the linear recursion, not
    its characteristic polynomial, so it is accounted for by judging the *asymptotic*
    behaviour: a coordinate converges when its amplitude max(|x|, |b|) over a window of one
    oscillation period falls below 1e-3 of its start, diverges when it exceeds 1e3 (both
    thresholds far outside the transient, and the step budget is 3× the theory's decay time
    of a factor 1e3 at the spectral radii of ``stability.spectral_radius``). The window is
    τ + 3 steps or one period 2π/|arg z| of the dominant root, whichever is longer.
    ``gamma`` (with ``ef``): EF(γ), ``DelayedOptimizer(ef_gamma=γ)`` against
    ``stability.critical_step(β, τ, True, gamma=γ)``.
    """
    groups, hs, info = [], [], []
    budget = 0
    window = tau + 3
    for beta, h in pairs:
        cs = float(stability.critical_step(beta, tau, ef, gamma))
        lo, hi = (1 - margin) * cs, (1 + margin) * cs
        r_lo = stability.spectral_radius(beta, lo, tau, ef, gamma)
        r_hi = stability.spectral_radius(beta, hi, tau, ef, gamma)
        n_lo = math.log(1e3) / max(1e-12, -math.log(r_lo)) if r_lo < 1 else max_steps
        n_hi = math.log(1e3) / max(1e-12, math.log(r_hi)) if r_hi > 1 else max_steps
        budget = max(budget, int(3 * max(n_lo, n_hi)) + 50 * (tau + 2))
        poly = stability.char_poly(beta, tau, ef, gamma)
        for cv in (lo, hi):
            roots = np.roots([float(co.subs(c_sym, cv)) for co in poly.all_coeffs()])
            dom = roots[np.argmax(np.abs(roots))]
            ang = abs(np.angle(dom))
            if ang > 1e-9:
                window = max(window, int(math.ceil(2 * math.pi / ang)) + 1)
        groups.append((beta, cs / h))
        hs.append(((1 - margin) * h, (1 + margin) * h))
        info.append({"beta": beta, "h": h, "c_star": cs, "rho_stable": r_lo,
                     "rho_unstable": r_hi})
    res = run_scalar_sgd(system, groups=groups, hs=hs, delay=tau, ef=ef,
                         max_steps=min(budget, max_steps), window=window, ef_gamma=gamma)
    out = []
    for i, meta in enumerate(info):
        for j, want, rho_th in ((0, "converged", meta["rho_stable"]),
                                (1, "diverged", meta["rho_unstable"])):
            got = res.verdict[i][j]
            growth = res.growth[i][j]
            out.append(Record("P5.T3", "classify", growth, rho_th, got == want,
                              params={"beta": meta["beta"], "h": meta["h"], "tau": tau,
                                      "ef": ef, **({} if gamma is None else {"gamma": gamma}),
                                      "eta_h": (1 - margin if j == 0 else 1 + margin)
                                      * meta["c_star"], "expect": want},
                              extra={"verdict": got, "c_star": meta["c_star"],
                                     "steps": res.steps, "window": window,
                                     "growth_measured": growth, "rho_theory": rho_th}))
    return out


# ----------------------------------------------------------------------- P7: tightness
@dataclass(frozen=True)
class TightInstance:
    tau: int = 1
    eta: float = 0.1
    L: float = 1.0
    periods: int = 1

    def params(self) -> dict:
        return asdict(self)


def _sign_descent(system: System, L: float, eta: float, tau: int, K: int) -> np.ndarray:
    r"""Production Muon on the 1×1 problem f(x) = Lx²/2 with β = 0 and float64 Newton–Schulz:
    its step is s₀·lr·sign, s₀ = NS(1) (``lr = η/s₀``). Returns |∇f(x_t)| for t < τ + K."""
    prob = t1_tightness_problem(L, eta)
    s0 = float(PRODUCTION.newton_schulz(torch.ones(1, 1, dtype=torch.float64),
                                        torch.float64))
    X = torch.nn.Parameter(prob.x0.clone())
    opt = system.muon([X], lr=eta / s0, beta=0.0, ns_dtype="float64")
    dopt = system.delayed(opt, tau, "none")
    out = np.empty(tau + K)
    ys = np.empty(tau + K)
    for t in range(tau + K):
        ys[t] = float(X.detach())
        out[t] = prob.grad_dual_norm(X)
        X.grad = prob.grad(X)
        dopt.step()
    return out, ys


def tightness_t1(inst: TightInstance, system: System = PRODUCTION) -> list[Record]:
    r"""Property 7 on T1's tightness instance (``delayed_lmo.tightness_instance``): the
    production run reproduces the theory's periodic orbit, and measured/bound is at least the
    documented constant 1/4; for τ ≥ 1 the measured delay increment (against the τ = 0 run)
    is at least 1/6 of the bound's delay term 2τLη."""
    ti = delayed_lmo.tightness_instance(L=inst.L, eta=inst.eta, tau=inst.tau,
                                        periods=inst.periods)
    K = ti["K"]
    g, ys = _sign_descent(system, inst.L, inst.eta, inst.tau, K)
    applied = ys[inst.tau:inst.tau + K]
    orbit = np.tile(ti["orbit"], inst.periods)
    dev = float(np.max(np.abs(applied - orbit))) / inst.eta
    measured = float(g[inst.tau:inst.tau + K].mean())
    out = [Record("P7.T1.orbit", "upper", dev, 1e-9, dev <= 1e-9, params=inst.params(),
                  extra={"theory_measured": ti["measured"], "production_measured": measured}),
           Record("P7.T1.ratio", "lower", measured, ti["bound"],
                  measured / ti["bound"] >= ti["ratio_lower"] * (1 - RTOL), params=inst.params(),
                  extra={"K": K}, threshold=ti["ratio_lower"])]
    if inst.tau >= 1:
        t0 = delayed_lmo.tightness_instance(L=inst.L, eta=inst.eta, tau=0, periods=1)
        g0, _ = _sign_descent(system, inst.L, inst.eta, 0, t0["K"])
        inc = measured - float(g0[:t0["K"]].mean())
        term = 2 * inst.tau * inst.L * inst.eta
        out.append(Record("P7.T1.delay_increment", "lower", inc, term,
                          inc / term >= ti["delay_ratio_lower"] * (1 - RTOL),
                          params=inst.params(), threshold=ti["delay_ratio_lower"]))
    return out


# ------------------------------------------------------------------------- P6: pipeline
def pipeline_scenario(name: str, schedule: str, correction: str, *, shapes, steps: int = 16,
                      m: int = 2, lr: float = 0.05, beta: float = 0.9, problem_seed: int = 0,
                      phi: str = "cauchy", count: int = 8, x0_scale: float = 2.0,
                      mutant: str | None = None, problem: str = "measurements",
                      eta: float = 0.1, nesterov: bool = False) -> dict:
    """A configuration of ``verify/pipeline_worker.py`` (JSON-serialisable). ``problem="sign"``
    is the separable sign-descent problem (1×1 stage weights, lr = η/s₀; ``shapes`` only sets
    the number of stages)."""
    return {"name": name, "schedule": schedule, "correction": correction,
            "shapes": [list(s) for s in shapes], "steps": steps, "m": m, "lr": lr,
            "beta": beta, "problem_seed": problem_seed, "phi": phi, "count": count,
            "x0_scale": x0_scale, "mutant": mutant, "problem": problem, "eta": eta,
            "nesterov": nesterov}


def _stage_logs(sc: dict, ranks: list[dict]):
    """{stage: result} of one scenario, or a failing Record when a rank crashed."""
    per_stage = {}
    for res in ranks:
        out = res.get(sc["name"], {"crash": res.get("crash", "no result")})
        if "crash" in out:
            return None, Record("P6.model", "upper", math.inf, 1e-9, False, params=sc,
                                extra={"crash": out["crash"][-2000:]})
        per_stage[out["stage"]] = out
    P = len(sc["shapes"])
    if sorted(per_stage) != list(range(P)):
        return None, Record("P6.model", "upper", math.inf, 1e-9, False, params=sc,
                            extra={"reason": f"stages reported: {sorted(per_stage)}"})
    return per_stage, None


def pipeline_ef_identity(sc: dict, per_stage: dict, lr: float) -> Record:
    r"""``P6.ef`` — the EF recursion on every executor stage, from the worker's log alone:
    :math:`x_{u+1} - x_u + 2u_u - u_{u-1} = 0` (EF on a delayed stage) or
    :math:`x_{u+1} - x_u + u_u = 0`, with :math:`u_u = \eta\,\mathrm{NS}(m_u)`,
    :math:`m_u = \beta m_{u-1} + (1-\beta) g_u` recomputed from the logged gradients
    (Nesterov: NS of :math:`(1-\beta)g_u + \beta m_u`); measured = max residual / η."""
    from asyncpp.optim import newton_schulz

    beta = sc["beta"]
    worst = 0.0
    for st in per_stage.values():
        log = sorted(st["log"], key=lambda e: e["update"])
        ef = sc["correction"] == "ef" and st["tau"] > 0
        m, prev = None, None
        for e, nxt in zip(log, log[1:]):
            g = torch.tensor(e["g"], dtype=torch.float64)
            m = (1 - beta) * g if m is None else beta * m + (1 - beta) * g
            v = (1 - beta) * g + beta * m if sc.get("nesterov") else m
            u = lr * newton_schulz(v, dtype=torch.float64)
            dx = torch.tensor(nxt["x"], dtype=torch.float64) - torch.tensor(e["x"],
                                                                          dtype=torch.float64)
            res = dx + (2 * u - (prev if prev is not None else 0) if ef else u)
            worst = max(worst, float(res.abs().max()))
            prev = u
    rel = worst / lr
    return Record("P6.ef", "upper", rel, 1e-9, rel <= 1e-9, params=dict(sc),
                  extra={"taus": [per_stage[s]["tau"] for s in sorted(per_stage)]})


def pipeline_orbit(sc: dict, per_stage: dict) -> Record:
    r"""``P6.orbit`` — on the sign problem every stage s follows the exact trajectory of
    ``theory.muon_cycle`` for its own delay τ_s (EF on delayed stages): the weights before
    update u are :math:`x_{u+\tau_s}` of the model (units of η; from x₀ = 0.3η); measured =
    max deviation / η over every logged update."""
    from fractions import Fraction

    from theory import muon_cycle

    dev = 0.0
    for st in per_stage.values():
        log = sorted(st["log"], key=lambda e: e["update"])
        tau = st["tau"]
        ef = sc["correction"] == "ef" and tau > 0
        traj = muon_cycle.trajectory(Fraction(str(sc["beta"])), tau, ef,
                                     sc.get("nesterov", False), Fraction(3, 10),
                                     len(log) + tau + 1)
        for e in log:
            x = float(torch.tensor(e["x"], dtype=torch.float64).reshape(-1)[0]) / sc["eta"]
            dev = max(dev, abs(x - float(traj[e["update"] + tau])))
    return Record("P6.orbit", "upper", dev, 1e-9, dev <= 1e-9, params=dict(sc),
                  extra={"taus": [per_stage[s]["tau"] for s in sorted(per_stage)]})


def pipeline_check(sc: dict, ranks: list[dict]) -> list[Record]:
    r"""Property 6 on one executor run (``ranks``: the per-rank results of the worker).

    * ``P6.model`` — the delay model of the theorems holds for the executor: the gradient that
      stage s applies as update u is :math:`\nabla_s f(x_u)`, with :math:`x_u` the iterate of
      simulated step u assembled from every stage's weights (stage s's weights at step t are
      its newest weights before update :math:`t-\tau_s`, and :math:`x_0` before its first);
      measured = the largest relative deviation, bound = 1e-9.
    * ``P6.bound`` — the average of :math:`\|\nabla f(x_t)\|_\dagger` over the applied window
      :math:`t = \tau_{\max}..\tau_{\max}+K-1` is below T1 (2BW without EF), T2's worst case
      (2BW with EF) or T4 (PipeDream, τ_s = P−1−s, weights L_s).
    """
    per_stage, crash = _stage_logs(sc, ranks)
    if crash is not None:
        return [crash]
    if sc.get("problem") == "sign":
        s0 = float(PRODUCTION.newton_schulz(torch.ones(1, 1, dtype=torch.float64),
                                            torch.float64))
        return [pipeline_orbit(sc, per_stage),
                pipeline_ef_identity(sc, per_stage, sc["eta"] / s0)]
    prob = block_measurements([tuple(x) for x in sc["shapes"]], count=sc["count"],
                              phi=sc["phi"], sigma=0.0, seed=sc["problem_seed"],
                              x0_scale=sc["x0_scale"])
    P = len(sc["shapes"])
    taus = [per_stage[s]["tau"] for s in range(P)]
    # weights of stage s at simulated step t
    W: list[dict] = []
    for s in range(P):
        ws = {t: prob.x0[s] for t in range(taus[s] + 1)}
        for e in per_stage[s]["log"]:
            ws[e["update"] + taus[s]] = torch.tensor(e["x"], dtype=torch.float64)
        W.append(ws)
    T = min(max(ws) for ws in W)
    xs = [[W[s][t] for s in range(P)] for t in range(T + 1)]
    dev, ref = 0.0, 0.0
    for s in range(P):
        for e in per_stage[s]["log"]:
            u = e["update"]
            if u > T:
                continue
            want = prob.grad(xs[u])[s]
            got = torch.tensor(e["g"], dtype=torch.float64)
            dev = max(dev, float((got - want).abs().max()))
            ref = max(ref, float(want.abs().max()))
    rel = dev / max(ref, 1e-300)
    params = {k: v for k, v in sc.items()}
    out = [Record("P6.model", "upper", rel, 1e-9, rel <= 1e-9, params=params,
                  extra={"taus": taus, "steps_checked": T + 1}),
           pipeline_ef_identity(sc, per_stage, sc["lr"])]
    tmax = max(taus)
    K = T - tmax + 1
    gn = np.array([prob.grad_dual_norm(xs[t]) for t in range(tmax, tmax + K)])
    measured = float(gn.mean())
    eps1, eps2 = bandmod.band(max(min(s) for s in sc["shapes"]), torch.float64)
    E0 = prob.grad_dual_norm(prob.x0)
    args = (prob.delta0, prob.L, prob.rho, 0.0, sc["lr"], 1.0 - sc["beta"], K)
    if sc["schedule"] == "pipedream":
        if sc["correction"] != "none":
            return out
        B = float(variable_delay.bound(*args, taus, weights=prob.L_blocks, eps1=eps1,
                                       eps2=eps2, E0=E0))
        which = "T4"
    elif sc["correction"] == "ef":
        B = float(error_feedback.bound(*args, tau=1, drift=None, eps1=eps1, eps2=eps2, E0=E0))
        which = "T2"
    else:
        B = float(delayed_lmo.bound(*args, 1, eps1, eps2, E0=E0))
        which = "T1"
    out.append(Record("P6.bound", "upper", measured, B, measured <= B * (1 + RTOL),
                      params=params, extra={"theorem": which, "K": K, "taus": taus,
                                            "E0": E0, "eps1": eps1, "eps2": eps2,
                                            **prob.constants()}))
    return out
