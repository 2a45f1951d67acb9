r"""PEP — exact worst cases of delayed EMA-momentum gradient descent over L-smooth functions.

T3 (:mod:`theory.stability`) gives the exact stable-step edge :math:`c^*` on quadratics. This
module asks the same question over the whole class of L-smooth convex (or non-convex)
functions, by performance estimation (Taylor, Hendrickx, Glineur 2017; the ``PEPit`` package):
the worst case after K steps is the value of a small semidefinite program, and it is *exact*
(the SDP's solution is the Gram matrix of an actual worst-case function's iterates).

**The method** (production semantics: ``torch.optim.SGD(lr=η, momentum=β, dampening=β)``
inside ``asyncpp.delay.DelayedOptimizer(delay=τ, correction=...)``, gradient formulation),
:math:`g_t = \nabla f(x_t)`:

.. math::
    x_{t+1} &= x_t \quad (t < \tau),\qquad
    m_{\tau} = g_0,\quad m_t = \beta m_{t-1} + (1-\beta)\,g_{t-\tau}\ (t > \tau),\\
    u_t &= \eta\, m_t,\qquad x_{t+1} = x_t - (1+\gamma)\,u_t + \gamma\,u_{t-1}\quad
    (t \ge \tau,\ u_{\tau-1} = 0),

γ = 0 no correction, γ = 1 the paper's EF, γ = γ*(β, τ) the T3-tuned EF(γ*); with τ = 0 the
delay core applies no correction, so γ is ignored there. The first momentum buffer is the
gradient itself (torch's initialisation), K counts *applied* updates, and the final iterate is
:math:`x_N`, :math:`N = \tau + K`.

**Worst cases** (L = 1 without loss of generality: the class is scale invariant, so everything
is a function of ηL):

* convex: :math:`W_K = \max f(x_N) - f_*` over L-smooth convex f and
  :math:`\|x_0 - x_*\|^2 \le 1`; before any step the worst case is :math:`W_0 = L/2`;
* non-convex: :math:`W_K = \max \min_{0 \le t \le N} \|\nabla f(x_t)\|^2` over L-smooth f with
  :math:`f(x_0) - f(x_t) \le 1` for every iterate t (implied by
  :math:`f(x_0) - \inf f \le 1`, so :math:`W_K` is a valid bound for that condition).

**Contraction, defined.** Convex: the method contracts at horizon K when
:math:`\rho_K = W_K/W_0 < 1` — after K updates the guaranteed gap is below the worst gap at
the start. Non-convex: before any step nothing is guaranteed (:math:`W_0 = \infty`), and a
finite :math:`W_K` only says that *some* early iterate descends (the first update alone
certifies one while :math:`(1+\gamma)\eta L < 2`); the method contracts at horizon K when the
guarantee still improves as the horizon doubles, :math:`W_{2K} < (1-\delta)\,W_K < \infty`
(δ = :data:`NONCONVEX_MARGIN`; :math:`W_K` never increases with K, and a method that
stops making guaranteed progress has :math:`W_{2K} = W_K`). The *PEP edge* is the largest
ηL below which every step contracts (grid scan, then bisection: :func:`pep_edge`). The convex
criterion restricted to the quadratics :math:`f = h x^2/2`, :math:`0 < h \le L` (they are in
the class) is computed exactly (:func:`quadratic_worst_case`), so both edges can be compared at
the same K. At long horizons the quadratic one cannot exceed T3's :math:`c^*`: a step past
:math:`c^*` is unstable on some quadratic, whose worst case then eventually grows past
:math:`W_0`. Since the class contains the quadratics, neither can the PEP edge.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from dataclasses import dataclass

import numpy as np

#: above this the non-convex worst case counts as unbounded (the SDP's value grows without
#: bound where no K-step guarantee exists)
NONCONVEX_CAP = 1e4
#: the non-convex guarantee "still improves" when doubling the horizon lowers it by more than
#: this fraction (a convergent method's ~1/K bound halves; a stalled one stays equal to 1e-8)
NONCONVEX_MARGIN = 0.01
#: the SDP solver (interior point, ships with cvxpy); SCS is the fallback
SOLVER = "CLARABEL"
CLASSES = ("convex", "nonconvex")
#: the edge searches scan ηL from here (every method studied contracts there) ...
EDGE_FLOOR = 0.05
#: ... up to at most here (an edge reported equal to it means "at least")
EDGE_CEILING = 12.0


@dataclass(frozen=True)
class Method:
    """Delayed EMA-momentum SGD with EF(γ): step η (in units of 1/L), momentum β, delay τ."""

    eta: float
    beta: float
    tau: int
    gamma: float = 0.0

    def __post_init__(self):
        if not (isinstance(self.tau, (int, np.integer)) and not isinstance(self.tau, bool)
                and self.tau >= 0):
            raise ValueError(f"tau must be an integer delay >= 0, got {self.tau!r}")
        if not (0.0 <= float(self.beta) < 1.0):
            raise ValueError(f"beta (momentum) must lie in [0, 1), got {self.beta!r}")
        if not (math.isfinite(float(self.eta)) and float(self.eta) > 0):
            raise ValueError(f"eta (step, units of 1/L) must be a finite number > 0, "
                             f"got {self.eta!r}")
        if not (math.isfinite(float(self.gamma)) and float(self.gamma) >= 0):
            raise ValueError(f"gamma (EF coefficient) must be a finite number >= 0, "
                             f"got {self.gamma!r}")


def run(method: Method, grad, x0, K: int):
    r"""The iterates :math:`x_0, \dots, x_N` (N = τ + K) of ``method`` from ``x0``, with
    ``grad(x)`` the gradient oracle. Written once for PEPit points and for numpy arrays (the
    recursion is linear in the gradients), so the PEP and the numeric check run the same
    code. Returns ``(xs, consumed)``: every iterate, and the indices of the iterates whose
    gradients entered an update."""
    eta, beta, tau = float(method.eta), float(method.beta), int(method.tau)
    gamma = float(method.gamma) if tau >= 1 else 0.0
    xs = [x0]
    grads: dict[int, object] = {}
    m = u_prev = None
    consumed = []
    for t in range(tau + K):
        x = xs[-1]
        if t < tau:
            xs.append(x)  # the pipeline fills: nothing to apply yet
            continue
        s = t - tau
        if s not in grads:
            grads[s] = grad(xs[s])
        consumed.append(s)
        m = grads[s] if m is None else beta * m + (1.0 - beta) * grads[s]
        u = eta * m
        if gamma == 0.0:
            x_next = x - u
        elif u_prev is None:
            x_next = x - (1.0 + gamma) * u
        else:
            x_next = x - (1.0 + gamma) * u + gamma * u_prev
        u_prev = u
        xs.append(x_next)
    return xs, consumed


def _distinct(xs):
    """Indices of the distinct iterates (x_1 … x_τ are x_0 itself)."""
    out, seen = [], set()
    for i, x in enumerate(xs):
        if id(x) not in seen:
            seen.add(id(x))
            out.append(i)
    return out


def build(method: Method, K: int, cls: str = "convex"):
    """The PEP of ``method`` after K updates on the class ``cls``: ``(problem, func, xs, xs_star)``
    (``xs_star`` the minimiser for the convex class, None otherwise)."""
    from PEPit import PEP
    from PEPit.functions import SmoothConvexFunction, SmoothFunction

    if cls not in CLASSES:
        raise ValueError(f"unknown function class {cls!r}; allowed: {CLASSES}")
    if not (isinstance(K, (int, np.integer)) and K >= 1):
        raise ValueError(f"K (number of updates) must be an integer >= 1, got {K!r}")
    problem = PEP()
    if cls == "convex":
        func = problem.declare_function(SmoothConvexFunction, L=1.0)
        x_star = func.stationary_point()
        f_star = func(x_star)
        x0 = problem.set_initial_point()
        problem.set_initial_condition((x0 - x_star) ** 2 <= 1)
        xs, _ = run(method, func.gradient, x0, K)
        problem.set_performance_metric(func(xs[-1]) - f_star)
        return problem, func, xs, x_star
    func = problem.declare_function(SmoothFunction, L=1.0)
    x0 = problem.set_initial_point()
    xs, _ = run(method, func.gradient, x0, K)
    f0 = func(x0)
    for i in _distinct(xs):
        g = func.gradient(xs[i])
        problem.set_performance_metric(g ** 2)
        if i > 0:
            problem.set_initial_condition(f0 - func(xs[i]) <= 1)
    return problem, func, xs, None


def _solve(problem, tight: bool = False) -> float:
    """The SDP's value (dual, i.e. a certified upper bound); ``inf`` when it is unbounded.
    ``tight``: interior-point tolerances 1e-11 instead of Clarabel's 1e-8 (for a worst-case
    instance whose coordinates are read back: they carry the square root of the Gram
    matrix's error)."""
    import cvxpy as cp

    opts = {"tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11} if tight else {}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        # cvxpy's "solution may be inaccurate" and PEPit's duality-gap notice near the edge:
        # the edge search decides on the value, which the notices do not change
        warnings.simplefilter("ignore")
        try:
            v = problem.solve(wrapper="cvxpy", solver=getattr(cp, SOLVER), verbose=0, **opts)
        except cp.error.SolverError:
            if not tight:
                return math.inf
            v = problem.solve(wrapper="cvxpy", solver=getattr(cp, SOLVER), verbose=0)
    if v is None or not math.isfinite(float(v)):
        return math.inf
    return float(v)


def worst_case(method: Method, K: int, cls: str = "convex") -> float:
    """:math:`W_K`: the exact worst case of ``method`` after K updates over the class (L = 1)."""
    problem, *_ = build(method, K, cls)
    return _solve(problem)


def initial_worst_case(cls: str = "convex") -> float:
    r""":math:`W_0`: the worst case before any step (convex: :math:`L\|x_0 - x_*\|^2/2 = 1/2`)."""
    if cls == "convex":
        return 0.5
    return math.inf


def contracts(method: Method, K: int, cls: str = "convex") -> bool:
    """Convex: :math:`W_K < W_0`. Non-convex: :math:`W_{2K} < (1 - \\delta) W_K < \\infty`,
    δ = :data:`NONCONVEX_MARGIN`."""
    w = worst_case(method, K, cls)
    if cls == "convex":
        return w < initial_worst_case(cls)
    if not w <= NONCONVEX_CAP:
        return False
    return worst_case(method, 2 * K, cls) < (1.0 - NONCONVEX_MARGIN) * w


def quadratic_factors(method: Method, K: int, h):
    r"""On :math:`f = h x^2/2` (a 1-D instance; matrices decouple along eigenvectors) the
    iterate is :math:`x_N = r_N(h)\,x_0`: the transfer factors :math:`r_N` for an array of h,
    from the same :func:`run` on numpy arrays (linear in :math:`x_0`)."""
    h = np.asarray(h, dtype=float)
    xs, _ = run(method, lambda x: h * x, np.ones_like(h), K)
    return xs[-1]


def quadratic_worst_case(method: Method, K: int, n_grid: int = 4001) -> float:
    r"""The convex criterion restricted to quadratics:
    :math:`\max_{0 < h \le 1} h\,r_N(h)^2/2` (for a matrix quadratic the weights
    :math:`x_{0,i}^2` sum to at most 1, so the worst one is an eigen-direction); a dense grid
    in h then a local refinement of the best grid point."""
    hs = np.linspace(0.0, 1.0, n_grid)[1:]
    vals = hs * quadratic_factors(method, K, hs) ** 2 / 2
    i = int(np.argmax(vals))
    lo, hi = hs[max(0, i - 1)], hs[min(len(hs) - 1, i + 1)]
    fine = np.linspace(lo, hi, 401)
    return float(max(vals[i], np.max(fine * quadratic_factors(method, K, fine) ** 2 / 2)))


def bisect_edge(pred, lo: float, hi: float, tol: float = 1e-3, grid: int = 24) -> float:
    """The largest s in [lo, hi] such that pred holds on a grid of (lo, s] — first a scan of
    ``grid`` geometrically spaced points (so that a second, disconnected good interval is not
    mistaken for the first one), then bisection between the last good and the first bad grid
    point. ``pred(lo)`` must hold; returns ``hi`` if every grid point passes."""
    pts = np.geomspace(lo, hi, grid + 1)
    good = pts[0]
    bad = None
    for s in pts[1:]:
        if pred(float(s)):
            good = s
        else:
            bad = s
            break
    if bad is None:
        return float(hi)
    a, b = float(good), float(bad)
    while b - a > tol:
        mid = 0.5 * (a + b)
        if pred(mid):
            a = mid
        else:
            b = mid
    return a


def pep_edge(beta: float, tau: int, gamma: float, K: int, cls: str = "convex",
             hi: float | None = None, tol: float = 1e-3) -> float:
    """The largest ηL (units of 1/L) at which the worst case over the class contracts at
    horizon K, for every smaller step (see the module docstring)."""
    if hi is None:
        hi = search_ceiling(beta, tau, gamma)
    return bisect_edge(lambda s: contracts(Method(s, beta, tau, gamma), K, cls),
                       EDGE_FLOOR, hi, tol, grid=32)


def quadratic_edge_K(beta: float, tau: int, gamma: float, K: int, tol: float = 1e-4,
                     hi: float | None = None) -> float:
    """The same convex criterion on quadratics only (exact, cheap): the largest ηL with
    :math:`\\max_h h r_N(h)^2/2 < 1/2` for every smaller step."""
    if hi is None:
        hi = search_ceiling(beta, tau, gamma)
    return bisect_edge(lambda s: quadratic_worst_case(Method(s, beta, tau, gamma), K) < 0.5,
                       EDGE_FLOOR, hi, tol, grid=200)


def search_ceiling(beta: float, tau: int, gamma: float) -> float:
    """Where the edge searches stop: twice T3's c* plus 1/2, at most :data:`EDGE_CEILING`."""
    return min(2.0 * quadratic_edge(beta, tau, gamma) + 0.5, EDGE_CEILING)


def quadratic_edge(beta: float, tau: int, gamma: float) -> float:
    """T3's :math:`c^*(\\beta, \\tau, \\gamma)` (γ = 0: no correction; τ = 0: synchronous)."""
    from . import stability as T3

    if tau == 0 or gamma == 0:
        return float(T3.critical_step(beta, tau, False))
    return float(T3.critical_step(beta, tau, True, gamma=float(gamma)))


def solve_with_points(method: Method, K: int):
    """Solve the convex PEP and return its worst-case instance: ``dict`` with the iterates'
    coordinates ``x`` (N+1, d), gradients ``g``, values ``f`` (shifted so f_* = 0), the
    minimiser ``x_star``, and the value ``W``. The interpolation data of the whole solution
    (every point PEPit evaluated, minimiser included) is ``data`` = (X, G, F)."""
    problem, func, xs, x_star = build(method, K, "convex")
    value = _solve(problem, tight=True)
    X, G, F = [], [], []
    for (pt, gr, fv) in func.list_of_points:
        X.append(np.asarray(pt.eval(), dtype=float).ravel())
        G.append(np.asarray(gr.eval(), dtype=float).ravel())
        F.append(float(np.asarray(fv.eval()).ravel()[0]))
    xst = np.asarray(x_star.eval(), dtype=float).ravel()
    f_star = float(np.asarray(func(x_star).eval()).ravel()[0])
    return {
        "W": value,
        "x": np.array([np.asarray(p.eval(), dtype=float).ravel() for p in xs]),
        "x_star": xst,
        "data": (np.array(X), np.array(G), np.array(F) - f_star),
    }


class ConvexInterpolant:
    r"""The lowest L-smooth convex function through data :math:`(x_i, g_i, f_i)` (Taylor,
    Hendrickx, Glineur 2017, Thm 4): its conjugate is the smallest (1/L)-strongly convex
    function with subgradient :math:`x_i` at :math:`g_i`,
    :math:`f^*(y) = \max_i \{\langle g_i, x_i\rangle - f_i + \langle x_i, y - g_i\rangle
    + \|y - g_i\|^2/(2L)\}`, so

    .. math::
        f(x) = \max_y\ \langle x, y\rangle - f^*(y),\qquad \nabla f(x) = y^*(x),

    a small convex QP per evaluation. It is defined (and L-smooth, convex) everywhere, so a
    method that leaves the worst-case trajectory gets the gradients of a genuine function in
    the class, not a lookup of the PEP's."""

    def __init__(self, X, G, F, L: float = 1.0):
        self.X, self.G, self.F = (np.asarray(a, dtype=float) for a in (X, G, F))
        self.L = float(L)
        self.c = np.einsum("ij,ij->i", self.G, self.X) - self.F

    def __call__(self, x):
        """``(f(x), ∇f(x))``."""
        import cvxpy as cp

        x = np.asarray(x, dtype=float).ravel()
        y, t = cp.Variable(x.size), cp.Variable()
        cons = [self.c[i] + self.X[i] @ (y - self.G[i])
                + cp.sum_squares(y - self.G[i]) / (2 * self.L) <= t
                for i in range(len(self.F))]
        prob = cp.Problem(cp.Minimize(t - x @ y), cons)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                prob.solve(solver=getattr(cp, SOLVER), tol_gap_abs=1e-11, tol_gap_rel=1e-11,
                           tol_feas=1e-11)
            except cp.error.SolverError:  # tolerances out of reach: the solver's defaults
                prob.solve(solver=getattr(cp, SOLVER))
        if y.value is None:
            raise RuntimeError(f"the interpolant's QP at x = {x} did not solve "
                               f"({prob.status})")
        return float(-prob.value), np.asarray(y.value, dtype=float)


# --------------------------------------------------------------------------- the results
#: the committed results, regenerated by ``python -m theory.pep_delay --write``
RESULTS_PATH = "theory/pep_delay_results.json"
#: the book's momentum, whose transient (the first buffer is the raw gradient, weight
#: :math:`1/(1-\beta)` against the EMA's) is over within a few steps; K ≤ 16 still overshoots
#: T3's long-horizon edge in places (the PEP page prints the largest overshoot)
BETA = 0.5
BETAS = (0.5, 0.9)
K_CURVES = 8
K_EDGES = (4, 8, 16)
K_EDGES_NONCONVEX = {0.5: (4, 8), 0.9: (4,)}
#: the γ scan's fixed step, as a share of T3's c*(β, τ, γ*)
FIXED_STEP_SHARE = 0.9
TOL = 2e-3


def methods(beta: float) -> list[tuple[str, int, float]]:
    """``(label, τ, γ)``: synchronous, then none / EF / EF(γ*) for τ = 1, 2 (γ* of the
    product's :func:`asyncpp.delay.optimal_ef_gamma`)."""
    from asyncpp.delay import optimal_ef_gamma

    out = [("synchronous", 0, 0.0)]
    for tau in (1, 2):
        out += [("none", tau, 0.0), ("EF", tau, 1.0),
                ("EF(γ*)", tau, float(optimal_ef_gamma(beta, tau)))]
    return out


#: the parts of the results, each recomputable alone (``--only``)
PARTS = ("curves", "edges", "gamma_scan", "gamma_scan_long")
#: the horizon of the longer γ scan (fewer γ, around γ*)
K_GAMMA_LONG = 16


def compute_results(log=None, parts=PARTS, into: dict | None = None) -> dict:
    """Everything the book page shows: worst-case curves, edges, the γ scan at K = 8 and a
    coarser one at K = 16 (``parts``: which of :data:`PARTS` to compute, updating ``into``)."""
    from importlib.metadata import version

    def say(msg):
        if log is not None:
            log(msg)

    out = dict(into or {})
    out.update({"command": f"python -m theory.pep_delay --write  (writes {RESULTS_PATH})",
                "solver": SOLVER, "cvxpy": version("cvxpy"), "pepit": version("pepit"),
                "beta": BETA, "K_curves": K_CURVES, "tol": TOL,
                "nonconvex_margin": NONCONVEX_MARGIN})
    out.setdefault("timings_s", {})
    if "curves" in parts:
        _curves(out, say)
    if "edges" in parts:
        _edges(out, say)
    if "gamma_scan" in parts:
        _gamma_scan(out, say)
    if "gamma_scan_long" in parts:
        _gamma_scan_long(out, say)
    return out


def _curves(out: dict, say) -> None:
    import time

    t0 = time.time()
    curves = {}
    for label, tau, gamma in methods(BETA):
        top = 1.5 * quadratic_edge(BETA, tau, gamma)
        etas = [float(v) for v in np.linspace(0.05, top, 25)]
        ms = [Method(e, BETA, tau, gamma) for e in etas]
        curves[f"tau{tau}-{label}"] = {
            "label": label, "tau": tau, "gamma": gamma, "eta": etas,
            "pep": [worst_case(m, K_CURVES) for m in ms],
            "quad": [quadratic_worst_case(m, K_CURVES) for m in ms],
            "pep_nonconvex": [worst_case(m, K_CURVES, "nonconvex") for m in ms],
        }
        say(f"curve τ={tau} {label}: {time.time() - t0:.0f}s")
    out["curves"] = curves
    out["timings_s"]["curves"] = time.time() - t0


def _edges(out: dict, say) -> None:
    import time

    t0 = time.time()
    rows = []
    for beta in BETAS:
        for label, tau, gamma in methods(beta):
            for K in K_EDGES:
                t1 = time.time()
                row = {"beta": beta, "label": label, "tau": tau, "gamma": gamma, "K": K,
                       "c_star": quadratic_edge(beta, tau, gamma),
                       "quad_K": quadratic_edge_K(beta, tau, gamma, K, tol=TOL / 4),
                       "pep_convex": pep_edge(beta, tau, gamma, K, "convex", tol=TOL),
                       "pep_nonconvex": None}
                if K in K_EDGES_NONCONVEX[beta]:
                    row["pep_nonconvex"] = pep_edge(beta, tau, gamma, K, "nonconvex", tol=TOL)
                row["seconds"] = time.time() - t1
                rows.append(row)
                say(f"edge β={beta} τ={tau} {label} K={K}: {row}")
    out["edges"] = rows
    out["timings_s"]["edges"] = time.time() - t0


def _gstar(tau: int) -> float:
    return {t: g for lab, t, g in methods(BETA) if lab == "EF(γ*)"}[tau]


def _gamma_scan(out: dict, say) -> None:
    import time

    t0 = time.time()
    scans = {}
    for tau in (1, 2):
        gstar = _gstar(tau)
        gammas = [float(v) for v in np.linspace(0.0, 2.0 + tau, 21)]
        eta_fixed = FIXED_STEP_SHARE * quadratic_edge(BETA, tau, gstar)
        scans[f"tau{tau}"] = {
            "tau": tau, "gamma_star": gstar, "K": K_CURVES, "gamma": gammas,
            "c_star": [quadratic_edge(BETA, tau, g) for g in gammas],
            "quad_edge": [quadratic_edge_K(BETA, tau, g, K_CURVES, tol=TOL / 4)
                          for g in gammas],
            "pep_edge": [pep_edge(BETA, tau, g, K_CURVES, "convex", tol=TOL) for g in gammas],
            "eta_fixed": eta_fixed,
            "pep_fixed": [worst_case(Method(eta_fixed, BETA, tau, g), K_CURVES)
                          for g in gammas],
            "quad_fixed": [quadratic_worst_case(Method(eta_fixed, BETA, tau, g), K_CURVES)
                           for g in gammas],
        }
        say(f"γ scan τ={tau}: {time.time() - t0:.0f}s")
    out["gamma_scan"] = scans
    out["timings_s"]["gamma_scan"] = time.time() - t0


def _gamma_scan_long(out: dict, say) -> None:
    import time

    t0 = time.time()
    scans = {}
    for tau in (1, 2):
        gstar = _gstar(tau)
        gammas = sorted({0.0, 0.5 * gstar, gstar, 1.5 * gstar, 1.0, 2.0})
        scans[f"tau{tau}"] = {
            "tau": tau, "gamma_star": gstar, "K": K_GAMMA_LONG, "gamma": gammas,
            "c_star": [quadratic_edge(BETA, tau, g) for g in gammas],
            "quad_edge": [quadratic_edge_K(BETA, tau, g, K_GAMMA_LONG, tol=TOL / 4)
                          for g in gammas],
            "pep_edge": [pep_edge(BETA, tau, g, K_GAMMA_LONG, "convex", tol=TOL)
                         for g in gammas],
        }
        say(f"γ scan K={K_GAMMA_LONG} τ={tau}: {time.time() - t0:.0f}s")
    out["gamma_scan_long"] = scans
    out["timings_s"]["gamma_scan_long"] = time.time() - t0


def main(argv=None) -> int:
    """``python -m theory.pep_delay [--write]``: compute the results (a few minutes) and print
    a summary, or write them to :data:`RESULTS_PATH`."""
    import argparse
    import json
    import sys
    from pathlib import Path

    ap = argparse.ArgumentParser(prog="python -m theory.pep_delay", description=main.__doc__)
    ap.add_argument("--write", action="store_true", help=f"write {RESULTS_PATH}")
    ap.add_argument("--only", choices=PARTS, action="append",
                    help="recompute only this part (repeatable), keeping the others of the "
                         "existing file")
    args = ap.parse_args(argv)
    path = Path(__file__).resolve().parent.parent / RESULTS_PATH
    into = None
    if args.only:
        if not path.is_file():
            print(f"error: --only updates {path}, which does not exist; run --write first",
                  file=sys.stderr)
            return 2
        into = json.loads(path.read_text())
    res = compute_results(log=lambda m: print(m, file=sys.stderr, flush=True),
                          parts=tuple(args.only or PARTS), into=into)
    text = json.dumps(res, indent=1, allow_nan=True) + "\n"
    if args.write:
        path.write_text(text)
        print(f"wrote {path}")
    else:
        print(text)
    return 0


__all__ = ["BETA", "BETAS", "CLASSES", "EDGE_CEILING", "EDGE_FLOOR", "FIXED_STEP_SHARE",
           "K_CURVES", "K_EDGES", "K_EDGES_NONCONVEX", "K_GAMMA_LONG", "NONCONVEX_CAP",
           "NONCONVEX_MARGIN", "PARTS", "RESULTS_PATH", "SOLVER", "TOL", "ConvexInterpolant",
           "Method", "bisect_edge", "build", "compute_results", "contracts",
           "initial_worst_case", "main", "methods", "pep_edge", "quadratic_edge",
           "quadratic_edge_K", "quadratic_factors", "quadratic_worst_case", "run",
           "search_ceiling", "solve_with_points", "worst_case"]


if __name__ == "__main__":
    raise SystemExit(main())
