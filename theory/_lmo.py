r"""Proof chains shared by T1, T2 and T4: the descent part and the momentum-error part.

Notation (one applied step k of an LMO method with direction input v_k):

* y_k — the point whose gradient the bound measures (T1: the iterate; T2: the virtual point);
  y_{k+1} = y_k − η d_k, d_k = lmo(v_k) (inexact, band (BAND));
* v_k — the LMO input: the EMA momentum m_k = (1−α)m_{k−1} + α g(z_k) (heavy ball), or the
  Nesterov combination α g(z_k) + (1−α) m_k; z_k is the point the gradient was computed at;
* e_k = v_k − ∇f(y_k) — the input error; a_k (noise part) + b_k (deterministic part).

Pointwise placeholders (lower case) and expectations (upper case) are functions of k:
f = f(y_k), n = ‖∇f(y_k)‖†, e = ‖e_k‖†; F = E f, N = E n, R = E e, A = E‖a_k‖†, B = E‖b_k‖†,
V = E‖a_k‖₂², X = E‖ξ_k‖₂², S = E‖∇f(y_{k−1}) − ∇f(y_k)‖†, G = E‖∇f(z_k) − ∇f(y_k)‖†.
"""

from __future__ import annotations

import sympy as sp

from .assumptions import (
    E0,
    Delta,
    K,
    L,
    Step,
    alpha,
    dot,
    eps1,
    eps2,
    eq,
    eta,
    ge,
    k,
    le,
    r,
    rho,
    sigma,
    vector,
)

w = 1 - alpha
Cp = 2 + eps1 - eps2  # C·(1 − ε₂)

# pointwise (one realisation)
f = sp.Function(r"f", real=True)
n = sp.Function(r"\|\nabla f\|", nonnegative=True)
e = sp.Function(r"\|e\|", nonnegative=True)
ip_g = sp.Symbol(r"\langle\nabla f,d\rangle", real=True)
ip_v = sp.Symbol(r"\langle v,d\rangle", real=True)
ip_e = sp.Symbol(r"\langle v-\nabla f,d\rangle", real=True)
dnorm = sp.Symbol(r"\|d\|", nonnegative=True)
vnorm = sp.Symbol(r"\|v\|\dagger", nonnegative=True)

# expectations
F = sp.Function(r"\mathbb{E}f", real=True)
N = sp.Function(r"\mathbb{E}\|\nabla f\|", nonnegative=True)
R = sp.Function(r"\mathbb{E}\|e\|", nonnegative=True)
A = sp.Function(r"\mathbb{E}\|a\|", nonnegative=True)
B = sp.Function(r"\mathbb{E}\|b\|", nonnegative=True)
V = sp.Function(r"\mathbb{E}\|a\|2", nonnegative=True)
X = sp.Function(r"\mathbb{E}\|\xi\|2", nonnegative=True)
S = sp.Function(r"\mathbb{E}\|S\|", nonnegative=True)
G = sp.Function(r"\mathbb{E}\|D\|", nonnegative=True)
At = sp.Function(r"\mathbb{E}\|\tilde a\|", nonnegative=True)
Bt = sp.Function(r"\mathbb{E}\|\tilde b\|", nonnegative=True)
Vt = sp.Function(r"\mathbb{E}\|\tilde a\|2", nonnegative=True)

_v = sp.Symbol("v", positive=True)  # a generic non-negative argument for monotonicity


def summ(expr, lo=0, hi=None):
    """Σ_{k=lo}^{hi} expr (hi defaults to K − 1)."""
    return sp.Sum(expr, (k, lo, K - 1 if hi is None else hi))


LEGEND = {
    f(k): "$f$ at the measured point $y_k$",
    N(k): r"$\mathbb{E}$ of the dual norm of $\nabla f(y_k)$",
    R(k): r"$\mathbb{E}$ of the dual norm of the LMO-input error $v_k - \nabla f(y_k)$",
    B(k): r"$\mathbb{E}$ of the deterministic part $b_k$ of the error",
    V(k): r"$\mathbb{E}$ of the squared Euclidean norm of the noise part $a_k$",
}


def descent_steps(prefix: str = "D") -> tuple[list[Step], Step]:
    r"""Steps D1–D14: from the descent lemma to the summed inequality

    (1 − ε₂) η Σ_{k<K} N(k) ≤ Δ₀ + η(2 + ε₁ − ε₂) Σ_{k<K} R(k) + K L η² (1+ε₁)² / 2.
    """
    P = prefix
    s = []
    d1 = Step(f"{P}1 descent lemma", "cited",
              le(f(k + 1), f(k) - eta * ip_g + L * eta**2 * dnorm**2 / 2),
              r"A2 gives $f(y) \le f(x) + \langle\nabla f(x), y-x\rangle + \frac{L}{2}\|y-x\|^2$; "
              r"here $y - x = -\eta d_k$",
              refs=("A2",))
    d2 = Step(f"{P}2 band: norm", "assumption", le(dnorm, r), r"BAND: $\|d_k\| \le 1+\epsilon_1$",
              refs=("BAND",))
    d3 = Step(f"{P}3 descent with band", "inequality",
              le(f(k + 1), f(k) - eta * ip_g + L * eta**2 * r**2 / 2),
              uses=((d1, 1), (d2, L * eta**2 * (r + dnorm) / 2)))
    g_, v_, d_ = vector("g"), vector("v"), vector("d")
    d4 = Step(f"{P}4 split inner product", "identity", eq(ip_g, ip_v - ip_e),
              r"$\langle\nabla f, d\rangle = \langle v, d\rangle - \langle v - \nabla f, d\rangle$ "
              r"(bilinearity; checked on vectors of $\mathbb{R}^3$)",
              model={ip_g: dot(g_, d_), ip_v: dot(v_, d_), ip_e: dot(v_ - g_, d_)})
    d5 = Step(f"{P}5 duality", "cited", le(ip_e, e(k) * dnorm),
              r"$\langle u, d\rangle \le \|u\|_\dagger\,\|d\|$ (definition of the dual norm)")
    d6 = Step(f"{P}6 duality with band", "inequality", le(ip_e, r * e(k)),
              uses=((d5, 1), (d2, e(k))))
    d7 = Step(f"{P}7 band: inner product", "assumption", ge(ip_v, (1 - eps2) * vnorm),
              r"BAND: $\langle v_k, d_k\rangle \ge (1-\epsilon_2)\,\|v_k\|_\dagger$",
              refs=("BAND",))
    d8 = Step(f"{P}8 triangle", "cited", ge(vnorm, n(k) - e(k)),
              r"$\|v\|_\dagger \ge \|\nabla f\|_\dagger - \|v - \nabla f\|_\dagger$ (triangle "
              "inequality)")
    d9 = Step(f"{P}9 progress of the direction", "inequality",
              ge(ip_g, (1 - eps2) * n(k) - Cp * e(k)),
              uses=((d7, 1), (d8, 1 - eps2), (d6, 1)), rewrites=(d4,))
    d10 = Step(f"{P}10 one-step descent", "inequality",
               le(f(k + 1), f(k) - eta * (1 - eps2) * n(k) + eta * Cp * e(k)
                  + L * eta**2 * r**2 / 2),
               uses=((d3, 1), (d9, eta)))
    d11 = Step(f"{P}11 expectation", "cited",
               le(F(k + 1), F(k) - eta * (1 - eps2) * N(k) + eta * Cp * R(k)
                  + L * eta**2 * r**2 / 2),
               f"{P}10 is linear in $(f, n, e)$ with deterministic coefficients; "
               r"$\mathbb{E}$ is linear and monotone")
    d12 = Step(f"{P}12 telescoping", "sum",
               eq(summ(F(k + 1)), summ(F(k)) + F(K) - F(0)))
    d13 = Step(f"{P}13 bounded below", "assumption", le(F(0) - F(K), Delta),
               "A0; $F(0) = f(x_0)$ because the idle start steps and the virtual point start at "
               "$x_0$", refs=("A0",))
    d14 = Step(f"{P}14 summed descent", "inequality",
               le((1 - eps2) * eta * summ(N(k)),
                  Delta + eta * Cp * summ(R(k)) + K * L * eta**2 * r**2 / 2),
               uses=((d11, 1, (k, 0, K - 1)), (d13, 1)), rewrites=(d12,))
    s += [d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11, d12, d13, d14]
    return s, d14


def momentum_steps(delay_bound, delay_note: str, nesterov: bool, prefix: str = "M",
                   delay_refs: tuple = ("A2",)) -> tuple[list[Step], Step, sp.Expr]:
    r"""Steps M1–M19: the summed input error Σ_{k<K} R(k) ≤ total.

    ``delay_bound`` is an upper bound on G(k) = E‖∇f(z_k) − ∇f(y_k)‖† (may depend on k).
    Heavy ball:  total = K√(α/(2−α)) ρσ + ((1−α)E₀ + K(1−α)Lη(1+ε₁))/α + Σ_k delay_bound(k).
    Nesterov:    total = Kν_N ρσ + ((1−α)²E₀ + K(1−α)²Lη(1+ε₁))/α + Σ_k delay_bound(k),
    ν_N = √(α(1−α)⁴/(2−α) + α²(2−α)²).
    """
    P = prefix
    st: list[Step] = []
    mprev, gy, gyprev, gz, xi = sp.symbols("m_prev g_y g_yprev g_z xi", real=True)
    m_k = w * mprev + alpha * (gz + xi)
    m1 = Step(f"{P}1 error recursion", "identity",
              eq(m_k - gy, w * (mprev - gyprev) + w * (gyprev - gy) + alpha * (gz - gy)
                 + alpha * xi),
              r"$m_k = (1-\alpha) m_{k-1} + \alpha\,(\nabla f(z_k) + \xi_k)$ gives $e_k = "
              r"(1-\alpha) e_{k-1} + (1-\alpha) S_k + \alpha D_k + \alpha \xi_k$ with $S_k = "
              r"\nabla f(y_{k-1}) - \nabla f(y_k)$, $D_k = \nabla f(z_k) - \nabla f(y_k)$ (linear "
              "identity, vectors as placeholders)")
    aprev, bprev, Sv, Dv = sp.symbols("a_prev b_prev S D", real=True)
    m2 = Step(f"{P}2 split noise/deterministic", "identity",
              eq((w * aprev + alpha * xi) + (w * bprev + w * Sv + alpha * Dv),
                 w * (aprev + bprev) + w * Sv + alpha * Dv + alpha * xi),
              r"$a_k = (1-\alpha)a_{k-1} + \alpha \xi_k$, $a_{-1} = 0$; $b_k = (1-\alpha)b_{k-1} + "
              r"(1-\alpha)S_k + \alpha D_k$, $b_{-1} = e_{-1}$: $a_k + b_k$ obeys the recursion "
              "of $e_k$, so $e_k = a_k + b_k$")
    m3 = Step(f"{P}3 drift of the point", "cited", le(S(k), L * eta * r),
              r"A2 and $y_k - y_{k-1} = -\eta d_{k-1}$, $\|d\| \le 1+\epsilon_1$ ($S_0 = 0$)",
              refs=("A2", "BAND"))
    m4 = Step(f"{P}4 delay offset", "cited", le(G(k), delay_bound), delay_note,
              refs=delay_refs)
    m5 = Step(f"{P}5 triangle (b)", "cited",
              le(B(k), w * B(k - 1) + w * S(k) + alpha * G(k)),
              "triangle inequality on the $b$-recursion, then expectation")
    m6 = Step(f"{P}6 b-recursion", "inequality",
              le(B(k), w * B(k - 1) + w * L * eta * r + alpha * delay_bound),
              uses=((m5, 1), (m3, w), (m4, alpha)))
    m7 = Step(f"{P}7 index shift", "sum",
              eq(summ(B(k - 1)), B(-1) + summ(B(k)) - B(K - 1)))
    sum_delay = sp.expand(sum_linear_k(alpha * delay_bound)) / alpha
    m8 = Step(f"{P}8 summed b-recursion", "inequality",
              le(summ(B(k)), (w * B(-1) + K * w * L * eta * r) / alpha + sum_delay),
              r"sum the recursion over $k < K$, shift the index, drop $(1-\alpha)\,B(K-1) \ge 0$",
              uses=((m6, 1 / alpha, (k, 0, K - 1)),), rewrites=(m7,))
    m9 = Step(f"{P}9 initial error", "assumption", le(B(-1), E0),
              r"INIT: $\mathbb{E}\|m_{-1} - \nabla f(x_0)\|_\dagger \le E_0$ (zero buffer: $E_0 = "
              r"\|\nabla f(x_0)\|_\dagger$)",
              refs=("INIT",))
    m10 = Step(f"{P}10 deterministic part", "inequality",
               le(summ(B(k)), (w * E0 + K * w * L * eta * r) / alpha + sum_delay),
               uses=((m8, 1), (m9, w / alpha)))
    a_, x_ = vector("a"), vector("xi")
    m11 = Step(f"{P}11 square expansion", "identity",
               eq(dot(w * a_ + alpha * x_, w * a_ + alpha * x_),
                  w**2 * dot(a_, a_) + 2 * w * alpha * dot(a_, x_) + alpha**2 * dot(x_, x_)),
               r"$\|(1-\alpha)a + \alpha\xi\|^2$ expanded (checked on vectors of $\mathbb{R}^3$)")
    m12 = Step(f"{P}12 martingale noise", "cited",
               eq(V(k), w**2 * V(k - 1) + alpha**2 * X(k)),
               r"A1: $\xi_k$ is drawn at $z_k$, fixed before $\xi_k$; $a_{k-1}$ depends on "
               r"$\xi_0, \dots, \xi_{k-1}$ only, so $\mathbb{E}\langle a_{k-1}, \xi_k\rangle = 0$ "
               "in the expansion " + f"{P}11", refs=("A1",))
    m12b = Step(f"{P}12b variance", "assumption", le(X(k), sigma**2), "A1", refs=("A1",))
    m13 = Step(f"{P}13 noise variance", "inequality", le(V(k), alpha * sigma**2 / (2 - alpha)),
               r"induction on $k$ from $V(-1) = 0$; $\alpha\sigma^2/(2-\alpha)$ is the exact fixed "
               r"point of $V \mapsto (1-\alpha)^2 V + \alpha^2\sigma^2$ (the slack is 0)",
               uses=((m12b, alpha**2), ("IH", w**2)), rewrites=(m12,),
               induction=(k, -1, {V(-1): 0}))
    m14 = Step(f"{P}14 Jensen and norm equivalence", "cited",
               le(A(k), rho * sp.sqrt(V(k))),
               r"A3: $\|a\|_\dagger \le \rho\|a\|_2$; Jensen: $\mathbb{E}\|a\|_2 \le "
               r"\sqrt{\mathbb{E}\|a\|_2^2}$",
               refs=("A3",))
    m15 = Step(f"{P}15 square root is increasing", "monotonicity",
               le(sp.sqrt(V(k)), sp.sqrt(alpha * sigma**2 / (2 - alpha))),
               mono=(sp.sqrt(_v), _v, 1, m13))
    m16 = Step(f"{P}16 noise part", "inequality", le(A(k), rho * sigma * heavy_noise_factor()),
               uses=((m14, 1), (m15, rho)))
    st += [m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m12b, m13, m14, m15, m16]
    if not nesterov:
        total = K * heavy_noise_factor() * rho * sigma + (w * E0 + K * w * L * eta * r) / alpha \
            + sum_delay
        m17 = Step(f"{P}17 triangle ($e = a + b$)", "cited", le(R(k), A(k) + B(k)),
                   "$e_k = a_k + b_k$")
        m18 = Step(f"{P}18 summed input error", "inequality", le(summ(R(k)), total),
                   uses=((m17, 1, (k, 0, K - 1)), (m16, 1, (k, 0, K - 1)), (m10, 1)))
        st += [m17, m18]
        return st, m18, total
    # Nesterov: v_k = a g(z_k) + (1-a) m_k
    nu = nesterov_noise_factor()
    n1 = Step(f"{P}N1 Nesterov input error", "identity",
              eq(alpha * (gz + xi) + w * m_k - gy,
                 w * (m_k - gy) + alpha * (gz - gy) + alpha * xi),
              r"$v_k - \nabla f(y_k) = (1-\alpha) e_k + \alpha D_k + \alpha \xi_k$")
    n2 = Step(f"{P}N2 Nesterov noise part", "identity",
              eq(w * (w * aprev + alpha * xi) + alpha * xi,
                 w**2 * aprev + alpha * (1 + w) * xi),
              r"$(1-\alpha) a_k + \alpha \xi_k = (1-\alpha)^2 a_{k-1} + \alpha(2-\alpha)\, \xi_k$")
    n3 = Step(f"{P}N3 martingale noise", "cited",
              eq(Vt(k), w**4 * V(k - 1) + alpha**2 * (1 + w)**2 * X(k)),
              "as " + f"{P}12: " + r"$\mathbb{E}\langle a_{k-1}, \xi_k\rangle = 0$", refs=("A1",))
    n4 = Step(f"{P}N4 noise variance", "inequality",
              le(Vt(k), sigma**2 * nu**2),
              uses=((m13, w**4, {k: k - 1}), (m12b, alpha**2 * (1 + w)**2)), rewrites=(n3,))
    n5 = Step(f"{P}N5 Jensen and norm equivalence", "cited",
              le(At(k), rho * sp.sqrt(Vt(k))), refs=("A3",))
    n6 = Step(f"{P}N6 square root is increasing", "monotonicity",
              le(sp.sqrt(Vt(k)), sp.sqrt(sigma**2 * nu**2)),
              mono=(sp.sqrt(_v), _v, 1, n4))
    n7 = Step(f"{P}N7 noise part", "inequality", le(At(k), rho * sigma * nu),
              uses=((n5, 1), (n6, rho)))
    n8 = Step(rf"{P}N8 triangle ($\tilde b$)", "cited", le(Bt(k), w * B(k) + alpha * G(k)),
              r"$\tilde b_k = (1-\alpha) b_k + \alpha D_k$")
    sum_bt = (w**2 * E0 + K * w**2 * L * eta * r) / alpha + sp.expand(
        sum_linear_k(delay_bound))
    n9 = Step(f"{P}N9 deterministic part", "inequality", le(summ(Bt(k)), sum_bt),
              uses=((n8, 1, (k, 0, K - 1)), (m10, w), (m4, alpha, (k, 0, K - 1))))
    total = K * nu * rho * sigma + sum_bt
    n10 = Step(rf"{P}N10 triangle ($\tilde e = \tilde a + \tilde b$)", "cited",
               le(R(k), At(k) + Bt(k)))
    n11 = Step(f"{P}N11 summed input error", "inequality", le(summ(R(k)), total),
               uses=((n10, 1, (k, 0, K - 1)), (n7, 1, (k, 0, K - 1)), (n9, 1)))
    st += [n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11]
    return st, n11, total


def heavy_noise_factor() -> sp.Expr:
    """ν = √(α/(2−α)): the heavy-ball momentum's noise, in units of ρσ (step M13's exact fixed
    point; ≈ √(α/2) for small α, ≤ √α)."""
    return sp.sqrt(alpha / (2 - alpha))


def nesterov_noise_factor() -> sp.Expr:
    """ν_N = √(α(1−α)⁴/(2−α) + α²(2−α)²): the Nesterov input's noise, in units of ρσ."""
    return sp.sqrt(alpha * w**4 / (2 - alpha) + alpha**2 * (1 + w)**2)


def sum_linear_k(expr) -> sp.Expr:
    """Σ_{k<K} expr by linearity (constants give K·expr)."""
    from .assumptions import sum_linear

    return sum_linear(expr, k, 0, K - 1)


def final_steps(desc: Step, mom: Step, total: sp.Expr, bound: sp.Expr,
                prefix: str = "F") -> list[Step]:
    r"""(1/K) Σ N(k) ≤ bound, from the summed descent and the summed input error."""
    avg = summ(N(k)) / K
    f1 = Step(rf"{prefix}1 divide by $(1-\epsilon_2)\eta K$", "inequality",
              le(avg, Delta / ((1 - eps2) * eta * K) + Cp * summ(R(k)) / ((1 - eps2) * K)
                 + L * eta * r**2 / (2 * (1 - eps2))),
              uses=((desc, 1 / ((1 - eps2) * eta * K)),))
    f2 = Step(f"{prefix}2 insert the input error", "inequality", le(avg, bound),
              uses=((f1, 1), (mom, Cp / ((1 - eps2) * K))))
    return [f1, f2]


__all__ = ["descent_steps", "momentum_steps", "final_steps", "nesterov_noise_factor",
           "heavy_noise_factor", "summ",
           "sum_linear_k", "LEGEND"]
