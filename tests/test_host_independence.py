"""Results must not depend on the host CPU (issue 22).

NumPy picks the loops of its transcendental ufuncs by CPU: on AVX-512 hosts float64 exp, log1p,
expm1, tanh, power... are SVML's or NumPy's own SIMD code and differ from the C library's in the
last bit of a few percent of arguments (docs/numerics.md, "Host independence"). Wherever bits
matter (the reference's values, divergence and allowance models, generated inputs) the project
uses the reference's correctly rounded functions (``interp.rules.lax_special.correctly_rounded``)
or a bound that covers every loop NumPy may run. This test parses every module of the packages
and fails on a use of those ufuncs (or of a float ``**``, which is ``np.power`` on arrays) that is
not on the short allowlist below, each entry with the reason it is safe. Aliases count:
``import numpy as onp``, ``from numpy import exp as e``, ``getattr(np, "exp")``,
``np.logaddexp.accumulate``, ``np.emath.log``.

The second half checks the CI pass that runs the dispatch-sensitive tests again with the host's
optional CPU features turned off (``NPY_DISABLE_CPU_FEATURES``, tests/numpy_dispatch.py, Makefile).
"""
from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests import numpy_dispatch

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("interp", "spec", "conformance", "hardware_runners", "reports")

# NumPy's transcendental ufuncs (NumPy 2 spells some both ways: arcsin and asin, power and pow).
TRANSCENDENTALS = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "logaddexp", "logaddexp2",
    "sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2", "asin", "acos", "atan", "atan2",
    "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "asinh", "acosh", "atanh",
    "power", "pow", "float_power", "cbrt", "hypot", "sinc", "i0"})
POW = "**"

_TABLE = ("wide evaluations of the certified functions: the Ziv test keeps a value only where its bound, "
          "2**-44 relative (256 float64 ulps), decides the rounding; SVML's _ha loops (<= 1 ulp), NumPy's "
          "tanh port (<= 4 ulp) and glibc are all inside it (lax_special.Fn's docstring)")
# (module, function) -> (the ufuncs it may use, why that is safe). "<module>" is module-level code;
# lambdas belong to the function (or module) they are written in.
ALLOWED = {
    ("interp.rules.lax_special", "<module>"): (
        frozenset({"exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "sin", "cos", "tan", "arcsin",
                   "arccos", "arctan", "sinh", "cosh", "arcsinh", "arccosh", "arctanh", "arctan2", "cbrt",
                   "power"}), _TABLE),
    ("interp.rules.lax_special", "_logistic_ld"): (
        frozenset({"exp"}), "long double exp (float64 outputs): no SIMD loop, glibc's expl; certified with ld_rel"),
    ("interp.rules.lax_special", "_igamma_grad_a_mp"): (
        frozenset({POW}), "x ** a of mpmath numbers"),
    ("interp.rules.lax_reductions", "_cumlogsumexp"): (
        frozenset({"exp", "log1p", "logaddexp"}),
        "a certified fast path: its bound allows exp 2 ulp and log1p 1 ulp, doubled (SVML _ha <= 1 ulp); "
        "logaddexp only for infinite or NaN running maxima, where it is exact"),
    ("interp.rules._fft_exact", "_chirp"): (
        frozenset({"hypot"}), "an upper bound on |B| with 16 ulp to spare; np.hypot has no SIMD loop (C hypot)"),
    ("interp.rules.lax_linalg", "_mag"): (
        frozenset({"hypot"}), "std::abs of a complex as LAPACK's kernels compute it: np.hypot has no SIMD "
                              "loop (the C library's hypot, on every host)"),
    ("conformance.case", "_correctly_rounded_exp"): (
        frozenset({"exp"}), "only where finish() of both ends of its 4-ulp interval agree (then finish() of the "
                            "correctly rounded value is theirs); the rest is the correctly rounded exp"),
    ("interp.rules.lax_elementwise", "abs_"): (
        frozenset({"hypot"}), "complex abs in the wide type: np.hypot has no SIMD loop (the C library's "
                              "hypot / hypotl, on every host)"),
    ("spec.lax_contractions", "split_truncation"): (
        frozenset({POW}), "Python floats: u ** i, u a unit roundoff (a power of two) and i an integer: exact"),
}


def _dotted(node) -> list[str] | None:
    """['np', 'logaddexp', 'accumulate'] for np.logaddexp.accumulate; None if not a plain chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def _int_literal(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _power_of_two_or_literal(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and node.value in (2, 2.0)


def _exact_base(node) -> bool:
    """mpmath or Fraction arithmetic (a call of mpmath.*, mpf, Fraction, fractions.Fraction)."""
    if isinstance(node, ast.Call):
        name = _dotted(node.func) or []
        return bool(name) and (name[0] == "mpmath" or name[-1] in ("mpf", "Fraction"))
    return False


class _Scanner(ast.NodeVisitor):
    def __init__(self):
        self.numpy_names: set[str] = set()      # names bound to numpy or a numpy submodule
        self.ufunc_names: dict[str, str] = {}   # from numpy import exp as e: {"e": "exp"}
        self.scope: list[str] = []
        self.uses: list[tuple[str, str, int]] = []   # (function, ufunc or "**", line)

    def collect_imports(self, tree):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "numpy" or a.name.startswith("numpy."):
                        self.numpy_names.add(a.asname or a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and (
                    node.module == "numpy" or node.module.startswith("numpy.")):
                for a in node.names:
                    if a.name == "*":
                        self.uses.append(("<module>", "from numpy import *", node.lineno))
                    elif a.name in TRANSCENDENTALS:
                        self.ufunc_names[a.asname or a.name] = a.name
                    else:
                        self.numpy_names.add(a.asname or a.name)

    def _use(self, what, node):
        self.uses.append((".".join(self.scope) or "<module>", what, node.lineno))

    def _scoped(self, node):
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Attribute(self, node):
        chain = _dotted(node)
        if chain is not None and chain[0] in self.numpy_names:
            for part in chain[1:]:
                if part in TRANSCENDENTALS:
                    self._use(part, node)
            return                       # the chain's inner attributes are this one
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in self.ufunc_names:
            self._use(self.ufunc_names[node.id], node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2:
            target = _dotted(node.args[0])
            if target is not None and target[0] in self.numpy_names:
                name = node.args[1]
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    self._use("getattr(numpy, <computed name>)", node)
                elif name.value in TRANSCENDENTALS:
                    self._use(name.value, node)
        self.generic_visit(node)

    def visit_BinOp(self, node):
        # A float power on arrays is np.power (SVML on AVX-512). Exempt: integer exponents (exact, and
        # NumPy's fast paths), powers of two (exact in every pow), mpmath/Fraction arithmetic.
        if isinstance(node.op, ast.Pow) and not (
                _int_literal(node.right) or _int_literal(node.left)
                or _power_of_two_or_literal(node.left) or _exact_base(node.left)):
            self._use(POW, node)
        self.generic_visit(node)


def scan_source(source: str) -> list[tuple[str, str, int]]:
    tree = ast.parse(source)
    s = _Scanner()
    s.collect_imports(tree)
    s.visit(tree)
    return s.uses


def scan_packages() -> dict[tuple[str, str], list[tuple[str, int]]]:
    """(module, function) -> [(ufunc, line)] over every module of PACKAGES."""
    out: dict = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for func, what, line in scan_source(path.read_text()):
                out.setdefault((module, func), []).append((what, line))
    return out


def test_the_scanner_sees_every_spelling():
    src = '''
import numpy as onp
import numpy
from numpy import exp as e, tanh
from numpy import emath
import jax.numpy as jnp
import mpmath
x = onp.exp(1.0)
def f(a):
    y = numpy.log1p(a) + e(a) + tanh(a) + emath.log(a) + getattr(onp, "expm1")(a)
    z = onp.logaddexp.accumulate(a) + a ** 0.5 + 10.0 ** a + a ** b
    return getattr(numpy, name)(a)
class C:
    def m(self, a):
        return (lambda v: numpy.power(v, 3))(a)
def exempt(a, k):
    return jnp.exp(a) + a ** 2 + a ** -1 + 2.0 ** k + 2.0 ** -44 + mpmath.mpf(2) ** k + onp.sqrt(a) + onp.square(a)
'''
    got = sorted((f, w) for f, w, _ in scan_source(src))
    assert got == sorted([
        ("<module>", "exp"), ("f", "log1p"), ("f", "exp"), ("f", "tanh"), ("f", "log"), ("f", "expm1"),
        ("f", "logaddexp"), ("f", POW), ("f", POW), ("f", POW), ("f", "getattr(numpy, <computed name>)"),
        ("C.m", "power")])


def test_no_transcendental_ufunc_outside_the_allowlist():
    """A new use must be made host-independent (correctly_rounded, mpmath, an exact formula) or
    justified here with the bound that covers every loop NumPy may dispatch to."""
    found = scan_packages()
    unexplained = [f"{module}.{func}: {what} (line {line})" for (module, func), uses in sorted(found.items())
                   for what, line in uses if what not in ALLOWED.get((module, func), (frozenset(),))[0]]
    assert not unexplained, "host-dependent NumPy ufuncs (tests/test_host_independence.py):\n" + "\n".join(unexplained)
    # ... and no stale entry: every allowed name is still used where the entry says
    stale = [(key, sorted(names - {w for w, _ in found.get(key, [])})) for key, (names, _) in ALLOWED.items()
             if names - {w for w, _ in found.get(key, [])}]
    assert not stale, f"allowlist entries no longer used (remove them): {stale}"


# --- the second pass under another NumPy dispatch --------------------------------------------------
def test_optional_features_are_the_hosts_beyond_the_baseline():
    from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__, __cpu_features__
    features = numpy_dispatch.optional_features()
    assert set(features) <= set(__cpu_dispatch__) and not set(features) & set(__cpu_baseline__)
    assert all(__cpu_features__.get(f) for f in features)


@pytest.mark.skipif(not numpy_dispatch.optional_features() or bool(numpy_dispatch.disabled()),
                    reason="this host has no optional NumPy CPU features to turn off (or they are off already)")
def test_turning_the_optional_features_off_changes_numpys_loops():
    """Under NPY_DISABLE_CPU_FEATURES=<the optional features> NumPy reads them as off and runs its
    baseline loops: on an AVX2 or AVX-512 host np.tanh gives other last bits (its SIMD port of SVML's
    tanh is dispatched from AVX2+FMA3 up)."""
    code = ("import numpy as np, sys; sys.path.insert(0, {root!r}); from tests import numpy_dispatch as d; "
            "d.check_disabled(); x = np.linspace(-5, 5, 10001); sys.stdout.write(np.tanh(x).tobytes().hex())")
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=",".join(numpy_dispatch.optional_features()))
    off = subprocess.run([sys.executable, "-c", code.format(root=str(ROOT))], env=env, capture_output=True,
                         text=True, check=True).stdout
    x = np.linspace(-5, 5, 10001)
    on = np.tanh(x)
    off = np.frombuffer(bytes.fromhex(off), np.float64)
    assert np.all(np.abs(on - off) <= 4 * np.spacing(np.abs(on)))      # both within SVML's 4 ulp
    from numpy._core._multiarray_umath import __cpu_features__
    if __cpu_features__.get("AVX2") or __cpu_features__.get("X86_V3"):
        assert (on != off).any(), "the second pass would run the same loops as the first"


# --- generated inputs ---------------------------------------------------------------------------
def _mp_rounded(f, xs) -> np.ndarray:
    import mpmath
    with mpmath.workprec(200):
        return np.array([float(f(mpmath.mpf(float(x)))) for x in xs], np.float64)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_generated_float_magnitudes_are_the_correctly_rounded_exp(dtype):
    """random_array's log-uniform magnitudes are exp of its uniform draws rounded once to float64
    (mpmath at 200 bits here), then to the dtype, so a case's inputs are the same on every host
    ("repro ... --seed S recreates them anywhere"); np.exp gave other last bits on AVX-512 hosts."""
    import mpmath
    from conformance.case import random_array
    from interp import dtypes as D
    dtype = np.dtype(getattr(__import__("ml_dtypes"), dtype) if dtype == "bfloat16" else dtype)
    n, top = 20000, 6e4
    got = random_array(np.random.default_rng(7), dtype, (n,), specials=0.0, low=-top, high=top)
    rng = np.random.default_rng(7)                       # the same draws, in random_array's order
    lo, hi = _mp_rounded(mpmath.log, [1e-3, top])
    mag = _mp_rounded(mpmath.exp, rng.uniform(lo, hi, size=n))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    want = np.clip(np.where(rng.random(n) < 0.5, mag * sign, rng.uniform(-top, top, size=n)), -top, top)
    u = D.storage_uint(dtype)
    assert got.view(u).tolist() == want.astype(dtype).view(u).tolist()


def test_betainc_large_parameters_are_correctly_rounded_powers_of_ten():
    import mpmath
    from conformance.case import rng_for
    from conformance.cases import all_cases
    case = all_cases("nightly")["lax_special/regularized_incomplete_beta/float64/large-parameters"]
    a, b, _ = case.make_inputs(0)
    u = rng_for(case.id, 0).uniform(2, 12, size=(2, 4, 8))     # the case's first draw
    want = _mp_rounded(lambda v: mpmath.mpf(10) ** v, u.ravel()).reshape(u.shape)
    assert np.array_equal(a, want[0]) and np.array_equal(b, want[1])


def test_the_dispatch_pass_names_tests_that_exist():
    for node in numpy_dispatch.DISPATCH_TESTS:
        path, _, func = node.partition("::")
        text = (ROOT / path).read_text()
        assert not func or f"def {func}(" in text, node


def test_the_fast_exp_is_kept_only_where_it_decides():
    """_correctly_rounded_exp near float32 midpoints (arguments whose exp lies within 40 float64 ulp of
    one, tests/test_lax_special.py): both ends of NumPy's interval straddle the midpoint, so those
    elements take the certified value, and the float32 results are those of the exact exp."""
    import mpmath
    from conformance.case import _correctly_rounded_exp
    u = np.array([1.8003417253494263, -1.0149801969528198, -1.3397488594055176, -1.4971097707748413,
                  -1.9727836847305298, 25.496328353881836, -87.22110748291016, 0.24169892072677612, 0.5, 3.0])

    def finish(mag):
        return mag.astype(np.float32)
    fast = np.exp(u)
    assert (finish(fast * (1 - 2.0 ** -48)) != finish(fast * (1 + 2.0 ** -48))).sum() >= 2   # (4 here)
    got = _correctly_rounded_exp(u, finish)
    want = _mp_rounded(mpmath.exp, u)
    assert finish(got).view(np.uint32).tolist() == finish(want).view(np.uint32).tolist()
