"""Special-function kernels scipy.special does not provide: the derivative of the regularized
incomplete gamma function w.r.t. its parameter (TensorFlow's IgammaGradA) and, from it, the
derivative of a gamma sample w.r.t. its shape (RandomGammaGrad); and scipy.special's functions
made to agree with TensorFlow's (Eigen's) values outside their domains.

The derivative is written here (scipy has no igamma derivative in ``a``): P(a, x) is computed
as NR's series for x <= a + 1 and as the complement Q(a, x) by Legendre's continued fraction
above, both carrying the derivative w.r.t. ``a`` along (forward mode), in float64.
"""
from __future__ import annotations

import numpy as np

from gradreg_plugins._lazy import LazyModule

sc = LazyModule("scipy.special")

_EPS = 1e-16
_TINY = 1e-300
_MAX_TERMS = 100_000   # enough for a ~ 1e8 (the series needs ~ 9 sqrt(a) terms near x = a)


def _series_dp_da(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dP/da for 0 < x <= a + 1: P = sum_n t_n, t_n = exp(-x + (a+n) log x - lgamma(a+n+1)),
    so dP/da = sum_n t_n (log x - digamma(a+n+1)), with t_n and digamma(a+n+1) by recurrence."""
    log_x = np.log(x)
    term = np.exp(a * log_x - x - sc.gammaln(a + 1))
    psi = sc.psi(a + 1)
    total = term * (log_x - psi)
    scale = np.abs(total)
    active = np.arange(a.size)
    for n in range(1, _MAX_TERMS):
        if not active.size:
            break
        shifted = a[active] + n
        term[active] *= x[active] / shifted
        psi[active] += 1 / shifted
        contribution = term[active] * (log_x[active] - psi[active])
        total[active] += contribution
        scale[active] += np.abs(contribution)
        active = active[np.abs(contribution) > _EPS * scale[active]]
    return total


def _continued_fraction_dq_da(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dQ/da for x > a + 1: Q = exp(-x + a log x - lgamma(a)) h, h Legendre's continued fraction
    1/(x+1-a- 1(1-a)/(x+3-a- 2(2-a)/(x+5-a- ...))) by the modified Lentz method, each quantity
    paired with its derivative w.r.t. a."""
    b = x + 1 - a
    c, dc = np.full_like(a, 1 / _TINY), np.zeros_like(a)
    d, dd = 1 / b, 1 / (b * b)          # d(1/b)/da with db/da = -1
    h, dh = d.copy(), dd.copy()
    active = np.arange(a.size)
    for i in range(1, _MAX_TERMS):
        if not active.size:
            break
        ai = a[active]
        an, dan = -i * (i - ai), float(i)
        b[active] += 2
        bi = b[active]
        den = an * d[active] + bi
        dden = dan * d[active] + an * dd[active] - 1
        den = np.where(np.abs(den) < _TINY, _TINY, den)
        d[active], dd[active] = 1 / den, -dden / (den * den)
        ci, dci = c[active], dc[active]
        cn = bi + an / ci
        dcn = -1 + (dan * ci - an * dci) / (ci * ci)
        cn = np.where(np.abs(cn) < _TINY, _TINY, cn)
        c[active], dc[active] = cn, dcn
        delta = d[active] * cn
        ddelta = dd[active] * cn + d[active] * dcn
        hi = h[active]
        h[active], dh[active] = hi * delta, dh[active] * delta + hi * ddelta
        done = (np.abs(delta - 1) < _EPS) & (np.abs(ddelta) < _EPS * (1 + np.abs(dh[active] / h[active])))
        active = active[~done]
    log_x = np.log(x)
    prefactor = np.exp(a * log_x - x - sc.gammaln(a))
    return prefactor * (h * (log_x - sc.psi(a)) + dh)


def igamma_grad_a(a, x) -> np.ndarray:
    """d/da of the regularized lower incomplete gamma function P(a, x), float64; NaN where
    P is undefined (a <= 0, x < 0), 0 at x = 0, x = inf and a = inf."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    out = np.full(a.shape, np.nan)
    with np.errstate(all="ignore"):
        valid = (a > 0) & (x >= 0) & np.isfinite(a)
        # TensorFlow's values: 0 at x = 0 whatever a is, and for a = inf
        out[(x == 0) | (valid & np.isposinf(x)) | (np.isposinf(a) & (x >= 0))] = 0.0
        inside = valid & (x > 0) & np.isfinite(x)
        series = inside & (x <= a + 1)
        fraction = inside & (x > a + 1)
        out[series] = _series_dp_da(a[series], x[series])
        out[fraction] = -_continued_fraction_dq_da(a[fraction], x[fraction])
    return out


def random_gamma_grad(alpha, sample) -> np.ndarray:
    """d sample / d alpha of a Gamma(alpha, 1) sample (implicit reparameterization): with
    P(alpha, sample) = u fixed, -(dP/dalpha) / (dP/dsample)."""
    alpha, sample = np.broadcast_arrays(np.asarray(alpha, np.float64), np.asarray(sample, np.float64))
    with np.errstate(all="ignore"):
        log_density = -sample + (alpha - 1) * np.log(sample) - sc.gammaln(alpha)
        out = -igamma_grad_a(alpha, sample) / np.exp(log_density)
        # TensorFlow's values where the quotient is 0/0: 0 for a zero or infinite sample, or alpha = inf
        return np.where((sample == 0) | np.isposinf(alpha) & (sample >= 0), 0.0,
                        np.where(np.isposinf(sample) & (alpha > 0), -0.0, out))


# -- scipy.special with TensorFlow's values outside the domains -------------------------------------

def igamma(a, x) -> np.ndarray:
    """P(a, x): 0 at x = 0 (whatever a), NaN for a <= 0 or x < 0 (scipy gives the a -> 0
    limit), 0 at a = x = inf."""
    with np.errstate(all="ignore"):
        out = np.where((a <= 0) | (x < 0), np.nan, sc.gammainc(a, x))
        return np.where((x == 0) | (np.isposinf(a) & np.isposinf(x)), 0.0, out)


def igammac(a, x) -> np.ndarray:
    """Q(a, x) = 1 - P(a, x), NaN for a <= 0 at x > 0, 0 at a = x = inf (as TensorFlow)."""
    with np.errstate(all="ignore"):
        out = np.where((a <= 0) & (x > 0), np.nan, sc.gammaincc(a, x))
        return np.where(np.isposinf(a) & np.isposinf(x), 0.0, out)


def zeta(x, q) -> np.ndarray:
    """Hurwitz zeta with Eigen's conventions: +inf at x = 1; NaN for x < 1; at a pole
    q = 0, -1, ... +inf for an even integer x (x = inf included), NaN otherwise; NaN for q < 0
    and x not an integer; zeta(+inf, q > 1) = 0."""
    with np.errstate(all="ignore"):
        out = np.where(x < 1, np.nan, sc.zeta(x, q))
        integer_x = x == np.floor(x)
        even_x = integer_x & ((np.fmod(x, 2) == 0) | np.isinf(x))
        beyond = (q <= 0) & (x > 1)
        pole = beyond & (q == np.floor(q))
        out = np.where(pole, np.where(even_x, np.inf, np.nan), out)
        out = np.where(beyond & ~pole & ~integer_x, np.nan, out)
        out = np.where(np.isposinf(x) & (q > 1), 0.0, out)
        out = np.where(np.isnan(x) | np.isnan(q), np.nan, out)
        return np.where(x == 1, np.inf, out)


def polygamma(n, x) -> np.ndarray:
    """The n-th derivative of digamma, as Eigen computes it: NaN unless n is a whole number
    >= 0; digamma for n = 0 (NaN at its poles); (-1)^(n+1) n! zeta(n+1, x) above, with zeta's
    conventions at the poles (+inf for odd n)."""
    with np.errstate(all="ignore"):
        whole = (n >= 0) & (n == np.floor(n))
        pole = (x <= 0) & (x == np.floor(x))
        digamma = np.where(pole, np.nan, sc.psi(x))
        sign = np.where(np.isinf(n) | (np.fmod(n + 1, 2) == 0), 1.0, -1.0)
        higher = sign * np.exp(sc.gammaln(n + 1)) * zeta(n + 1, x)
        regular = ~pole & np.isfinite(n)
        higher = np.where(regular, sc.polygamma(np.where(regular & whole, n, 1), x), higher)
        return np.where(~whole, np.nan, np.where(n == 0, digamma, higher))


def betainc(a, b, x) -> np.ndarray:
    """I_x(a, b) with Eigen's conventions: NaN for a <= 0 or b <= 0; then 0 at x = 0 and 1 at
    x = 1 (whatever else a and b are); NaN for x outside [0, 1] or an infinite a or b."""
    with np.errstate(all="ignore"):
        out = np.where((x < 0) | (x > 1) | np.isinf(a) | np.isinf(b), np.nan, sc.betainc(a, b, x))
        out = np.where(x == 0, 0.0, np.where(x == 1, 1.0, out))
        return np.where((a <= 0) | (b <= 0), np.nan, out)


def expint(x) -> np.ndarray:
    """Ei(x) for x >= 0 (0 -> -inf); NaN for x < 0 and x = inf, as TensorFlow."""
    with np.errstate(all="ignore"):
        return np.where((x < 0) | np.isposinf(x), np.nan, sc.expi(x))


def _positive_domain(fn, below):
    """A Bessel function of the second kind / modified: TensorFlow's value ``below`` for x < 0."""
    def compute(x):
        with np.errstate(all="ignore"):
            return np.where(x < 0, below, fn(x))
    return compute


bessel_k0 = _positive_domain(sc.k0, np.inf)
bessel_k0e = _positive_domain(sc.k0e, np.inf)
bessel_k1 = _positive_domain(sc.k1, np.inf)
bessel_k1e = _positive_domain(sc.k1e, np.inf)
bessel_y0 = _positive_domain(sc.y0, -np.inf)
bessel_y1 = _positive_domain(sc.y1, -np.inf)
