r"""Problem families with their constants *computed*, for checking the bounds of ``theory/``.

Setting (``../shared/THEORY.md``): parameters :math:`X\in\mathbb R^{m\times n}`, primal norm the
spectral norm :math:`\|\cdot\|_2`, dual norm the nuclear norm :math:`\|\cdot\|_*`, and

* (A1) :math:`g = \nabla f(X) + \xi` with :math:`\mathbb E\xi = 0`,
  :math:`\mathbb E\|\xi\|_F^2 = \sigma^2` — here :math:`\xi` has i.i.d. entries
  :math:`\mathcal N(0, \sigma^2/(mn))`, so the Euclidean variance is *exactly* :math:`\sigma^2`;
* (A2) :math:`\|\nabla f(X) - \nabla f(Y)\|_* \le L\,\|X - Y\|_2`;
* (A3) :math:`\|V\|_* \le \rho\|V\|_F` with :math:`\rho = \sqrt{\min(m,n)}` (Cauchy–Schwarz on the
  at most :math:`\min(m,n)` singular values);
* :math:`\Delta_0 = f(X_0) - \inf f`, exact here because every family has a known minimiser
  with :math:`f = 0`.

Matrix quadratics
-----------------
:math:`f(X) = \tfrac12\langle X - X^\star, \mathcal A(X - X^\star)\rangle` with
:math:`\mathcal A(Z) = A Z B`, :math:`A\in\mathbb S_+^m`, :math:`B\in\mathbb S_+^n`.
:math:`\mathcal A` is self-adjoint in the Frobenius product
(:math:`\langle W, AZB\rangle = \operatorname{tr}(W^\top A Z B) = \langle AWB, Z\rangle`)
and PSD, so
:math:`\nabla f(X) = A(X - X^\star)B`, :math:`f\ge 0 = f(X^\star)`.

**L in the spectral→nuclear pair is** :math:`L = \sum_{i=1}^{\min(m,n)} a_i b_i` (eigenvalues of
A and B sorted decreasingly). Proof: with :math:`Z = X - Y`,

* upper bound: :math:`\|AZB\|_* = \max_{\|W\|_2\le1}\operatorname{tr}(W^\top AZB)
  = \max_W \operatorname{tr}(A\,M)` with :math:`M = ZBW^\top`. Von Neumann's trace inequality gives
  :math:`|\operatorname{tr}(AM)| \le \sum_i a_i\,\sigma_i(M)`, and
  :math:`\sigma_i(M) \le \|Z\|_2\|W\|_2\,\sigma_i(B) \le \|Z\|_2\, b_i` for :math:`i\le n`,
  :math:`\sigma_i(M) = 0` for :math:`i > \min(m,n)` (rank). Hence
  :math:`\|AZB\|_* \le \|Z\|_2\sum_{i\le\min(m,n)} a_i b_i`;
* attained: with eigenvectors :math:`A = U\operatorname{diag}(a)U^\top`,
  :math:`B = V\operatorname{diag}(b)V^\top` and :math:`Z = U_{:,1:r}V_{:,1:r}^\top`,
  :math:`r = \min(m,n)`, :math:`\|Z\|_2 = 1` and :math:`AZB` has singular values
  :math:`a_ib_i`, :math:`i\le r`.

Special case :math:`A = hI, B = I`: :math:`L = h\min(m,n)`, which matches
:math:`\|hZ\|_* \le h\min(m,n)\|Z\|_2`, with equality for any :math:`Z` whose singular values are
all equal. (The Euclidean constant is :math:`L_2 = a_1 b_1`.)

Non-convex measurements
-----------------------
:math:`f(X) = \frac1N\sum_{i=1}^N \varphi(\langle A_i, X\rangle - y_i)` with
:math:`y_i = \langle A_i, X^\star\rangle` and a smooth non-convex :math:`\varphi\ge 0`,
:math:`\varphi(0) = 0`, :math:`|\varphi''|\le \ell`:

* ``"cauchy"``: :math:`\varphi(t) = \tfrac12\log(1+t^2)`, :math:`\varphi'(t) = t/(1+t^2)`,
  :math:`\varphi''(t) = (1-t^2)/(1+t^2)^2 \in [-1/8, 1]`, so :math:`\ell = 1`;
* ``"cosine"``: :math:`\varphi(t) = 1 - \cos t`, :math:`\varphi'' = \cos t\in[-1,1]`,
  :math:`\ell = 1`.

Both are non-convex (:math:`\varphi'' < 0` somewhere) and :math:`\inf f = 0 = f(X^\star)`.
:math:`\nabla f(X) = \frac1N\sum_i \varphi'(r_i(X))A_i`,
:math:`r_i(X) = \langle A_i, X\rangle - y_i`, and by the mean value theorem and Hölder
(:math:`|\langle A_i, Z\rangle| \le \|A_i\|_*\|Z\|_2`)

.. math::
    \|\nabla f(X) - \nabla f(Y)\|_*
    \le \frac1N\sum_i |\varphi'(r_i(X)) - \varphi'(r_i(Y))|\,\|A_i\|_*
    \le \frac{\ell}{N}\sum_i |\langle A_i, X - Y\rangle|\,\|A_i\|_*
    \le \Big(\frac{\ell}{N}\sum_i \|A_i\|_*^2\Big)\|X - Y\|_2 ,

so :math:`L \le \frac{\ell}{N}\sum_i\|A_i\|_*^2`. A second bound: the mean value theorem gives
:math:`\nabla f(X) - \nabla f(Y) = \frac1N\sum_i d_i\langle A_i, Z\rangle A_i` with
:math:`|d_i|\le\ell`, :math:`Z = X - Y`; dualising with :math:`\|W\|_2\le 1` and Cauchy–Schwarz,

.. math::
    \Big|\frac1N\sum_i d_i\langle A_i,Z\rangle\langle A_i,W\rangle\Big|
    \le \frac{\ell}{N}\,\|\mathcal M Z\|_2\,\|\mathcal M W\|_2
    \le \frac{\ell}{N}\,\lambda_{\max}\Big(\sum_i a_ia_i^\top\Big)\|Z\|_F\|W\|_F
    \le \frac{\ell}{N}\,\lambda_{\max}\Big(\sum_i a_ia_i^\top\Big)\min(m,n)\,\|Z\|_2,

(:math:`\mathcal M Z = (\langle A_i, Z\rangle)_i`, :math:`a_i = \operatorname{vec}A_i`,
:math:`\|Z\|_F\le\sqrt{\min(m,n)}\|Z\|_2`). The problem uses the smaller of the two:
:math:`L = \frac{\ell}{N}\min\{\sum_i\|A_i\|_*^2,\ \min(m,n)\,\lambda_{\max}(\sum_i a_ia_i^\top)\}`
(valid, not necessarily tight); :math:`L_2 = \frac{\ell}{N}\lambda_{\max}(\sum_i a_ia_i^\top)`.

Everything is float64 (the bounds are checked exactly, not up to rounding of low precision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

DTYPE = torch.float64


def nuclear_norm(V: Tensor) -> float:
    r""":math:`\|V\|_* = \sum_i \sigma_i(V)` (float64 SVD)."""
    return float(torch.linalg.svdvals(V.double()).sum())


def spectral_norm(V: Tensor) -> float:
    r""":math:`\|V\|_2 = \sigma_1(V)` (float64 SVD)."""
    return float(torch.linalg.svdvals(V.double())[..., 0].max())


def _rng(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(seed))
    return g


def _orthogonal(k: int, gen: torch.Generator) -> Tensor:
    """A Haar-distributed orthogonal k×k matrix (QR of a Gaussian, signs fixed)."""
    Q, R = torch.linalg.qr(torch.randn(k, k, generator=gen, dtype=DTYPE))
    return Q * torch.sign(torch.diagonal(R)).unsqueeze(0)


def _spectrum(k: int, top: float, cond: float, gen: torch.Generator) -> Tensor:
    """k eigenvalues in [top/cond, top], log-uniform, largest exactly ``top``, sorted down."""
    if k == 1:
        return torch.tensor([top], dtype=DTYPE)
    u = torch.rand(k, generator=gen, dtype=DTYPE)
    u[0], u[-1] = 0.0, 1.0
    vals = top * torch.exp(-u * math.log(cond))
    return torch.sort(vals, descending=True).values


@dataclass
class MatrixProblem:
    """Common part: a smooth f on m×n matrices with exact constants and Gaussian noise."""

    x0: Tensor
    sigma: float
    L: float = field(init=False)
    L_euclid: float = field(init=False)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.x0.shape)

    @property
    def rho(self) -> float:
        r""":math:`\rho = \sqrt{\min(m,n)}` of (A3)."""
        return math.sqrt(min(self.shape))

    @property
    def delta0(self) -> float:
        r""":math:`\Delta_0 = f(X_0) - \inf f` with :math:`\inf f = 0`."""
        return self.f(self.x0)

    def f(self, X: Tensor) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def grad(self, X: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def grad_dual_norm(self, X: Tensor) -> float:
        r""":math:`\|\nabla f(X)\|_*`."""
        return nuclear_norm(self.grad(X))

    def noise(self, gen: torch.Generator) -> Tensor:
        r""":math:`\xi` with i.i.d. :math:`\mathcal N(0,\sigma^2/(mn))` entries:
        :math:`\mathbb E\|\xi\|_F^2 = \sigma^2`."""
        m, n = self.shape
        if self.sigma == 0:
            return torch.zeros(m, n, dtype=DTYPE)
        return torch.randn(m, n, generator=gen, dtype=DTYPE) * (self.sigma / math.sqrt(m * n))

    def stochastic_grad(self, X: Tensor, gen: torch.Generator) -> Tensor:
        r""":math:`g(X;\xi) = \nabla f(X) + \xi` (A1)."""
        return self.grad(X) + self.noise(gen)

    def constants(self) -> dict:
        """The constants as plain floats (for the report)."""
        return {"shape": list(self.shape), "L": self.L, "L_euclid": self.L_euclid,
                "rho": self.rho, "sigma": self.sigma, "Delta0": self.delta0}


@dataclass
class MatrixQuadratic(MatrixProblem):
    r""":math:`f(X) = \tfrac12\langle X - X^\star, A(X - X^\star)B\rangle`, A, B PSD;
    :math:`L = \sum_{i\le\min(m,n)} a_i b_i` (derivation in the module docstring)."""

    A: Tensor = None
    B: Tensor = None
    x_star: Tensor = None

    def __post_init__(self) -> None:
        m, n = self.shape
        if self.A.shape != (m, m) or self.B.shape != (n, n):
            raise ValueError(f"A must be {m}x{m} and B {n}x{n}, got {tuple(self.A.shape)}, "
                             f"{tuple(self.B.shape)}")
        a = torch.linalg.eigvalsh(self.A).flip(0).clamp(min=0)
        b = torch.linalg.eigvalsh(self.B).flip(0).clamp(min=0)
        r = min(m, n)
        self.L = float((a[:r] * b[:r]).sum())
        self.L_euclid = float(a[0] * b[0])

    def f(self, X: Tensor) -> float:
        Z = X.detach().double() - self.x_star
        return 0.5 * float((Z * (self.A @ Z @ self.B)).sum())

    def grad(self, X: Tensor) -> Tensor:
        r""":math:`\nabla f(X) = A(X - X^\star)B`."""
        return self.A @ (X.detach().double() - self.x_star) @ self.B


def quadratic(m: int, n: int, *, h: float = 1.0, cond_a: float = 1.0, cond_b: float = 1.0,
              sigma: float = 0.0, x0_scale: float = 1.0, seed: int = 0) -> MatrixQuadratic:
    r"""A random matrix quadratic: :math:`A = Q_A\operatorname{diag}(a)Q_A^\top` with a in
    :math:`[h/\kappa_A, h]`, :math:`B` likewise in :math:`[1/\kappa_B, 1]`, :math:`X^\star` and
    :math:`X_0 - X^\star` Gaussian with :math:`\|X_0 - X^\star\|_2 = ` ``x0_scale``."""
    gen = _rng(seed)
    a = _spectrum(m, h, cond_a, gen)
    b = _spectrum(n, 1.0, cond_b, gen)
    Qa, Qb = _orthogonal(m, gen), _orthogonal(n, gen)
    A = (Qa * a) @ Qa.T
    B = (Qb * b) @ Qb.T
    A, B = 0.5 * (A + A.T), 0.5 * (B + B.T)
    x_star = torch.randn(m, n, generator=gen, dtype=DTYPE)
    D = torch.randn(m, n, generator=gen, dtype=DTYPE)
    D = D * (x0_scale / spectral_norm(D))
    return MatrixQuadratic(x0=x_star + D, sigma=sigma, A=A, B=B, x_star=x_star)


def isotropic_quadratic(m: int, n: int, *, h: float = 1.0, sigma: float = 0.0,
                        x0_scale: float = 1.0, seed: int = 0) -> MatrixQuadratic:
    r""":math:`f(X) = \tfrac h2\|X - X^\star\|_F^2` (:math:`A = hI`, :math:`B = I`):
    :math:`L = h\min(m,n)`, :math:`L_2 = h`."""
    gen = _rng(seed)
    x_star = torch.randn(m, n, generator=gen, dtype=DTYPE)
    D = torch.randn(m, n, generator=gen, dtype=DTYPE)
    D = D * (x0_scale / spectral_norm(D))
    return MatrixQuadratic(x0=x_star + D, sigma=sigma, A=h * torch.eye(m, dtype=DTYPE),
                           B=torch.eye(n, dtype=DTYPE), x_star=x_star)


def t1_tightness_problem(L: float, eta: float) -> MatrixQuadratic:
    r"""T1's tightness instance (``theory.delayed_lmo.tightness_instance``) as a 1×1 matrix
    problem: :math:`f(x) = Lx^2/2` (:math:`A = L`, :math:`B = 1`, :math:`X^\star = 0`),
    :math:`x_0 = \eta/2`, so :math:`\Delta_0 = L\eta^2/8`, :math:`\rho = 1`, L exact."""
    one = torch.ones(1, 1, dtype=DTYPE)
    return MatrixQuadratic(x0=one * (eta / 2), sigma=0.0, A=L * one, B=one.clone(),
                           x_star=torch.zeros(1, 1, dtype=DTYPE))


_PHI = {
    # name: (phi, phi', sup |phi''|)
    "cauchy": (lambda t: 0.5 * torch.log1p(t * t), lambda t: t / (1 + t * t), 1.0),
    "cosine": (lambda t: 1 - torch.cos(t), torch.sin, 1.0),
}


@dataclass
class Measurements(MatrixProblem):
    r""":math:`f(X) = \frac1N\sum_i\varphi(\langle A_i, X\rangle - y_i)`, non-convex,
    :math:`L = \frac{\ell}{N}\min\{\sum_i\|A_i\|_*^2, \min(m,n)\lambda_{\max}\}`
    (derivation in the module docstring)."""

    As: Tensor = None
    x_star: Tensor = None
    phi: str = "cauchy"

    def __post_init__(self) -> None:
        if self.phi not in _PHI:
            raise ValueError(f"unknown phi {self.phi!r}; allowed: {sorted(_PHI)}")
        if self.As.shape[1:] != self.x0.shape:
            raise ValueError(f"measurement matrices {tuple(self.As.shape)} do not match X0 "
                             f"{tuple(self.x0.shape)}")
        ell = _PHI[self.phi][2]
        nuc = torch.linalg.svdvals(self.As).sum(-1)
        vecs = self.As.flatten(1)
        lam = float(torch.linalg.eigvalsh(vecs @ vecs.T)[-1])  # = lambda_max(sum a_i a_i^T)
        self.L_euclid = ell * lam / len(self.As)
        self.L = min(float(ell * (nuc ** 2).mean()), self.L_euclid * min(self.shape))
        self.y = (self.As * self.x_star).sum((-2, -1))

    def residuals(self, X: Tensor) -> Tensor:
        return (self.As * X.detach().double()).sum((-2, -1)) - self.y

    def f(self, X: Tensor) -> float:
        return float(_PHI[self.phi][0](self.residuals(X)).mean())

    def grad(self, X: Tensor) -> Tensor:
        r""":math:`\nabla f(X) = \frac1N\sum_i\varphi'(r_i(X))A_i`."""
        w = _PHI[self.phi][1](self.residuals(X))
        return torch.einsum("i,ijk->jk", w, self.As) / len(self.As)


def measurements(m: int, n: int, *, count: int = 8, phi: str = "cauchy", sigma: float = 0.0,
                 x0_scale: float = 1.0, seed: int = 0) -> Measurements:
    r"""``count`` Gaussian measurement matrices with entries :math:`\mathcal N(0, 1/(mn))`,
    :math:`X^\star` Gaussian, :math:`\|X_0 - X^\star\|_2 =` ``x0_scale``."""
    gen = _rng(seed)
    As = torch.randn(count, m, n, generator=gen, dtype=DTYPE) / math.sqrt(m * n)
    x_star = torch.randn(m, n, generator=gen, dtype=DTYPE)
    D = torch.randn(m, n, generator=gen, dtype=DTYPE)
    D = D * (x0_scale / spectral_norm(D))
    return Measurements(x0=x_star + D, sigma=sigma, As=As, x_star=x_star, phi=phi)


def random_spectrum_matrix(m: int, n: int, *, cond: float, scale: float, seed: int,
                           kind: str = "loguniform") -> Tensor:
    r""":math:`G = U\operatorname{diag}(s)V^\top` with Haar U, V, :math:`s_1 = ` ``scale`` and
    :math:`s_{\min} = ` ``scale/cond``; ``kind``: ``"loguniform"`` (random in between),
    ``"geometric"`` (evenly log-spaced), ``"spike"`` (one large, the rest at the floor)."""
    gen = _rng(seed)
    r = min(m, n)
    if kind == "loguniform":
        s = _spectrum(r, scale, cond, gen)
    elif kind == "geometric":
        s = scale * torch.logspace(0, -math.log10(cond), r, dtype=DTYPE)
    elif kind == "spike":
        s = torch.full((r,), scale / cond, dtype=DTYPE)
        s[0] = scale
    else:
        raise ValueError(f"unknown spectrum kind {kind!r}")
    U = _orthogonal(m, gen)[:, :r]
    V = _orthogonal(n, gen)[:, :r]
    return (U * s) @ V.T


@dataclass
class BlockMeasurements:
    r"""A coupled non-convex problem over P blocks (pipeline stages) of matrices
    :math:`X_s\in\mathbb R^{m_s\times n_s}`, for T4:

    .. math::
        f(X_0,\dots,X_{P-1}) = \frac1N\sum_{i=1}^N \varphi\Big(\sum_s\langle A_{i,s}, X_s\rangle
        - y_i\Big),\qquad y_i = \sum_s\langle A_{i,s}, X_s^\star\rangle .

    Norm: :math:`\|X\| = \max_s\|X_s\|_2`, dual :math:`\|G\|_\dagger = \sum_s\|G_s\|_*`;
    :math:`\rho = \sqrt{\sum_s\min(m_s,n_s)}`. Block smoothness (A2b): with
    :math:`c_i = \sum_{s'}\|A_{i,s'}\|_*`,
    :math:`|r_i(X) - r_i(Y)| \le \sum_{s'}\|A_{i,s'}\|_*\|X_{s'} - Y_{s'}\|_2 \le c_i\|X - Y\|`
    (Hölder), so by the mean value theorem

    .. math::
        \|\nabla_s f(X) - \nabla_s f(Y)\|_* \le \frac{\ell}{N}\sum_i |r_i(X) - r_i(Y)|\,
        \|A_{i,s}\|_* \le \Big(\frac{\ell}{N}\sum_i c_i\|A_{i,s}\|_*\Big)\|X - Y\| =: L_s\|X-Y\|,

    and :math:`L = \sum_s L_s`. Noise: i.i.d. :math:`\mathcal N(0,\sigma^2/D)` entries over all
    D entries, so :math:`\sum_s\sigma_s^2 = \sigma^2`.
    """

    As: list            # per block: (N, m_s, n_s)
    x_star: list
    x0: list
    sigma: float
    phi: str = "cauchy"

    def __post_init__(self) -> None:
        if self.phi not in _PHI:
            raise ValueError(f"unknown phi {self.phi!r}; allowed: {sorted(_PHI)}")
        ell = _PHI[self.phi][2]
        nuc = torch.stack([torch.linalg.svdvals(A).sum(-1) for A in self.As])  # (P, N)
        ci = nuc.sum(0)
        self.L_blocks = [float(ell * (ci * nuc[s]).mean()) for s in range(len(self.As))]
        self.L = float(sum(self.L_blocks))
        self.y = sum((A * X).sum((-2, -1)) for A, X in zip(self.As, self.x_star))

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return [tuple(X.shape) for X in self.x0]

    @property
    def rho(self) -> float:
        return math.sqrt(sum(min(s) for s in self.shapes))

    @property
    def delta0(self) -> float:
        return self.f(self.x0)

    def residuals(self, Xs) -> Tensor:
        return sum((A * X.detach().double()).sum((-2, -1)) for A, X in zip(self.As, Xs)) - self.y

    def f(self, Xs) -> float:
        return float(_PHI[self.phi][0](self.residuals(Xs)).mean())

    def grad(self, Xs) -> list[Tensor]:
        r""":math:`\nabla_s f = \frac1N\sum_i\varphi'(r_i)A_{i,s}`."""
        w = _PHI[self.phi][1](self.residuals(Xs))
        return [torch.einsum("i,ijk->jk", w, A) / len(w) for A in self.As]

    def grad_dual_norm(self, Xs) -> float:
        r""":math:`\|\nabla f\|_\dagger = \sum_s\|\nabla_s f\|_*`."""
        return sum(nuclear_norm(G) for G in self.grad(Xs))

    def noise(self, gen: torch.Generator) -> list[Tensor]:
        D = sum(m * n for m, n in self.shapes)
        if self.sigma == 0:
            return [torch.zeros(m, n, dtype=DTYPE) for m, n in self.shapes]
        return [torch.randn(m, n, generator=gen, dtype=DTYPE) * (self.sigma / math.sqrt(D))
                for m, n in self.shapes]

    def constants(self) -> dict:
        return {"shapes": [list(s) for s in self.shapes], "L": self.L,
                "L_blocks": self.L_blocks, "rho": self.rho, "sigma": self.sigma,
                "Delta0": self.delta0}


def block_measurements(shapes: list[tuple[int, int]], *, count: int = 8, phi: str = "cauchy",
                       sigma: float = 0.0, x0_scale: float = 1.0, seed: int = 0
                       ) -> BlockMeasurements:
    r"""P blocks of the given shapes, ``count`` measurements with Gaussian
    :math:`A_{i,s}` (entries :math:`\mathcal N(0, 1/D)`), :math:`\|X_{0,s} - X_s^\star\|_2 =`
    ``x0_scale``."""
    gen = _rng(seed)
    D = sum(m * n for m, n in shapes)
    As = [torch.randn(count, m, n, generator=gen, dtype=DTYPE) / math.sqrt(D) for m, n in shapes]
    xs = [torch.randn(m, n, generator=gen, dtype=DTYPE) for m, n in shapes]
    x0 = []
    for (m, n), X in zip(shapes, xs):
        Dm = torch.randn(m, n, generator=gen, dtype=DTYPE)
        x0.append(X + Dm * (x0_scale / spectral_norm(Dm)))
    return BlockMeasurements(As=As, x_star=xs, x0=x0, sigma=sigma, phi=phi)
