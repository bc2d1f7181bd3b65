"""Large-argument evaluations for lax_special: enclosures ``(value, radius)`` in mpmath.

interp/rules/lax_special.py turns an enclosure into the correctly rounded result with Ziv's test
(both ends of ``value +- radius`` must round alike, else the precision is raised). What is here:

* tail bounds that decide a result outright (it rounds to 0 or 1 in every float format):
  Chernoff's bound for the Gamma distribution, P(X <= x) (x < a) and P(X >= x) (x > a) are at
  most exp(-a (lambda - 1 - ln lambda)) with lambda = x / a (X ~ Gamma(a, 1): E e^(tX) =
  (1 - t)^-a, optimal t); for the Beta distribution the same argument on (1 - x) G1 - x G2 gives
  exp(-(a + b) KL(a / (a + b) || x)). For d/da P, Cauchy-Schwarz: |d/da P| = |E[(ln X - psi(a))
  1{X <= x}]| <= sqrt(psi'(a) min(P, Q)) (E ln X = psi(a), Var ln X = psi'(a)).
* Temme's uniform asymptotic expansion of the incomplete gamma function (DLMF 8.12.3-8.12.10;
  N. M. Temme, SIAM J. Math. Anal. 10 (1979) 757-766):
      Q(a, x) = erfc(eta sqrt(a/2)) / 2 + R,   P(a, x) = erfc(-eta sqrt(a/2)) / 2 - R,
      R = exp(-a eta^2 / 2) / sqrt(2 pi a) * sum_k c_k(eta) a^-k,
      eta^2 / 2 = lambda - 1 - ln lambda (sign of lambda - 1), lambda = x / a.
  c_k(eta) are power series in eta (radius 2 sqrt(pi)), computed here exactly in rationals:
  mu = lambda - 1 as a series in eta from mu mu' = eta (1 + mu), c_0 = 1/mu - 1/eta, and
  c_k = (1/eta) c_{k-1}' + (-1)^k g_k / mu (DLMF 8.12.9), whose 1/eta term must vanish: that
  gives the Stirling coefficients g_k = (-1)^(k+1) [eta^1] c_{k-1} without a table.
  Used for a >= TEMME_MIN_A where Chernoff has not decided the result: there |eta| <= 1.7 (a =
  2^10, d/da P's wider tails) or <= 0.6 (a = 2^12, P and Q); each term in k gains about
  log2(a) bits. Where the series do not reach the precision the caller falls back to mpmath
  (a < TEMME_ONLY_A) or raises.
  Error bound (stated, not proven: Paris 2002 proves bounds of this kind for real eta): the
  remainder of the k-sum is taken as at most 2^10 times the first omitted term, the remainder
  of each eta series as at most 2^10 times its last term (each series stops after two consecutive
  terms below the tolerance, so a zero of one c_k does not stop it early); both are pushed below
  2^-(prec + 8) of the result, so the factor costs nothing but it is what the Ziv test relies on.
  d/da P(a, x) is the expansion differentiated in a (x fixed), with the same stated bound.
* the regularized incomplete beta I_x(a, b): its continued fraction (DLMF 8.17.22, betainc_cf)
  for moderate parameters, and for min(a, b) >= BETA_TEMME_MIN Temme's uniform expansion (DLMF
  8.18.9, temme_beta) in the same form as the gamma's (erfc term plus a sum in (a + b)^-k), with the
  coefficients computed per (a, b) in floating point (they depend on x0 = a / (a + b) too) and the
  same stated bound.
"""
from __future__ import annotations

import fractions
import functools

import mpmath

TEMME_MIN_A = 2.0 ** 10     # Temme first from here (mpmath's 2F2 for d/da P fails from a ~ 3000)
TEMME_ONLY_A = 2.0 ** 12    # below this, an element Temme cannot certify (deep tails) goes to mpmath
# exp(-T) < 2^-1080: below half the smallest float64 subnormal (2^-1075), so such a tail rounds to
# 0 (and 1 - tail to 1) in every float format.
TAIL_NEGLIGIBLE = 1080 * 0.6931471805599453
_DEG = 150            # eta-series degree kept for c_k
_KMAX = 20            # terms of the a^-k sum
_SAFETY = 2 ** 10     # stated remainder factor (see the module docstring)


@functools.lru_cache(maxsize=1)
def _exact_tables():
    """(u, d): mu / eta = sum u_n eta^n and c_k(eta) = sum d[k][n] eta^n, exact rationals."""
    F = fractions.Fraction
    n_max = _DEG + 2 * _KMAX + 2
    # mu(eta) = sum m_k eta^k from mu mu' = eta (1 + mu), m_1 = 1:
    # (k + 1) m_k + sum_{i=2}^{k-1} (k - i + 1) m_i m_{k-i+1} = m_{k-1}.
    m = [F(0), F(1)]
    for k in range(2, n_max + 2):
        s = sum(m[i] * (k - i + 1) * m[k - i + 1] for i in range(2, k))
        m.append((m[k - 1] - s) / (k + 1))
    u = m[1:]                                    # mu / eta, u_0 = 1
    v = [F(1)]                                   # eta / mu
    for n in range(1, n_max + 1):
        v.append(-sum(u[j] * v[n - j] for j in range(1, n + 1)))
    b = v[1:]                                    # c_0 = 1/mu - 1/eta
    d = [b]
    for _ in range(_KMAX):
        prev = d[-1]
        # c_k = c_{k-1}'/eta + (-1)^k g_k / mu, (-1)^k g_k = -[eta^1] c_{k-1}
        d.append([(n + 2) * prev[n + 2] - prev[1] * b[n] for n in range(len(prev) - 2)])
    return u[:_DEG + 2], [row[:_DEG + 1] for row in d]


def _tables(prec):
    """The tables as mpf at ``prec`` bits or a little more: rounded up to a multiple of 256, so
    elements whose guard bits differ (and Ziv's +64 steps) share one conversion."""
    return _tables_at(-(-prec // 256) * 256)


@functools.lru_cache(maxsize=8)
def _tables_at(prec):
    u, d = _exact_tables()
    with mpmath.workprec(prec):
        return ([mpmath.mpf(c.numerator) / c.denominator for c in u],
                [[mpmath.mpf(c.numerator) / c.denominator for c in row] for row in d])


def _series(coeffs, eta, tol):
    """(sum, derivative, error bound) of the power series at eta, stopped once two consecutive
    terms are below ``tol``; the error is _SAFETY times the first omitted term."""
    s = ds = mpmath.mpf(0)
    p = mpmath.mpf(1)             # eta^n
    small = 0
    for n, c in enumerate(coeffs):
        t = c * p
        s += t
        dt = n * c * (p / eta) if eta else (c if n == 1 else 0)
        ds += dt
        small = small + 1 if (n > 1 and abs(t) < tol and abs(dt) < tol) else 0
        if small == 2:
            return s, ds, _SAFETY * (abs(t) + abs(dt))
        p *= eta
    return None


def chernoff_gamma(a, x):
    """a (lambda - 1 - ln lambda), lambda = x/a: the exponent of the Chernoff tail bound. Near
    lambda = 1 as mu - log1p(mu), mu = (x - a)/a (no cancellation); elsewhere ln lambda =
    ln x - ln a, never through a rounded mu (x = 5e-324, a = 0.1 would round mu to -1: log1p(-1)
    = -inf would "decide" a P that is 2.3e-33)."""
    a, x = mpmath.mpf(a), mpmath.mpf(x)
    mu = (x - a) / a
    if -0.5 <= mu <= 1:
        return a * (mu - mpmath.log1p(mu))
    return a * (mu - (mpmath.log(x) - mpmath.log(a)))


def _temme_parts(a, x):
    """Shared part of the expansion at the caller's working precision."""
    a, x = mpmath.mpf(a), mpmath.mpf(x)
    mu = (x - a) / a
    h = mu - mpmath.log1p(mu)                     # eta^2 / 2 (cancellation: the caller adds bits)
    eta = mpmath.sqrt(2 * h) * (1 if mu > 0 else -1) if mu else mpmath.mpf(0)
    pref = mpmath.exp(-a * h) / mpmath.sqrt(2 * mpmath.pi * a)
    return a, mu, eta, pref


def _guard(a, x):
    mu = (mpmath.mpf(x) - a) / a
    return 48 + (max(0, -int(mpmath.mag(mu))) if mu else 0)


def temme_gamma(a: float, x: float, upper: bool, prec: int):
    """(value, radius) enclosing Q(a, x) (``upper``) or P(a, x); None if the expansion does not
    reach 2^-(prec + 8) (then the caller raises)."""
    with mpmath.workprec(prec + _guard(a, x)):
        _, d_tab = _tables(mpmath.mp.prec)
        a, mu, eta, pref = _temme_parts(a, x)
        tol = mpmath.mpf(2) ** -(prec + 24)
        s, err, ak, small = mpmath.mpf(0), mpmath.mpf(0), mpmath.mpf(1), False
        for k in range(_KMAX + 1):
            c = _series(d_tab[k], eta, tol / ak)
            if c is None:
                return None
            t = c[0] * ak
            if k and abs(t) < tol and small:
                err += _SAFETY * abs(t)           # omitted: the second small term in a row
                break
            small = bool(k) and abs(t) < tol      # (one small term could be a sign change of c_k)
            s += t
            err += c[2] * ak
            ak /= a
        else:
            return None
        z = eta * mpmath.sqrt(a / 2)
        r = pref * s
        val = mpmath.erfc(z) / 2 + r if upper else mpmath.erfc(-z) / 2 - r
        rad = pref * err + abs(val) * mpmath.mpf(2) ** -(prec + 4)
        return val, rad


def temme_gamma_grad_a(a: float, x: float, prec: int):
    """(value, radius) enclosing d/da P(a, x) (x fixed) from the differentiated expansion:
    d/da P = pref [(eta/2 - mu/eta) - (ln lambda - 1/(2a)) S - S_a],
    S = sum c_k a^-k, S_a = sum (c_k'(eta) d eta/da a^-k - k c_k a^-k-1), d eta/da = -(mu/eta)/a
    (from eta d eta = mu / lambda d lambda, d lambda / da = -lambda / a)."""
    with mpmath.workprec(prec + _guard(a, x)):
        u_tab, d_tab = _tables(mpmath.mp.prec)
        a, mu, eta, pref = _temme_parts(a, x)
        tol = mpmath.mpf(2) ** -(prec + 24)
        uu = _series(u_tab, eta, tol)              # mu / eta without the 0/0 at eta = 0
        if uu is None:
            return None
        mu_eta = uu[0]
        deta = -mu_eta / a
        s = sa = err = mpmath.mpf(0)
        ak, small = mpmath.mpf(1), False
        for k in range(_KMAX + 1):
            c = _series(d_tab[k], eta, tol / ak)
            if c is None:
                return None
            t, ta = c[0] * ak, c[1] * deta * ak - k * c[0] * ak / a
            if k and abs(t) < tol and abs(ta) < tol and small:
                err += _SAFETY * (abs(t) + abs(ta))
                break
            small = bool(k) and abs(t) < tol and abs(ta) < tol
            s += t
            sa += ta
            err += c[2] * ak * (1 + abs(deta) + k / a)
            ak /= a
        else:
            return None
        lam_log = mpmath.log1p(mu)
        bracket = (eta / 2 - mu_eta) - (lam_log - 1 / (2 * a)) * s - sa
        val = pref * bracket
        rad = pref * (err * (1 + abs(lam_log)) + uu[2]) + abs(val) * mpmath.mpf(2) ** -(prec + 4)
        return val, rad


def kl_beta(a, b, x):
    """(a + b) KL(a / (a + b) || x): the exponent of the Chernoff bound of the Beta tail."""
    a, b, x = mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(x)
    n = a + b
    return a * mpmath.log(a / (n * x)) + b * mpmath.log(b / (n * (1 - x)))


BETA_CF_MAX_ITER = 20000     # ~1 s of mpmath arithmetic; near the mean it takes ~0.85 sqrt(min(a, b))


def betainc_cf(a: float, b: float, x: float, prec: int):
    """(value, radius) enclosing I_x(a, b) from its continued fraction (DLMF 8.17.22),
    I_x(a, b) = x^a (1-x)^b / (a B(a, b)) / (1 + d_1 / (1 + d_2 / (1 + ...))),
    d_2m = m (b - m) x / ((a + 2m - 1)(a + 2m)), d_2m+1 = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)),
    by Lentz's method on the side where it converges fast (x <= (a + 1) / (a + b + 2), else
    1 - I_{1-x}(b, a)). Near the mean it needs O(sqrt(min(a, b))) steps; None past
    BETA_CF_MAX_ITER. Error bound (stated): the fraction stops after two steps in a row that change
    it by less than 2^-(prec + 16) relative; the remainder is taken as at most 2^10 times the last
    change (the quotients of successive convergents settle geometrically there)."""
    extra = 48 + max(int(mpmath.mag(mpmath.mpf(a) + b)), 0)
    with mpmath.workprec(prec + extra):
        a, b, x = mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(x)
        flip = x * (a + b + 2) > a + 1
        if flip:
            a, b, x = b, a, 1 - x
        log_pref = (a * mpmath.log(x) + b * mpmath.log1p(-x) - mpmath.log(a)
                    - (mpmath.loggamma(a) + mpmath.loggamma(b) - mpmath.loggamma(a + b)))
        eps = mpmath.mpf(2) ** -(prec + 16)
        tiny = mpmath.mpf(2) ** -(4 * prec)
        f, c, d = mpmath.mpf(1), mpmath.mpf(1), mpmath.mpf(0)
        small, change = 0, None
        for n in range(1, BETA_CF_MAX_ITER):
            m = n // 2
            if n % 2:
                dn = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
            else:
                dn = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
            d = 1 + dn * d
            d = 1 / (d if d else tiny)
            c = 1 + dn / c
            c = c if c else tiny
            delta = c * d
            f *= delta
            change = abs(delta - 1)
            small = small + 1 if change < eps else 0
            if small == 2:
                break
        else:
            return None
        val = mpmath.exp(log_pref) / f
        # the remainder, and the relative error of the prefactor (its terms are ~ (a + b) log)
        rad = val * (_SAFETY * change + mpmath.mpf(2) ** -(prec + 8))
        if flip:
            val = 1 - val
        return val, rad


BETA_TEMME_MIN = 2.0 ** 16   # Temme's expansion from min(a, b) = 2^16 (the continued fraction below)


@functools.lru_cache(maxsize=64)
def _beta_phi(a: float, b: float, n: int, prec: int):
    """phi(eta) = eta / u(eta) = sum phi_n eta^n (n <= ``n``) at ``prec`` bits, x0 = a / (a + b):
    u = (t - x0) / sqrt(x0 (1 - x0)) as a series in eta solves u u' = eta (1 + beta u - u^2),
    u = eta + ..., beta = (1 - 2 x0) / sqrt(x0 (1 - x0)) (from -eta d eta = (x0 - t) / (t (1 - t))
    dt, DLMF 8.18.10), one O(n^2) recurrence instead of a series reversion. Radius 2 sqrt(pi
    min(x0, 1 - x0)) (where eta^2 / 2 reaches the other sheets of the logarithms)."""
    with mpmath.workprec(prec):
        p = fractions.Fraction(a) / (fractions.Fraction(a) + fractions.Fraction(b))
        p, q = _mpf_of_fraction(p), _mpf_of_fraction(1 - p)
        beta = (q - p) / mpmath.sqrt(p * q)
        m = [mpmath.mpf(0), mpmath.mpf(1)]
        for k in range(2, n + 2):
            # [eta^k]: (k + 1) m_k + sum_{i=2}^{k-1} (k - i + 1) m_i m_{k-i+1}
            #        = beta m_{k-1} - sum_{i=1}^{k-2} m_i m_{k-1-i}
            s = sum(m[i] * (k - i + 1) * m[k - i + 1] for i in range(2, k))
            s += sum(m[i] * m[k - 1 - i] for i in range(1, k - 1))
            m.append((beta * m[k - 1] - s) / (k + 1))
        u = m[1:]                                    # u / eta, u_0 = 1
        phi = [mpmath.mpf(1)]
        for j in range(1, n + 1):
            phi.append(-sum(u[i] * phi[j - i] for i in range(1, j + 1)))
        return phi


def _log_gamma_star(z):
    """ln Gamma*(z) = ln Gamma(z) - ((z - 1/2) ln z - z + ln(2 pi) / 2) (DLMF 5.11.3 scaled: ~
    1/(12 z)); the caller's precision plus mag(z) bits absorb the cancellation."""
    with mpmath.workprec(mpmath.mp.prec + max(int(mpmath.mag(z)), 0) + 16):
        return mpmath.loggamma(z) - ((z - 0.5) * mpmath.log(z) - z + mpmath.log(2 * mpmath.pi) / 2)


def _mpf_of_fraction(q: fractions.Fraction):
    """q as an mpf rounded once to the working precision, as mpmath >= 1.4's mpf(q) does
    (mpmath 1.3.0's mpf refuses a Fraction: TypeError)."""
    return mpmath.mp.make_mpf(mpmath.libmp.from_rational(q.numerator, q.denominator, mpmath.mp.prec,
                                                         mpmath.libmp.round_nearest))


def _beta_parts(a: float, b: float, x: float):
    """(r = a + b, min(x0, 1 - x0), eta^2 / 2, eta) at the caller's precision, from the exact
    s = x - x0: eta^2 / 2 = x0 g(s / x0) + (1 - x0) g(-s / (1 - x0)), g(y) = y - log1p(y) >= 0
    (8.18.10 rearranged: two non-negative parts, no cancellation between them)."""
    F = fractions.Fraction
    r_ = F(a) + F(b)
    p_ = F(a) / r_
    s_ = F(x) - p_
    h = mpmath.mpf(0)
    for w, y in ((p_, s_ / p_), (1 - p_, -s_ / (1 - p_))):
        y = _mpf_of_fraction(y)
        h += _mpf_of_fraction(w) * (y - mpmath.log1p(y))
    eta = mpmath.sqrt(2 * h) * (1 if s_ > 0 else -1)
    return mpmath.mpf(a) + b, _mpf_of_fraction(min(p_, 1 - p_)), h, eta


def _beta_guard(a, b, x):
    """Guard bits for _beta_parts: 48, plus what g(y) = y - log1p(y) cancels at small |y|."""
    F = fractions.Fraction
    p_ = F(a) / (F(a) + F(b))
    s_ = F(x) - p_
    if not s_:
        return 48
    with mpmath.workprec(64):
        return 48 + max(0, -int(mpmath.mag(_mpf_of_fraction(min(abs(s_) / p_, abs(s_) / (1 - p_))))))


def temme_beta(a: float, b: float, x: float, prec: int):
    """(value, radius) enclosing I_x(a, b) for large a and b by Temme's uniform expansion (DLMF
    8.18.9-8.18.12; Temme, Special Functions (1996) §11.3.3.2), with r = a + b, x0 = a / r:
        I_x(a, b) = erfc(-eta sqrt(r/2)) / 2 - W sum_k psi_k(eta) r^-k,
        W = exp(-r eta^2 / 2) Gamma*(r) / (Gamma*(a) Gamma*(b)) / sqrt(2 pi r),
    eta^2 / 2 = KL(x0 || x) (8.18.10; sign of x - x0). It is the incomplete Laplace integral
    I_x = C int_-inf^eta exp(-r t^2/2) phi(t) dt integrated by parts, phi = eta / u (_beta_phi):
    phi_0 = phi, phi_{k+1} = ((phi_k - phi_k(0)) / eta)', psi_k = (phi_k - phi_k(0)) / eta
    (psi_0 = -c_0 of 8.18.11); on power series phi_{k+1}[n] = (n + 1) phi_k[n + 2]. The
    normalisation C is kept exact (the Gamma* ratio, not its Stirling series), so the erfc term
    needs no correction and every omitted part is a term of the k-sum.
    Terms fall like (k / (2 pi e min(a, b)))^k; the eta series converge like
    (|eta| / 2 sqrt(pi min(x0, 1 - x0)))^n, at most sqrt(120 / min(a, b)) where the Chernoff bound
    has not decided (r eta^2 / 2 <= 750).
    Error bound (STATED, as temme_gamma's): the k-sum stops after two consecutive terms below
    2^-(prec + 24) of the erfc term, its remainder taken as at most 2^10 times the first omitted
    term; each eta series as in _series; the coefficients, computed in floating point at the
    working precision (prec + 48 guard bits), lose about 2 log2(n) + 2 bits for n coefficients
    (measured <= 18.6 at n = 400; tested at n = 400, beyond the ~385 used at 1024 bits);
    rounding: (|erfc term| + W sum |terms|) 2^-(prec + 8). None where the series do not reach
    the tolerance."""
    with mpmath.workprec(prec + _beta_guard(a, b, x)):
        r, x_min, h, eta = _beta_parts(a, b, x)
        radius = 2 * mpmath.sqrt(mpmath.pi * x_min)
        if abs(eta) * 2 > radius:
            return None          # the eta series would converge slowly or not at all (far tails)
        erfc_term = mpmath.erfc(-eta * mpmath.sqrt(r / 2)) / 2
        log_w = -r * h + _log_gamma_star(r) - _log_gamma_star(mpmath.mpf(a)) - _log_gamma_star(mpmath.mpf(b))
        w = mpmath.exp(log_w) / mpmath.sqrt(2 * mpmath.pi * r)
        tol = mpmath.mpf(2) ** -(prec + 24) * erfc_term / w
        m = mpmath.mpf(min(a, b))
        # degrees needed: eta series ~ (prec + 40) / log2(R / |eta|), k-sum ~ (prec + 40) /
        # log2(2 pi e m / k); doubled until enough
        d_eta = int((prec + 40) / max(float(mpmath.log(radius / abs(eta), 2)), 1)) + 4 if eta else 4
        k_est = int((prec + 40) / max(float(mpmath.log(m, 2)) - 4, 1)) + 4
        n = 2 * k_est + d_eta + 4
        for _ in range(4):
            # (precision rounded up: elements of one (a, b) share the coefficients)
            got = _beta_sum(_beta_phi(a, b, n, -(-mpmath.mp.prec // 128) * 128), eta, r, tol)
            if got is not None:
                break
            n *= 2
        else:
            return None
        s, err, s_abs = got
        val = erfc_term - w * s
        rad = w * err + (abs(erfc_term) + w * s_abs) * mpmath.mpf(2) ** -(prec + 8)
        return val, rad


def _beta_sum(phi, eta, r, tol):
    """(sum_k psi_k(eta) r^-k, error bound, sum of |terms|) for temme_beta, or None when the
    coefficients run out before the k-sum or an eta series reaches ``tol``."""
    s = err = s_abs = mpmath.mpf(0)
    rk, small = mpmath.mpf(1), False
    cur = phi
    for k in range(len(phi) // 2):
        c = _series(cur[1:], eta, tol / rk)            # psi_k = sum phi_k[n + 1] eta^n
        if c is None:
            return None
        t = c[0] * rk
        if k and abs(t) < tol and small:
            return s, err + _SAFETY * abs(t), s_abs    # omitted: the second small term in a row
        small = bool(k) and abs(t) < tol
        s += t
        s_abs += abs(t)
        err += c[2] * rk
        rk /= r
        cur = [(j + 1) * cur[j + 2] for j in range(len(cur) - 2)]
    return None
