r"""Shared symbols, the standing assumptions, and the small proof-checking framework.

Every result in :mod:`theory` is a :class:`Result`: a bound (a sympy expression over
positive symbols), the quantity it bounds, and its proof as an ordered list of :class:`Step`.
Each step is one relation of a fixed *kind*:

``identity``
    ``lhs = rhs``; verified when ``lhs - rhs`` simplifies to 0 (after the rewrites the step
    names, i.e. earlier identities used as substitution rules).
``sum``
    ``Σ_{j=lo}^{hi} a_j = F``; verified by induction on the symbol in the moving limit:
    the empty sum equals ``F`` at the base, and ``F(n) - F(n-1)`` equals the new term
    (sums inside ``F`` are peeled by one term, which is the definition of a sum).
``inequality``
    ``lhs ≤ rhs``; verified by a certificate: ``rhs - lhs = Σ_i λ_i·slack_i + R`` where the
    slacks :math:`\mathrm{slack}_i` are earlier inequalities (possibly summed over an index, or
    the induction hypothesis), every multiplier :math:`\lambda_i` is certified non-negative and
    the residual ``R`` is certified non-negative (see :func:`certify_nonneg`).
``monotonicity``
    ``g(a) ≤ g(b)`` from ``a ≤ b`` (an earlier step) and the sign of ``dg/dv`` (certified), or
    just the sign of a derivative.
``definition``
    ``lhs = rhs`` true by the definition of a symbol (given in ``model``): checked for
    consistency like an identity, but reported as ``defined``, never counted as verified.
``assumption`` / ``cited``
    not machine-checkable (norm inequalities, the descent lemma, Jensen, the martingale
    property of the noise, textbook stability criteria); listed with status ``assumed`` /
    ``cited`` and never counted as verified. ``cited`` is for facts found in textbooks and
    papers only.
``reasoning``
    the project's own argument, written out in the step's note but not machine-checked
    (combining verified sign facts into a stability region, counting lemmas, norm
    bookkeeping); status ``reasoned``, never counted as verified and never to be read as a
    textbook fact.

Non-negativity certificate: the parameter ranges are made manifest by the substitution
:data:`DOMAIN` (:math:`\alpha = 1/(1+s)^2 \in (0, 1]`,
:math:`\epsilon_2 = s/(1+s) \in [0, 1)`, :math:`\beta = s/(1+s) \in [0, 1)`, with
:math:`s \ge 0`); the expression is brought over a common denominator, and numerator and
denominator must be polynomials with coefficients of one sign in non-negative atoms (symbols
declared non-negative, norms/expectations declared non-negative, sums of those, square roots). One
square root ``A + B·√D`` is handled by comparing ``A²`` with ``B²D``.

Standing assumptions (referenced by name in every result):

* (A0) f is bounded below; Δ₀ = f(x₀) − inf f.
* (A1) unbiased stochastic gradients g(x; ξ) = ∇f(x) + ξ with E[ξ | past] = 0 and
  E‖ξ‖₂² ≤ σ² (Euclidean variance); each ξ is drawn fresh at a point fixed by the past.
* (A2) L-smoothness in the chosen norm: ‖∇f(x) − ∇f(y)‖† ≤ L‖x − y‖.
* (A3) norm equivalence ‖v‖† ≤ ρ‖v‖₂ (spectral/nuclear on m×n: ρ = √min(m, n); for a product
  of matrices with the max-of-spectral-norms norm, ρ = √Σ min(mᵢ, nᵢ)).
* (BAND) inexact LMO: the direction d = lmo(v) satisfies ‖d‖ ≤ 1 + ε₁ and
  ⟨v, d⟩ ≥ (1 − ε₂)‖v‖† (ε₁ ≥ 0, 0 ≤ ε₂ < 1; ε₁ = ε₂ = 0 is the exact LMO, e.g. the polar
  factor for the spectral norm).
* (INIT) initial momentum error ‖m₋₁ − ∇f(x₀)‖† ≤ E₀ (in expectation). The production
  optimizers start from a zero buffer, so E₀ = ‖∇f(x₀)‖† ≤ √(2LΔ₀) (proved in T1).
* (A2b) block smoothness (T4 only): for the blocks s (pipeline stages) of a product norm
  :math:`\|x\| = \max_s \|x_s\|`, :math:`\|\nabla_s f(x) - \nabla_s f(y)\|_{\dagger,s}
  \le L_s\|x - y\|` with :math:`\sum_s L_s = L`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy as sp
from sympy.core.function import AppliedUndef

KINDS = ("identity", "sum", "inequality", "monotonicity", "assumption", "cited", "reasoning",
         "definition")
UNCHECKED = {"assumption": "assumed", "cited": "cited", "reasoning": "reasoned"}
VERIFIED, FAILED, DEFINED = "verified", "FAILED", "defined"

# --------------------------------------------------------------------------- symbols
Delta = sp.Symbol("Delta", positive=True)
L = sp.Symbol("L", positive=True)
rho = sp.Symbol("rho", positive=True)
sigma = sp.Symbol("sigma", positive=True)
eta = sp.Symbol("eta", positive=True)
alpha = sp.Symbol("alpha", positive=True)
K = sp.Symbol("K", positive=True, integer=True)
tau = sp.Symbol("tau", nonnegative=True, integer=True)
eps1 = sp.Symbol("epsilon_1", nonnegative=True)
eps2 = sp.Symbol("epsilon_2", nonnegative=True)
E0 = sp.Symbol("E_0", nonnegative=True)
drift = sp.Symbol("delta", nonnegative=True)
beta = sp.Symbol("beta", nonnegative=True)
c = sp.Symbol("c", positive=True)
p = sp.Symbol("p", positive=True)
z = sp.Symbol("z")
eps = sp.Symbol("varepsilon", positive=True)
k = sp.Symbol("k", integer=True)
j = sp.Symbol("j", integer=True)

#: band constants: r = 1 + ε₁ (norm of a direction), q = 1/(1 − ε₂), C = (2 + ε₁ − ε₂)/(1 − ε₂)
r = 1 + eps1
q = 1 / (1 - eps2)
C = (2 + eps1 - eps2) / (1 - eps2)

_s_alpha = sp.Symbol("s_alpha", nonnegative=True)
_s_eps2 = sp.Symbol("s_epsilon2", nonnegative=True)
_s_beta = sp.Symbol("s_beta", nonnegative=True)
#: substitution making the parameter ranges manifest (α ∈ (0,1], ε₂ ∈ [0,1), β ∈ [0,1))
DOMAIN = {
    alpha: 1 / (1 + _s_alpha) ** 2,
    eps2: _s_eps2 / (1 + _s_eps2),
    beta: _s_beta / (1 + _s_beta),
}


@dataclass(frozen=True)
class Assumption:
    """A standing assumption: a name, a one-line statement, and its LaTeX form."""

    name: str
    text: str
    latex: str


ASSUMPTIONS = {
    a.name: a
    for a in (
        Assumption("A0", "f bounded below; Delta0 = f(x0) - inf f",
                   r"\Delta_0 = f(x_0) - \inf f < \infty"),
        Assumption("A1", "g = grad f + xi, E[xi | past] = 0, E||xi||_2^2 <= sigma^2",
                   r"g(x;\xi) = \nabla f(x) + \xi,\ \mathbb{E}[\xi\mid\mathcal F] = 0,\ "
                   r"\mathbb{E}\|\xi\|_2^2 \le \sigma^2"),
        Assumption("A2", "||grad f(x) - grad f(y)||_dual <= L ||x - y||",
                   r"\|\nabla f(x) - \nabla f(y)\|_\dagger \le L\|x - y\|"),
        Assumption("A3", "||v||_dual <= rho ||v||_2", r"\|v\|_\dagger \le \rho\|v\|_2"),
        Assumption("BAND", "||lmo(v)|| <= 1 + eps1 and <v, lmo(v)> >= (1 - eps2) ||v||_dual",
                   r"\|d\| \le 1 + \epsilon_1,\ \langle v, d\rangle \ge (1-\epsilon_2)"
                   r"\|v\|_\dagger"),
        Assumption("INIT", "E||m_{-1} - grad f(x0)||_dual <= E0 (zero buffer: E0 = "
                   "||grad f(x0)||_dual <= sqrt(2 L Delta0))",
                   r"\mathbb{E}\|m_{-1} - \nabla f(x_0)\|_\dagger \le E_0"),
        Assumption("A2b", "block smoothness ||grad_s f(x) - grad_s f(y)||_dual,s <= L_s ||x-y||, "
                   "sum_s L_s = L", r"\|\nabla_s f(x) - \nabla_s f(y)\|_{\dagger,s} \le "
                   r"L_s\|x-y\|,\ \textstyle\sum_s L_s = L"),
    )
}


# --------------------------------------------------------------------------- certificates
def _atom_nonneg(a: sp.Basic) -> bool:
    if isinstance(a, sp.Sum):
        return bool(a.function.is_nonnegative)
    return bool(a.is_nonnegative)


def _generators(expr: sp.Expr) -> list:
    """Maximal atoms of ``expr`` seen as a polynomial: symbols, norms/expectations (undefined
    functions), sums and non-integer powers; nothing inside those is a generator."""
    found: set = set()

    def walk(e):
        if e.is_number:
            return
        if isinstance(e, (sp.Symbol, AppliedUndef, sp.Sum)) or (
                isinstance(e, sp.Pow) and not e.exp.is_Integer):
            found.add(e)
            return
        for a in e.args:
            walk(a)

    walk(expr)
    return sorted(found, key=sp.default_sort_key)


def _poly_sign(expr: sp.Expr) -> int:
    """+1 if ``expr`` is a polynomial with non-negative coefficients in non-negative atoms,
    -1 if all coefficients are non-positive, 0 otherwise (no certificate)."""
    expr = sp.expand(expr)
    if expr == 0:
        return 1
    atoms = _generators(expr)
    if not all(_atom_nonneg(a) for a in atoms):
        return 0
    try:
        poly = sp.Poly(expr, *atoms) if atoms else sp.Poly(expr, sp.Dummy())
    except sp.PolynomialError:
        return 0
    coeffs = poly.coeffs()
    if all(co.is_nonnegative for co in coeffs):
        return 1
    if all(co.is_nonpositive for co in coeffs):
        return -1
    return 0


def _single_sqrt_sign(expr: sp.Expr) -> int:
    """Sign certificate for ``A + B·√D`` (one square root), else 0."""
    expr = sp.expand(expr)
    roots = [a for a in expr.atoms(sp.Pow) if a.exp == sp.Rational(1, 2) and a.free_symbols]
    if len(roots) != 1:
        return 0
    X = roots[0]
    D = X.base
    if not (X.is_nonnegative or _sign(D) == 1):
        return 0  # √D must be real
    B = expr.coeff(X)
    A = sp.expand(expr - B * X)
    if X in A.atoms(sp.Pow) or X in B.atoms(sp.Pow):
        return 0
    sA, sB = _sign(A), _sign(B)
    if sA == sB and sA != 0:
        return sA
    if sA == 0 or sB == 0:
        return 0
    gap = _sign(A**2 - B**2 * D)
    if gap == 0:
        return 0
    # A > 0 > B: sign follows A² − B²D; A < 0 < B: the opposite
    return gap if sA > 0 else -gap


def _sign(expr: sp.Expr, factor: bool = True) -> int:
    expr = sp.expand(expr)
    if expr == 0:
        return 1
    s = _poly_sign(expr)
    if s:
        return s
    s = _single_sqrt_sign(expr)
    if s or not factor:
        return s
    # a product: even powers are non-negative, the other factors need their own certificate
    try:
        const, factors = sp.factor_list(expr)
    except (sp.PolynomialError, NotImplementedError):
        return 0
    if len(factors) == 1 and factors[0][1] == 1:
        return 0
    sign = 1 if const > 0 else -1
    for base, mult in factors:
        if mult % 2 == 0:
            continue
        sb = _sign(base, factor=False)
        if sb == 0:
            return 0
        sign *= sb
    return sign


def certify_nonneg(expr: Any, domain: dict | None = None) -> bool:
    """True when ``expr ≥ 0`` is certified on the parameter domain (see module docstring).

    The test is sufficient, not necessary: False means "no certificate found"."""
    e = sp.sympify(expr)
    if e == 0:
        return True
    e = e.subs(DOMAIN if domain is None else domain)
    e = sp.together(e)
    num, den = sp.fraction(e)
    sn, sd = _sign(num), _sign(den)
    if sd == 0:
        den = sp.factor(den)
        sd = 1 if den.is_positive else (-1 if den.is_negative else 0)
    return bool(sn and sd and sn * sd > 0)


def is_zero(expr: Any) -> bool:
    """True when ``expr`` simplifies to 0 (cheap expand first, simplify only if needed)."""
    e = sp.expand(sp.sympify(expr))
    if e == 0:
        return True
    e = sp.simplify(e)
    return e == 0


# --------------------------------------------------------------------------- sums
def sum_linear(expr: sp.Expr, var: sp.Symbol, lo: Any, hi: Any) -> sp.Expr:
    r"""Σ_{var=lo}^{hi} expr, distributed over the terms of ``expr``:
    Σ (a·x_k + b) = a·Σ x_k + b·(hi − lo + 1) (linearity of the sum)."""
    out = sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(expr)):
        coeff, dep = term.as_independent(var, as_Add=False)
        if dep == 1:
            out += coeff * (hi - lo + 1)
        else:
            out += coeff * sp.Sum(dep, (var, lo, hi))
    return out


def _peel(expr: sp.Expr, n: sp.Symbol) -> sp.Expr:
    """Rewrite every sum whose upper limit moves with ``n`` as (sum to hi−1) + last term, and
    every sum whose lower limit moves down with ``n`` as first term + (sum from lo+1)."""
    def rule(s):
        (v, lo, hi), = s.limits
        a = s.function
        if hi.has(n) and sp.expand(hi - hi.subs(n, n - 1)) == 1:
            return sp.Sum(a, (v, lo, hi - 1)) + a.subs(v, hi)
        if lo.has(n) and sp.expand(lo - lo.subs(n, n - 1)) == -1:
            return a.subs(v, lo) + sp.Sum(a, (v, lo + 1, hi))
        return s
    return expr.replace(lambda e: isinstance(e, sp.Sum), rule)


def _rel(lhs, rhs, op):
    return {"<=": sp.Le, ">=": sp.Ge, "=": sp.Eq}[op](lhs, rhs, evaluate=False)


def slack(rel: sp.Basic) -> sp.Expr:
    """The non-negative side of an inequality: rhs − lhs for ≤, lhs − rhs for ≥."""
    if isinstance(rel, sp.Le) or isinstance(rel, sp.Lt):
        return rel.rhs - rel.lhs
    if isinstance(rel, sp.Ge) or isinstance(rel, sp.Gt):
        return rel.lhs - rel.rhs
    raise TypeError(f"not an inequality: {rel}")


# --------------------------------------------------------------------------- steps
@dataclass(eq=False)
class Step:
    r"""One proof step: a named relation of a given kind, with what its check needs.

    ``uses``: for inequalities, entries ``(step, λ)``, ``(step, λ, (var, lo, hi))`` (λ·slack
    summed over ``var``; λ may depend on ``var``) or ``(step, λ, {var: value})`` (the step
    instantiated); ``step`` may be the string ``"IH"`` (induction hypothesis: this step's own
    slack at ``var − 1``, see ``induction``).
    ``rewrites``: earlier equations applied as substitutions lhs → rhs before checking; an
    entry ``(step, {var: value})`` applies the equation instantiated at ``var = value``.
    ``induction``: ``(var, base, base_subs)`` — the base case is this step's slack at
    ``var = base`` after ``base_subs``, which must be certified non-negative.
    ``model``: for identities between placeholder symbols, the concrete expressions they
    stand for (e.g. inner products of explicit vectors); the check runs on the model.
    ``mono``: for monotonicity, ``(g, v, direction, premise)``: ``g`` as a function of ``v`` is
    increasing (direction=+1) or decreasing (−1); with a premise step ``a ≤ b`` the relation
    must read ``g(a) ≤ g(b)`` (increasing) or ``g(a) ≥ g(b)`` (decreasing).
    ``induction_var``: for sums, the symbol whose change moves the limits.
    """

    name: str
    kind: str
    relation: Any
    note: str = ""
    uses: tuple = ()
    rewrites: tuple = ()
    induction: tuple | None = None
    mono: tuple | None = None
    induction_var: Any = None
    refs: tuple = ()
    domain: dict | None = None
    model: dict | None = None
    _status: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown step kind {self.kind!r}; allowed: {KINDS}")

    # -- checking ------------------------------------------------------------------
    def _apply_rewrites(self, expr: sp.Expr) -> sp.Expr:
        for entry in self.rewrites:
            st, inst = (entry if isinstance(entry, tuple) else (entry, None))
            rel = st.relation
            lhs, rhs = rel.lhs, rel.rhs
            if inst:
                lhs, rhs = lhs.subs(inst), rhs.subs(inst)
            expr = expr.subs(lhs, rhs) if lhs.is_Add else expr.xreplace({lhs: rhs})
        return expr

    def _check(self) -> bool:
        kind = self.kind
        rel = self.relation
        if kind in ("identity", "definition"):
            lhs, rhs = self._apply_rewrites(rel.lhs), self._apply_rewrites(rel.rhs)
            if self.model:
                lhs, rhs = lhs.subs(self.model), rhs.subs(self.model)
            if is_zero(lhs - rhs):
                return True
            # an identity on the parameter domain: retry with the ranges made manifest
            return is_zero((lhs - rhs).subs(DOMAIN if self.domain is None else self.domain))
        if kind == "sum":
            return self._check_sum()
        if kind == "inequality":
            return self._check_inequality()
        if kind == "monotonicity":
            return self._check_monotonicity()
        raise AssertionError(kind)

    def _check_sum(self) -> bool:
        s, F = self.relation.lhs, self.relation.rhs
        (v, lo, hi), = s.limits
        a = s.function
        if not a.atoms(AppliedUndef):
            # an explicit summand: let sympy evaluate the sum
            if is_zero(sp.piecewise_fold(s.doit()) - F):
                return True
        n = self.induction_var
        if n is None:
            (n,) = (hi - lo).free_symbols
        nn = sp.Dummy("n")
        base = sp.solve((hi - lo + 1).subs(n, nn), nn)
        if len(base) != 1:
            return False
        if not is_zero(F.subs(n, base[0]).doit()):
            return False
        if a.has(n):
            return False
        moved_hi = sp.expand(hi - hi.subs(n, n - 1))
        moved_lo = sp.expand(lo - lo.subs(n, n - 1))
        if moved_hi == 1 and moved_lo == 0:
            new_term = a.subs(v, hi)
        elif moved_lo == -1 and moved_hi == 0:
            new_term = a.subs(v, lo)
        else:
            return False
        return is_zero(self._apply_rewrites(_peel(F, n) - F.subs(n, n - 1)) - new_term)

    def _check_inequality(self) -> bool:
        total = slack(self.relation)
        for use in self.uses:
            st, lam = use[0], sp.sympify(use[1])
            if st == "IH":
                var = self.induction[0]
                sl = slack(self.relation).subs(var, var - 1)
            else:
                if st.kind == "identity" or st.kind == "sum":
                    return False
                sl = slack(st.relation)
            if not certify_nonneg(lam, self.domain):
                return False
            spec = use[2] if len(use) > 2 else None
            if isinstance(spec, dict):
                total = total - lam * sl.subs(spec)
            elif spec is not None:
                # the multiplier may depend on the summation index: sum λ·slack termwise
                total = total - sum_linear(lam * sl, *spec)
            else:
                total = total - lam * sl
        total = self._apply_rewrites(sp.expand(total))
        if not certify_nonneg(total, self.domain):
            return False
        if self.induction is not None:
            var, base, subs = self.induction
            b = slack(self.relation).subs(var, base).subs(subs)
            if not certify_nonneg(b, self.domain):
                return False
        return True

    def _check_monotonicity(self) -> bool:
        g, v, direction, premise = self.mono
        if not certify_nonneg(direction * sp.diff(g, v), self.domain):
            return False
        if premise is None:
            return True
        a, b = premise.relation.lhs, premise.relation.rhs
        if isinstance(premise.relation, sp.Ge):
            a, b = b, a
        lo, hi = g.subs(v, a), g.subs(v, b)
        rel = self.relation
        if direction > 0:
            want = (lo, hi)
        else:
            want = (hi, lo)
        have = (rel.lhs, rel.rhs) if isinstance(rel, sp.Le) else (rel.rhs, rel.lhs)
        return is_zero(have[0] - want[0]) and is_zero(have[1] - want[1])

    def check(self) -> str:
        """Status: ``verified``, ``FAILED``, ``assumed`` or ``cited`` (cached)."""
        if self._status is None:
            if self.kind in UNCHECKED:
                self._status = UNCHECKED[self.kind]
            else:
                try:
                    ok = self._check()
                except Exception:  # a check that cannot be carried out has failed
                    ok = False
                good = DEFINED if self.kind == "definition" else VERIFIED
                self._status = good if ok else FAILED
        return self._status

    @property
    def ok(self) -> bool:
        return self.check() != FAILED

    def latex(self) -> str:
        return sp.latex(self.relation)


# --------------------------------------------------------------------------- results
@dataclass(eq=False)
class Result:
    r"""A derived result: the bound ``statement`` on ``quantity``, its proof ``steps``, the
    assumptions it rests on, and numeric callables (``numeric()``, argument order ``params``).
    """

    name: str
    title: str
    quantity: str
    quantity_latex: str
    statement: Any
    params: tuple
    steps: list
    assumptions: tuple
    legend: dict = field(default_factory=dict)
    notes: str = ""
    relation: str = "<="
    _numeric: Any = field(default=None, repr=False)

    def check(self) -> list[tuple[Step, str]]:
        """Check every step; returns (step, status) pairs."""
        return [(s, s.check()) for s in self.steps]

    def ok(self) -> bool:
        return all(s.ok for s in self.steps)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.steps:
            st = s.check()
            out[st] = out.get(st, 0) + 1
        return out

    def unchecked(self) -> list[Step]:
        """The assumption/cited steps (what the proof takes on trust)."""
        return [s for s in self.steps if s.kind in UNCHECKED]

    def numeric(self):
        """``lambdify(params, statement, "numpy")`` (cached)."""
        if self._numeric is None:
            self._numeric = sp.lambdify(self.params, self.statement, "numpy")
        return self._numeric

    def latex(self) -> str:
        r"""The result and its proof as LaTeX (one ``align*`` line per step)."""
        lines = [rf"\textbf{{{_tex_text(self.name)}}}: \text{{{_tex_text(self.title)}}}\\",
                 rf"{self.quantity_latex} {self._rel_latex()} {sp.latex(self.statement)}\\",
                 r"\text{Assumptions: " + _tex_text(", ".join(self.assumptions)) + r"}\\"]
        if self.legend:
            lines.append(r"\text{Legend: }" + r",\ ".join(
                rf"{sp.latex(key)}: \text{{{_tex_text(val)}}}"
                for key, val in self.legend.items()) + r"\\")
        lines.append(r"\begin{align*}")
        for s in self.steps:
            tag = {"identity": "id", "sum": "sum", "inequality": "ineq", "definition": "def",
                   "monotonicity": "mono", "assumption": "assumed", "cited": "cited",
                   "reasoning": "reasoned"}[s.kind]
            lines.append(rf"&{s.latex()} && \text{{[{_tex_text(s.name)}; {tag}]}}\\")
        lines.append(r"\end{align*}")
        return "\n".join(lines)

    def _rel_latex(self) -> str:
        return {"<=": r"\le", "=": "=", ">=": r"\ge"}[self.relation]

    def report(self) -> str:
        """Plain-text report: every step with its status."""
        out = [f"{self.name}: {self.title}",
               f"  bounds: {self.quantity}",
               f"  {'bound' if self.relation == '<=' else 'value'}:  "
               f"{sp.sstr(self.statement)}",
               f"  assumptions: {', '.join(self.assumptions)}"]
        for s in self.steps:
            out.append(f"  [{s.check():8s}] {s.kind:12s} {s.name}")
        cnt = self.counts()
        out.append("  summary: " + ", ".join(f"{v} {k}" for k, v in sorted(cnt.items())))
        return "\n".join(out)


def _tex_text(text: str) -> str:
    """Escape plain text for LaTeX ``\\text{}``."""
    out = []
    for ch in text:
        out.append({"\\": r"\textbackslash{}", "_": r"\_", "^": r"\^{}", "&": r"\&",
                    "%": r"\%", "#": r"\#", "{": r"\{", "}": r"\}", "$": r"\$"}.get(ch, ch))
    return "".join(out)


class TexSymbol(sp.Symbol):
    """A symbol that prints as its name, verbatim LaTeX. A plain :class:`sympy.Symbol` reads
    the first ``_`` of its name as a subscript of all that follows, so ``|v^*_t|`` prints
    ``|v^{*}_{t|}``: names holding delimiters or several subscripts need this class."""

    def _latex(self, printer) -> str:
        return self.name


def le(lhs, rhs):
    """``lhs ≤ rhs`` without evaluation."""
    return _rel(lhs, rhs, "<=")


def ge(lhs, rhs):
    """``lhs ≥ rhs`` without evaluation."""
    return _rel(lhs, rhs, ">=")


def eq(lhs, rhs):
    """``lhs = rhs`` without evaluation."""
    return _rel(lhs, rhs, "=")


def vector(name: str, dim: int = 3) -> sp.Matrix:
    """A symbolic vector with ``dim`` real components (for bilinear identities)."""
    return sp.Matrix(sp.symbols(f"{name}_0:{dim}", real=True))


def dot(a: sp.Matrix, b: sp.Matrix) -> sp.Expr:
    """Euclidean inner product of two symbolic vectors."""
    return (a.T * b)[0, 0]


def rename_steps(steps: list, mapping: dict, prefix: str) -> list:
    """Copies of ``steps`` with every symbol renamed by ``mapping`` (an instance of the same
    proof for other symbols, e.g. one pipeline block); names get ``prefix``. The copies are
    re-checked from scratch."""
    new: dict = {}

    def m(x):
        return sp.sympify(x).xreplace(mapping) if x is not None else None

    def spec_map(spec):
        if isinstance(spec, dict):
            return {m(a): m(b) for a, b in spec.items()}
        return tuple(m(x) for x in spec)

    for st in steps:
        uses = []
        for use in st.uses:
            ref = use[0] if use[0] == "IH" else new[id(use[0])]
            entry = (ref, m(use[1])) + ((spec_map(use[2]),) if len(use) > 2 else ())
            uses.append(entry)
        rewrites = []
        for entry in st.rewrites:
            if isinstance(entry, tuple):
                rewrites.append((new[id(entry[0])], spec_map(entry[1])))
            else:
                rewrites.append(new[id(entry)])
        induction = None
        if st.induction is not None:
            var, base, subs = st.induction
            induction = (var, base, {m(a): m(b) for a, b in subs.items()})
        mono = None
        if st.mono is not None:
            g, v, direction, premise = st.mono
            mono = (m(g), v, direction, None if premise is None else new[id(premise)])
        cp = Step(name=f"{prefix}{st.name}", kind=st.kind, relation=m(st.relation),
                  note=st.note, uses=tuple(uses), rewrites=tuple(rewrites),
                  induction=induction, mono=mono, induction_var=st.induction_var,
                  refs=st.refs, domain=st.domain,
                  model=None if st.model is None else {a: m(b) for a, b in st.model.items()})
        new[id(st)] = cp
    return [new[id(st)] for st in steps]
