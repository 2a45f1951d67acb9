r"""Exact identities between the theory's MODEL steps and the production code (property 0),
and the theory-side lemmas that are tight enough to see a wrong implementation (property 2b).

Each property runs production ``asyncpp.optim.Muon`` (or ``torch.optim.SGD``) inside the
production ``asyncpp.delay.DelayedOptimizer`` — built through a :class:`~verify.systems.System`,
so a mutant replaces exactly one object — records the iterates, the gradients fed, the
optimizer's momentum buffer and the EF memory, and compares them with an *independent*
recomputation. The reference direction is ``asyncpp.optim.newton_schulz`` with its shipped
defaults, called directly in float64 (it is what property 3 checks against BAND), never
through the system under test. Identities must hold to round-off: the residual, relative to
the step size, must be ≤ ``TOL`` = 1e-9 (float64 throughout).

Notation (production indexing, ``formulation="gradient"``): x_t the weights before step t,
g_t = ∇f(x_t) + ξ_t the gradient fed at step t, τ the delay *the core reports*
(``delay_at(t)``); for t ≥ τ the optimizer consumes g_{t−τ}:

* heavy-ball Muon: m_t = βm_{t−1} + (1−β)g_{t−τ} (m_{τ−1} = 0), v_t = m_t;
  Nesterov: v_t = (1−β)g_{t−τ} + βm_t; u_t = η·NS(v_t) (η = lr, ``adjust_lr_fn="none"``).

Properties:

* ``I1.ef_recursion`` — x_{t+1} − x_t + 2u_t − u_{t−1} = 0 (EF; u_{τ−1} = 0; EF(γ):
  x_{t+1} − x_t + (1+γ)u_t − γu_{t−1} = 0), or
  x_{t+1} − x_t + u_t = 0 (no EF), with u_t = η·NS(v_t) recomputed from the optimizer's own
  momentum buffer (``state["momentum_buffer"]``): T2's step "MODEL EF recursion" on the
  production code.
* ``I2.virtual`` — w_{t+1} − w_t + u_t = 0 for w_t = x_t + γ·(EF memory before step t)
  (``DelayedOptimizer.prev_update``): T2's step V1, and that the EF memory is u_{t−1}.
* ``I3.delay_model`` — the same recursion with u_t recomputed from scratch: the gradient
  recomputed at the *stated* stale weights x_{t−τ} (τ as reported), the momentum recursion
  and NS: T1's "MODEL delayed LMO" step and the momentum definition.
* ``I4.taylor`` — DC-ASGD in the core around plain SGD:
  x_{t+1} − x_t + η(g_{t−τ} + λ g_{t−τ}⊙g_{t−τ}⊙(x_t − x_{t−τ})) = 0.
* ``L1.ef_momentum_lemma`` (theory-side, T2's momentum lemma at the virtual point, σ = 0):
  B_k := ‖m_k − ∇f(w_k)‖_* ≤ (1−α)B_{k−1} + (1−α)L‖u_{k−1}‖₂ + αL‖o_k‖₂ at every applied
  step k, with w_k = y_k + u_{k−1} (y_k = x_{k+τ}), o_k = w_k − z_k, z_k = y_{k−τ} (y_j = y_0,
  j < 0), B_{−1} = ‖∇f(x_0)‖_*. For τ = 1, ‖o_k‖ = ‖u_{k−1} − u_{k−2}‖ (step V5): the issue's
  form B_k ≤ (1−α)B_{k−1} + (1−α)L‖u_{k−1}‖ + αL‖u_{k−1} − u_{k−2}‖. Every quantity is measured
  on the run; the inequality is steps M1, M5, M3, M4 of T2 (triangle + A2), so it is nearly
  attained on sign descent (1×1) and fails when the EF rule moves w differently.
* ``L2.nesterov_momentum_lemma`` (theory-side, T1-nesterov steps N1, N8, σ = 0):
  ‖v_k − ∇f(y_k)‖_* ≤ (1−α)‖m_k − ∇f(y_k)‖_* + αL‖y_k − z_k‖₂, v_k the Nesterov input
  recomputed from the buffer, and the unrolled heavy-ball bound of property 2 for the buffer.
* ``L3.taylor_lemma`` (theory-side, step TC of :mod:`theory.taylor`): on a separable quadratic
  with 0 ≤ λg_i² ≤ 2h_i, every coordinate of the applied compensated gradient is at least as
  close to the fresh gradient as the stale one: |ĝ_i − ∇_i f(x_t)| ≤ |g_i − ∇_i f(x_t)|.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from asyncpp.optim import newton_schulz

from .problems import DTYPE, nuclear_norm, spectral_norm
from .report import Record
from .systems import PRODUCTION, System

TOL = 1e-9
#: relative slack of the measured lemmas (float64 round-off of norms and SVDs)
LEMMA_RTOL = 1e-9


def reference_ns(V: torch.Tensor) -> torch.Tensor:
    """The reference direction: production ``newton_schulz`` with its shipped defaults, in
    float64, called directly (not through the system under test)."""
    return newton_schulz(V.to(DTYPE), dtype=torch.float64)


@dataclass(frozen=True)
class IdInstance:
    """One recorded run of delayed Muon (or SGD for the Taylor properties)."""

    family: str = "quadratic"
    m: int = 3
    n: int = 2
    beta: float = 0.9
    lr: float = 0.05
    tau: int = 1
    ef: bool = True
    nesterov: bool = False
    sigma: float = 0.3
    steps: int = 12
    problem_seed: int = 0
    gamma: float = 1.0      # EF(γ): x(t+1) = x(t) − (1+γ)u(t) + γu(t−1); 1 = the paper's EF

    def params(self) -> dict:
        return asdict(self)


@dataclass
class Recording:
    xs: list          # x_t, t = 0..T (T+1 entries)
    grads: list       # g_t fed at step t
    noise: list       # ξ_t
    bufs: list        # momentum buffer after step t (None before the first applied step)
    prev: list        # EF memory u^{(t)} after step t (None when empty)
    taus: list        # delay reported for step t
    problem: object


def record_muon(inst: IdInstance, system: System = PRODUCTION) -> Recording:
    """Run ``inst.steps`` production steps and record everything the identities need."""
    from .properties import make_problem

    prob = make_problem(inst.family, inst.m, inst.n, sigma=inst.sigma, seed=inst.problem_seed)
    X = torch.nn.Parameter(prob.x0.clone().to(DTYPE))
    opt = system.muon([X], lr=inst.lr, beta=inst.beta, ns_dtype="float64",
                      nesterov=inst.nesterov)
    kw = {} if inst.gamma == 1.0 else {"ef_gamma": inst.gamma}
    dopt = system.delayed(opt, inst.tau, "ef" if inst.ef else "none", **kw)
    gen = torch.Generator().manual_seed(1000 + inst.problem_seed)
    rec = Recording([], [], [], [], [], [], prob)
    for t in range(inst.steps):
        rec.xs.append(X.detach().clone())
        xi = prob.noise(gen)
        g = prob.grad(X.detach()) + xi
        rec.noise.append(xi)
        rec.grads.append(g.clone())
        rec.taus.append(int(dopt.delay_at(t)))
        X.grad = g
        dopt.step()
        buf = opt.state.get(X, {}).get("momentum_buffer")
        rec.bufs.append(None if buf is None else buf.detach().clone())
        pu = dopt.prev_update[0]
        rec.prev.append(None if pu is None or pu[0] is None else pu[0].detach().clone())
    rec.xs.append(X.detach().clone())
    return rec


def _direction(v: torch.Tensor, lr: float) -> torch.Tensor:
    return lr * reference_ns(v)


def _residual_record(prop, inst, res, scale, extra=None) -> Record:
    rel = res / scale
    ok = math.isfinite(rel) and rel <= TOL
    return Record(prop, "upper", rel if math.isfinite(rel) else math.inf, TOL, ok,
                  params=inst.params(), extra=extra or {})


def _applied_steps(inst: IdInstance, rec: Recording):
    return [t for t in range(inst.steps) if t >= rec.taus[t]]


def ef_identities(inst: IdInstance, system: System = PRODUCTION) -> list[Record]:
    r"""I1 (EF recursion from the buffer), I2 (virtual sequence, EF only), I3 (delay model
    recomputed from scratch) on one recorded run (see the module docstring)."""
    try:
        rec = record_muon(inst, system)
    except Exception as exc:  # a mutant that cannot run fails every identity
        return [Record(p, "upper", math.inf, TOL, False, params=inst.params(),
                       extra={"raised": repr(exc)})
                for p in ("I1.ef_recursion", "I3.delay_model")]
    beta, lr = inst.beta, inst.lr
    applied = _applied_steps(inst, rec)
    # I1: u from the production buffer
    u_buf, missing = {}, None
    for t in applied:
        buf = rec.bufs[t]
        if buf is None:
            missing = t
            break
        g = rec.grads[t - rec.taus[t]]
        v = g + beta * (buf - g) if inst.nesterov else buf
        u_buf[t] = _direction(v, lr)
    # I3: u from scratch (gradient at the stated stale weights, own momentum)
    u_ref = {}
    m = torch.zeros_like(rec.xs[0])
    prob = rec.problem
    for t in applied:
        s = t - rec.taus[t]
        g = prob.grad(rec.xs[s]) + rec.noise[s]
        m = beta * m + (1 - beta) * g
        v = (1 - beta) * g + beta * m if inst.nesterov else m
        u_ref[t] = _direction(v, lr)

    def recursion(us):
        worst, prev_u = 0.0, None
        for t in range(inst.steps):
            dx = rec.xs[t + 1] - rec.xs[t]
            if t not in us:
                r = float(dx.abs().max())
            elif inst.ef:
                gam = inst.gamma
                r = float((dx + (1 + gam) * us[t]
                           - gam * (prev_u if prev_u is not None else 0)).abs().max())
            else:
                r = float((dx + us[t]).abs().max())
            if not math.isfinite(r):
                return math.inf
            worst = max(worst, r)
            if t in us:
                prev_u = us[t]
        return worst

    i1 = math.inf if missing is not None else recursion(u_buf)
    out = [_residual_record("I1.ef_recursion", inst, i1, lr,
                            extra={} if missing is None else
                            {"reason": f"no momentum buffer at applied step {missing}"}),
           _residual_record("I3.delay_model", inst, recursion(u_ref), lr,
                            extra={"reported_taus": sorted(set(rec.taus))})]
    if inst.ef:
        worst = 0.0
        for t in range(inst.steps):
            gam = inst.gamma
            w_t = rec.xs[t] + gam * (rec.prev[t - 1] if t >= 1 and rec.prev[t - 1] is not None
                                     else 0)
            w_n = rec.xs[t + 1] + gam * (rec.prev[t] if rec.prev[t] is not None else 0)
            u = u_ref.get(t)
            r = w_n - w_t + (u if u is not None else 0)
            worst = max(worst, float(r.abs().max()))
        out.append(_residual_record("I2.virtual", inst, worst, lr))
    return out


# --------------------------------------------------------------------------- lemmas
def ef_momentum_lemma(inst: IdInstance, system: System = PRODUCTION) -> Record:
    r"""L1: T2's momentum recursion at the virtual point, measured at every applied step
    (σ must be 0; heavy ball). ``measured``/``bound`` at the step of the largest ratio."""
    if inst.sigma != 0 or not inst.ef or inst.nesterov:
        raise ValueError("L1 needs sigma = 0, EF on and heavy-ball momentum")
    rec = record_muon(inst, system)
    prob = rec.problem
    tau, alpha, lr = inst.tau, 1.0 - inst.beta, inst.lr
    K = inst.steps - tau
    if any(rec.bufs[k + tau] is None for k in range(K)):
        return Record("L1.ef_momentum_lemma", "upper", math.inf, 0.0, False,
                      params=inst.params(),
                      extra={"reason": "no momentum buffer at an applied step of the stated "
                                       "delay"})
    ys = [rec.xs[k + tau] for k in range(K + 1)]
    u = [_direction(rec.bufs[k + tau], lr) if rec.bufs[k + tau] is not None else None
         for k in range(K)]

    def U(i):
        return u[i] if 0 <= i < K and u[i] is not None else torch.zeros_like(ys[0])

    B_prev = prob.grad_dual_norm(prob.x0)  # zero buffer, w_0 = x_0
    worst, at, meas, bnd, ok = -math.inf, 0, 0.0, 0.0, True
    for k in range(K):
        w_k = ys[k] + U(k - 1)
        z_k = ys[max(k - tau, 0)]
        B_k = nuclear_norm(rec.bufs[k + tau] - prob.grad(w_k))
        rhs = ((1 - alpha) * B_prev + (1 - alpha) * prob.L * spectral_norm(U(k - 1))
               + alpha * prob.L * spectral_norm(w_k - z_k))
        if not (math.isfinite(B_k) and math.isfinite(rhs)):
            return Record("L1.ef_momentum_lemma", "upper", math.inf, rhs, False,
                          params=inst.params())
        good = B_k <= rhs * (1 + LEMMA_RTOL) + 1e-12
        ok = ok and good
        ratio = B_k / rhs if rhs > 0 else (math.inf if B_k > 1e-12 else 0.0)
        if ratio > worst:
            worst, at, meas, bnd = ratio, k, B_k, rhs
        B_prev = B_k
    return Record("L1.ef_momentum_lemma", "upper", meas, bnd, ok, params=inst.params(),
                  extra={"k_worst": at, **prob.constants()})


def nesterov_momentum_lemma(inst: IdInstance, system: System = PRODUCTION) -> Record:
    r"""L2: at every applied step, with v_k = (1−β)g(z_k) + βm_k recomputed from the buffer,
    ‖v_k − ∇f(y_k)‖_* ≤ (1−α)‖m_k − ∇f(y_k)‖_* + αL‖y_k − z_k‖₂ (T1-nesterov N1+N8, A2) and
    ‖m_k − ∇f(y_k)‖_* ≤ (1−α)^{k+1}E₀ + (1−(1−α)^{k+1})Lηr((1−α)/α + τ) (property 2's
    unrolled bound, r = 1+ε₁ of float64 NS). No EF, σ = 0."""
    from . import band as bandmod

    if inst.sigma != 0 or inst.ef or not inst.nesterov:
        raise ValueError("L2 needs sigma = 0, no EF and Nesterov momentum")
    rec = record_muon(inst, system)
    prob = rec.problem
    tau, alpha, beta, lr = inst.tau, 1.0 - inst.beta, inst.beta, inst.lr
    eps1, _ = bandmod.band(min(inst.m, inst.n), torch.float64)
    r = 1 + eps1
    E0 = prob.grad_dual_norm(prob.x0)
    K = inst.steps - tau
    worst, meas, bnd, ok = -math.inf, 0.0, 0.0, True
    for k in range(K):
        t = k + tau
        y, z = rec.xs[t], rec.xs[max(t - tau, 0)]
        gz = prob.grad(z)
        buf = rec.bufs[t]
        if buf is None:
            return Record("L2.nesterov_momentum_lemma", "upper", math.inf, 0.0, False,
                          params=inst.params(), extra={"reason": f"no buffer at step {t}"})
        v = gz + beta * (buf - gz)
        gy = prob.grad(y)
        lhs = nuclear_norm(v - gy)
        Bk = nuclear_norm(buf - gy)
        rhs = (1 - alpha) * Bk + alpha * prob.L * spectral_norm(y - z)
        wk = (1 - alpha) ** (k + 1)
        unrolled = wk * E0 + (1 - wk) * prob.L * lr * r * ((1 - alpha) / alpha + tau)
        for a, b in ((lhs, rhs), (Bk, unrolled)):
            good = math.isfinite(a) and a <= b * (1 + LEMMA_RTOL) + 1e-12
            ok = ok and good
            ratio = a / b if b > 0 else (math.inf if a > 1e-12 else 0.0)
            if ratio > worst:
                worst, meas, bnd = ratio, a, b
    return Record("L2.nesterov_momentum_lemma", "upper", meas, bnd, ok, params=inst.params(),
                  extra={"eps1": eps1, "E0": E0, **prob.constants()})


# --------------------------------------------------------------------------- Taylor
@dataclass(frozen=True)
class TaylorInstance:
    """Plain SGD in the delay core with DC-ASGD compensation on f = Σ h_i x_i²/2."""

    dim: int = 4
    lr: float = 0.05
    tau: int = 1
    steps: int = 12
    seed: int = 0
    lam_frac: float = 1.0   # λ = lam_frac · min h / max g² (so λg² ≤ 2 min h for lam_frac ≤ 2)

    def params(self) -> dict:
        return asdict(self)


def taylor_properties(inst: TaylorInstance, system: System = PRODUCTION) -> list[Record]:
    r"""I4 (the compensation identity) and L3 (the Taylor lemma of :mod:`theory.taylor`) on one
    run of ``torch.optim.SGD(lr)`` in ``DelayedOptimizer(delay=τ, correction="taylor")``.
    Deterministic gradients ∇f = h⊙x; x₀ ~ N(0, 1), h ~ U(0.5, 2); lr·max h < 1, so |x_i| and
    |g_i| never exceed their start and λ = lam_frac·min h/max_i g_i(x₀)² gives λg² ≤ 2h."""
    gen = torch.Generator().manual_seed(inst.seed)
    h = 0.5 + 1.5 * torch.rand(inst.dim, generator=gen, dtype=DTYPE)
    x0 = torch.randn(inst.dim, generator=gen, dtype=DTYPE)
    lam = inst.lam_frac * float(h.min()) / float(((h * x0) ** 2).max())
    x = torch.nn.Parameter(x0.clone())
    opt = torch.optim.SGD([x], lr=inst.lr)
    dopt = system.delayed(opt, inst.tau, "taylor")
    dopt.taylor_lambda = lam
    xs, gs = [], []
    for _ in range(inst.steps):
        xs.append(x.detach().clone())
        g = h * x.detach()
        gs.append(g.clone())
        x.grad = g
        dopt.step()
    xs.append(x.detach().clone())
    ident, lemma_worst, lemma_ok, meas, bnd = 0.0, -math.inf, True, 0.0, 0.0
    for t in range(inst.steps):
        dx = xs[t + 1] - xs[t]
        s = t - inst.tau
        if s < 0:
            ident = max(ident, float(dx.abs().max()))
            continue
        g = gs[s]
        want = g + lam * g * g * (xs[t] - xs[s])
        ident = max(ident, float((dx + inst.lr * want).abs().max()))
        ghat = -dx / inst.lr
        fresh = h * xs[t]
        a = (ghat - fresh).abs()
        b = (g - fresh).abs()
        # ĝ is read back as −Δx/η: its rounding error is ~ u·|x|/η
        slack = 64 * 2.0**-52 * (xs[t].abs() + xs[t + 1].abs()) / inst.lr
        good = bool(torch.all(a <= b * (1 + LEMMA_RTOL) + slack))
        lemma_ok = lemma_ok and good
        big = b > 1e3 * slack
        ratio = float((a[big] / b[big]).max()) if bool(big.any()) else 0.0
        if ratio > lemma_worst:
            lemma_worst, meas, bnd = ratio, float(a.max()), float(b.max())
    return [_residual_record("I4.taylor", inst, ident, inst.lr, extra={"lambda": lam}),
            Record("L3.taylor_lemma", "upper", meas, bnd, lemma_ok, params=inst.params(),
                   extra={"lambda": lam, "max_coordinate_ratio": lemma_worst})]


__all__ = ["IdInstance", "TaylorInstance", "record_muon", "ef_identities", "ef_momentum_lemma",
           "nesterov_momentum_lemma", "taylor_properties", "reference_ns", "TOL"]


# --------------------------------------------------------------------------- drift bridge
def drift_bridge(inst: IdInstance, system: System = PRODUCTION) -> list[Record]:
    r"""``P4.drift_bridge``: the inequalities of ``asyncpp.delay.drift`` between the reported
    relative Frobenius drift ρ_n = D_n/U_n (:class:`~asyncpp.delay.drift.DriftMeter`) and T2's
    spectral drift δ_n = ‖u^{(n)} − u^{(n−1)}‖₂/η (:class:`~asyncpp.delay.drift.SpectralDrift`),
    on one production Muon run with ``track_updates=True`` (one m×n matrix, R = min(m, n)):

    δ_n ≤ ρ_n U_n/η ≤ (1+ε₁)√R ρ_n   and   ρ_n ≤ √R η δ_n/U_n   for every update n ≥ 1,

    and δ_n equals the spectral norm of the difference of the recorded updates (identity).
    ``measured``/``bound`` of the first record: max_n δ_n/((1+ε₁)√R ρ_n) against 1 (how much
    of the √R gap a run uses)."""
    from asyncpp.delay.drift import DriftMeter, SpectralDrift

    from . import band as bandmod
    from .properties import make_problem

    prob = make_problem(inst.family, inst.m, inst.n, sigma=inst.sigma, seed=inst.problem_seed)
    X = torch.nn.Parameter(prob.x0.clone().to(DTYPE))
    opt = system.muon([X], lr=inst.lr, beta=inst.beta, ns_dtype="float64",
                      nesterov=inst.nesterov)
    dopt = DelayedOptimizer_with_tracking(system, opt, inst)
    meter = DriftMeter.for_optimizers([dopt], inst.steps)
    spec = SpectralDrift(inst.lr)
    gen = torch.Generator().manual_seed(2000 + inst.problem_seed)
    eps1, _ = bandmod.band(min(inst.m, inst.n), torch.float64)
    R = min(inst.m, inst.n)
    pairs, deltas, ups = [], [], []
    for _ in range(inst.steps):
        X.grad = prob.grad(X.detach()) + prob.noise(gen)
        dopt.step()
        got = meter.collect([dopt])
        if got:
            pairs += got
            d = spec.observe(dopt)
            deltas.append(d)
            ups.append(dopt.last_applied[0][0].detach().clone())
    worst_up, worst_lo, worst_id, use = 0.0, 0.0, 0.0, 0.0
    ok = True
    for n in range(1, len(pairs)):
        U = math.sqrt(pairs[n][0])
        rho = math.sqrt(pairs[n][1] / pairs[n][0]) if pairs[n][0] > 0 else 0.0
        dlt = deltas[n]
        direct = spectral_norm(ups[n] - ups[n - 1]) / inst.lr
        worst_id = max(worst_id, abs(dlt - direct) / max(direct, 1e-300))
        tol = 1e-9 * (1 + dlt)
        ok = ok and dlt <= rho * U / inst.lr + tol
        ok = ok and rho * U / inst.lr <= (1 + eps1) * math.sqrt(R) * rho + tol
        ok = ok and rho <= math.sqrt(R) * inst.lr * dlt / max(U, 1e-300) + 1e-9 * (1 + rho)
        if rho > 0:
            use = max(use, dlt / ((1 + eps1) * math.sqrt(R) * rho))
        worst_up = max(worst_up, dlt - rho * U / inst.lr)
        worst_lo = max(worst_lo, rho - math.sqrt(R) * inst.lr * dlt / max(U, 1e-300))
    ok = ok and worst_id <= 1e-9 and len(pairs) >= 2
    return [Record("P4.drift_bridge", "upper", use, 1.0, ok, params=inst.params(),
                   extra={"R": R, "eps1": eps1, "identity_rel_error": worst_id,
                          "updates": len(pairs), "mean_spectral_drift": spec.mean()})]


def DelayedOptimizer_with_tracking(system: System, opt, inst: IdInstance):  # noqa: N802
    """The system's delay core with ``track_updates=True``."""
    return system.delayed(opt, inst.tau, "ef" if inst.ef else "none", track_updates=True)
