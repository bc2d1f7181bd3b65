"""interp/numerics.py, the reference's one library of rounding and exact arithmetic.

Two kinds of tests. Structural: each rounding function is defined once in interp/ (an AST scan for
functions named or shaped like round-to-odd, round-to-dtype or integer wrap-around outside
numerics.py), and rule modules do not import each other except on an explicit, argued list. And
the library itself against independent values: exact rationals (Fractions), mpmath, hand-computed
cases (infinities, NaN, signed zeros, subnormals, overflow), every float dtype including the
ml_dtypes fp8/fp4 types.
"""
from __future__ import annotations

import ast
import math
import pathlib
import re
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest

import interp
from interp import dtypes, numerics

INTERP = pathlib.Path(interp.__file__).parent
F16, F32, F64, LD = (np.dtype(t) for t in (np.float16, np.float32, np.float64, np.longdouble))
BF16 = dtypes.bfloat16
FLOATS = dtypes.FLOATS
NARROW = tuple(d for d in FLOATS if d not in (F32, F64))


# ---------------------------------------------------------------------------------------------
# One definition of each rounding function

# Function names that say rounding or wrap-around but mean something else, with what they are.
# A new function named like a rounding function goes to interp/numerics.py, or here with a reason.
NOT_NUMERICS = {
    ("prng.py", "_philox_rounds"): "the rounds of the Philox block cipher",
    ("rules/lax_elementwise.py", "round_"): "the rule of lax.round (rounding to an integral value)",
    ("rules/lax_contractions.py", "_round_tf32"): "a dot algorithm's tf32 stage: numerics.reduce_precision_bits",
    ("rules/lax_contractions.py", "_round_pair"): "the Ozaki product's double-double tier, on numerics.two_sum "
                                                  "and numerics.round_exact",
    ("rules/lax_special.py", "_odd_zero"): "odd functions keep the sign of a zero argument",
    ("rules/lax_special.py", "correctly_rounded"): "the special functions' rules (REAL) for models and inputs: "
                                                   "evaluation, not a rounding step",
    ("rules/pallas_tpu.py", "stochastic_round"): "the rule of Pallas TPU's stochastic_round primitive",
}
ROUNDING_NAME = re.compile(r"round|odd|wrap_?int|sign_?ext|sticky")


def _is_one(node) -> bool:
    """The constant 1, or a constructor of it (np.uint64(1))."""
    if isinstance(node, ast.Constant):
        return node.value == 1
    return isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords and _is_one(node.args[0])


def _called(node) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _shift_of_one(node, minus_one: bool) -> bool:
    """``1 << (n - 1)`` (minus_one) or ``1 << n``."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.LShift) and _is_one(node.left)):
        return False
    right = node.right
    is_minus_one = isinstance(right, ast.BinOp) and isinstance(right.op, ast.Sub) and _is_one(right.right)
    return is_minus_one == minus_one


def _own_nodes(fn):
    """The nodes of a function's body, not descending into nested functions or classes (scanned
    on their own)."""
    todo = list(fn.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def numerics_shapes(fn) -> set:
    """What a function (or lambda) does that is numerics.py's job, from its AST:

    - "round-to-odd": a step to a float neighbour (``nextafter``) chosen by the parity of the last
      bit (``(x & 1) == 0``), or a sticky bit or-ed in from a remainder (``n |= 1 if rem else 0``,
      ``(m >> k) | ((m & low) != 0)``);
    - "round-to-dtype": a call of ``round_to_odd`` (the step before a narrow dtype's rounding:
      numerics.round_float's);
    - "wrap-int": a sign extension ``v >= 1 << (n - 1)`` / ``v - (1 << n)``, or its Python-int
      form ``((v + half) & mask) - half``."""
    nodes = list(_own_nodes(fn)) if not isinstance(fn, ast.Lambda) else list(ast.walk(fn.body))
    calls = {_called(n) for n in nodes if isinstance(n, ast.Call)}
    parity = any(isinstance(n, ast.Compare) and isinstance(n.left, ast.BinOp) and isinstance(n.left.op, ast.BitAnd)
                 and (_is_one(n.left.left) or _is_one(n.left.right)) for n in nodes)
    # a sticky bit: ``n |= 1 if rem else 0``, or bits shifted out or-ed back in as one
    # (``(m >> k) | (m & low != 0)``)
    sticky = any((isinstance(n, ast.AugAssign) and isinstance(n.op, ast.BitOr) and isinstance(n.value, ast.IfExp)
                  and _is_one(n.value.body))
                 or (isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr)
                     and any(isinstance(side, ast.BinOp) and isinstance(side.op, ast.RShift)
                             for side in (n.left, n.right))
                     and any(isinstance(c, ast.Compare) for side in (n.left, n.right) for c in ast.walk(side)))
                 for n in nodes)
    sign_test = any(isinstance(n, ast.Compare) and any(_shift_of_one(c, True) for c in n.comparators)
                    and isinstance(n.ops[0], (ast.GtE, ast.Gt)) for n in nodes)
    wrap_sub = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and _shift_of_one(n.right, False)
                   for n in nodes)
    half_trick = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and isinstance(n.right, ast.Name)
                     and isinstance(n.left, ast.BinOp) and isinstance(n.left.op, ast.BitAnd)
                     and isinstance(n.left.left, ast.BinOp) and isinstance(n.left.left.op, ast.Add)
                     and isinstance(n.left.left.right, ast.Name) and n.left.left.right.id == n.right.id
                     for n in nodes)
    shapes = set()
    if ("nextafter" in calls and parity) or sticky:
        shapes.add("round-to-odd")
    if "round_to_odd" in calls:
        shapes.add("round-to-dtype")
    if (sign_test and wrap_sub) or half_trick:
        shapes.add("wrap-int")
    return shapes


def _interp_functions():
    for path in sorted(INTERP.rglob("*.py")):
        rel = path.relative_to(INTERP).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield rel, getattr(node, "name", "<lambda>"), node


def test_each_rounding_function_is_defined_once_in_numerics():
    """No function outside interp/numerics.py is named like one of its rounding functions or
    shaped like round-to-odd, round-to-dtype or integer wrap-around (numerics_shapes); numerics.py
    has each of those shapes in the functions meant to."""
    public = {name for name, value in vars(numerics).items()
              if callable(value) and getattr(value, "__module__", None) == numerics.__name__}
    found, named, inside = [], [], {}
    for rel, name, fn in _interp_functions():
        shapes = numerics_shapes(fn)
        if rel == "numerics.py":
            for shape in shapes:
                inside.setdefault(shape, set()).add(name)
            continue
        if shapes:
            found.append((rel, name, sorted(shapes)))
        if (name.lstrip("_") in public or ROUNDING_NAME.search(name)) and (rel, name) not in NOT_NUMERICS:
            named.append((rel, name))
    assert found == [], "rounding written outside interp/numerics.py"
    assert named == [], "functions named like numerics outside interp/numerics.py (or add to NOT_NUMERICS)"
    # the scan sees the real definitions (it is not vacuous), each kind in its one home
    assert inside == {
        "round-to-odd": {"round_to_odd", "odd_sum", "_int64_to_odd_float64", "round_fraction", "_mpf_float64"},
        "round-to-dtype": {"round_float"},
        "wrap-int": {"sign_extend", "<lambda>"},
    }
    for rel, name in NOT_NUMERICS:
        assert any(r == rel and n == name for r, n, _ in _interp_functions()), f"stale entry {rel} {name}"


def test_numerics_shapes_recognise_the_old_copies():
    """The fingerprints catch the copies this library replaced (as they were written in
    lax_conversions, lax_special and lax_elementwise before), and pass an unrelated function."""
    old = '''
def _to_odd_float32(x):
    f = x.astype(np.float32)
    back = f.astype(x.dtype)
    inexact = (back != x) & ~np.isnan(x) & np.isfinite(x)
    even = (np.asarray(f).view(np.uint32) & np.uint32(1)) == 0
    toward = np.where(x > back, np.float32(np.inf), np.float32(-np.inf))
    return np.where(inexact & even, np.nextafter(f, toward), f).astype(np.float32)

def round_to(w, dtype):
    with np.errstate(all="ignore"):
        if w.dtype == LD and dtype not in (F64, F32):
            w = round_to_odd(w, F64)
        return convert(round_to_odd(w, F32), dtype)

def _mpf_round_odd53(v):
    sign, man, exp, bc = v._mpf_
    n, rem = divmod(man, 1 << (q - exp))
    n |= 1 if rem else 0
    return math.ldexp(n, q)

def _wrap_int(v, dtype):
    bits = D.bit_width(dtype)
    v = v.astype(np.uint64) & np.uint64((1 << bits) - 1)
    v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
    return v.astype(dtype)

def _to_dtype(nbits):
    mask, half = (1 << nbits) - 1, 1 << (nbits - 1)
    return lambda v: ((v + half) & mask) - half

def unrelated(x, y):
    mask, sign = (1 << 8) - 1, 1 << 7
    return np.where(x == y, y, np.nextafter(x, y)) & mask
'''
    got = {getattr(n, "name", "<lambda>"): numerics_shapes(n) for n in ast.walk(ast.parse(old))
           if isinstance(n, (ast.FunctionDef, ast.Lambda))}
    assert got == {"_to_odd_float32": {"round-to-odd"}, "round_to": {"round-to-dtype"},
                   "_mpf_round_odd53": {"round-to-odd"}, "_wrap_int": {"wrap-int"}, "_to_dtype": set(),
                   "<lambda>": {"wrap-int"}, "unrelated": set()}


# ---------------------------------------------------------------------------------------------
# Rule modules import numerics, not each other

# (importer, imported) -> why the importer genuinely reuses the other module's rules. Anything
# else a rule module needs from another is shared machinery: interp/numerics.py, or a non-rule
# module (interp/rules/_*.py, interp/*.py).
RULE_IMPORTS = {
    ("fusion", "lax_contractions"): "a fusion's dot is the dot_general rule's value (dot_general_value)",
    ("spmd", "lax_reductions"): "psum/pmax/pmin are reduce_sum/reduce_max/reduce_min over the "
                                "participants (sum_last, extremum, move_last)",
    ("spmd", "pallas"): "axis_index inside a kernel is Pallas' program-position rule (_axis_index)",
    ("pallas_tpu", "lax_contractions"): "Pallas TPU's matmul/conv are the dot_general/conv rules",
    ("pallas_tpu", "pallas"): "semaphore and operand helpers of the Pallas core rules",
    ("pallas_tpu", "random"): "the Pallas PRNG keys are the random family's KeyArray",
    ("pallas_triton", "pallas"): "Triton's target check is the Pallas core's",
    ("pallas_triton", "lax_special"): "Triton's elementwise math is the special-function rules' (REAL, evaluate)",
    ("pallas_mosaic_gpu", "lax_reductions"): "plgpu's reductions are the reduce_* rules (RULES['reduce_*'])",
    ("pallas_mosaic_gpu", "state"): "run_state's exit hooks (RUN_STATE_EXIT)",
    ("pallas_mosaic_gpu", "spmd"): "a multicast/collective sum is psum's (participants_sum)",
}


def _rule_module_imports() -> set:
    """(importer, imported) pairs of rule modules (interp/rules/*.py without a leading underscore),
    from the sources: module-level and function-local imports, relative or absolute."""
    rules = INTERP / "rules"
    names = {p.stem for p in rules.glob("*.py") if not p.stem.startswith("_")}
    pairs = set()
    for path in rules.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    base = node.module or ""
                elif node.level == 0 and (node.module or "").startswith("interp.rules"):
                    base = (node.module or "")[len("interp.rules"):].lstrip(".")
                else:
                    continue
                targets = [base.split(".")[0]] if base else [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".")[2] for a in node.names if a.name.startswith("interp.rules.")]
            else:
                continue
            pairs |= {(path.stem, t) for t in targets if t in names and t != path.stem}
    return pairs


def test_rule_modules_import_each_other_only_to_reuse_rules():
    imports = _rule_module_imports()
    assert imports - set(RULE_IMPORTS) == set(), "rule modules importing each other: move shared " \
        "machinery to interp/numerics.py or a non-rule module, or argue the reuse in RULE_IMPORTS"
    assert set(RULE_IMPORTS) - imports == set(), "stale RULE_IMPORTS entries"
    # non-rule modules of interp/rules (shared machinery) sit below the rules
    for path in (INTERP / "rules").glob("_*.py"):
        tree = ast.parse(path.read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1
                    and not (n.module or "").startswith("_")], path.name


def test_numerics_sits_at_the_bottom():
    """numerics.py imports NumPy, ml_dtypes, mpmath and interp.dtypes/interp.errors only."""
    tree = ast.parse((INTERP / "numerics.py").read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            modules |= ({f".{a.name}" for a in node.names} if node.level and not node.module
                        else {("." * node.level) + (node.module or "")})
    assert modules <= {"__future__", "functools", "math", "fractions", "ml_dtypes", "mpmath", "numpy",
                       ".dtypes", ".errors"}, modules


# ---------------------------------------------------------------------------------------------
# Independent oracles: exact rationals

def _bits(x) -> int:
    x = np.asarray(x)
    return int(x.reshape(1).view(dtypes.storage_uint(x.dtype))[0])


def _same(actual, expected, msg=""):
    """Bitwise equality of two scalars/arrays of one dtype (every NaN alike)."""
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.dtype == e.dtype, (a.dtype, e.dtype, msg)
    a, e = a.reshape(-1), e.reshape(-1)
    for i in range(a.size):
        with np.errstate(all="ignore"):
            if np.isnan(a[i].astype(F32)) and np.isnan(e[i].astype(F32)):
                continue
        assert _bits(a[i]) == _bits(e[i]), f"{msg}: {a[i]!r} ({_bits(a[i]):#x}) != {e[i]!r} ({_bits(e[i]):#x})"


def _exp2(a: Fraction) -> int:
    """floor(log2(a)) of a positive rational, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    return e


def nearest(v: Fraction, dtype) -> Fraction:
    """``v`` rounded to nearest, ties to even, in ``dtype``'s significand and exponent grid
    (subnormals included, no overflow): the definition, on Fractions."""
    if v == 0:
        return v
    fi = ml_dtypes.finfo(dtype)
    p, emin = fi.nmant + 1, fi.minexp
    a = abs(v)
    q = max(_exp2(a), emin) - (p - 1)
    n = a / Fraction(2) ** q
    m = math.floor(n)
    if n - m > Fraction(1, 2) or (n - m == Fraction(1, 2) and m % 2):
        m += 1
    return (1 if v > 0 else -1) * m * Fraction(2) ** q


def finite_values(dtype) -> np.ndarray:
    """Every finite value of a float dtype of at most 16 bits, from ml_dtypes' own decoding of
    each bit pattern (sorted, as float64: all exact there)."""
    nbits = dtypes.bit_width(dtype)
    patterns = np.arange(1 << nbits, dtype=dtypes.storage_uint(dtype))
    with np.errstate(invalid="ignore"):
        values = patterns.view(dtype).astype(F32).astype(F64)
    return np.unique(values[np.isfinite(values)])


def neighbour_pairs(dtype, rng, n: int):
    """``n`` random pairs of adjacent finite values (lo < hi) of ``dtype`` as float64, from the
    whole range: subnormals, the binade edges and the top included."""
    if dtypes.bit_width(dtype) <= 16:
        v = finite_values(dtype)
        i = np.concatenate([rng.integers(0, v.size - 1, n), [0, v.size - 2, np.searchsorted(v, 0.0)]])
        return v[i], v[i + 1]
    fi = ml_dtypes.finfo(dtype)
    lo = (rng.choice([-1.0, 1.0], n) * np.ldexp(1 + rng.random(n), rng.integers(fi.minexp - fi.nmant, fi.maxexp - 1, n))
          ).astype(dtype)
    lo = np.concatenate([lo, np.array([0.0, float(fi.smallest_subnormal), float(fi.smallest_normal),
                                       -float(fi.max)], dtype)])
    hi = np.nextafter(lo, dtype.type(np.inf))
    ok = np.isfinite(hi)
    return lo[ok].astype(F64), hi[ok].astype(F64)


def near_midpoints(dtype, rng, n: int) -> np.ndarray:
    """float64 values at, just below and just above midpoints between neighbours of ``dtype``,
    and the neighbours themselves (the cases double rounding gets wrong)."""
    lo, hi = neighbour_pairs(dtype, rng, n)
    mid = lo / 2 + hi / 2            # exact: both halves and their sum are float64 numbers
    return np.concatenate([lo, hi, mid, np.nextafter(mid, -np.inf), np.nextafter(mid, np.inf),
                           np.nextafter(lo, np.inf), np.nextafter(hi, -np.inf)])


ROUNDED_DTYPES = [d for d in FLOATS if d.name != "float8_e8m0fnu"]


# ---------------------------------------------------------------------------------------------
# round_to_odd: one definition (the three it replaces differed at overflow)

def test_round_to_odd_by_hand():
    """Hand-computed float64 -> float32 roundings to odd: the exact value where float32 holds it,
    else the neighbour with an odd last bit; beyond the largest finite value that value (round
    toward zero with a sticky bit); infinities, NaN and signed zeros as they are."""
    one_up = 1 + 2.0 ** -23                      # float32 neighbours of 1: 1 (even), 1 + 2**-23 (odd)
    cases = [
        (1.0, 1.0), (1 + 2.0 ** -30, one_up), (1 + 2.0 ** -24, one_up),           # (a tie too)
        (1 + 2.0 ** -23 + 2.0 ** -40, one_up),   # between 1 + 2**-23 (odd) and 1 + 2**-22 (even)
        (-(1 + 2.0 ** -30), -one_up), (2.0 ** 127 * (2 - 2.0 ** -23), 2.0 ** 127 * (2 - 2.0 ** -23)),
        (1e39, 2.0 ** 127 * (2 - 2.0 ** -23)), (-1e300, -(2.0 ** 127 * (2 - 2.0 ** -23))),
        (np.inf, np.inf), (-np.inf, -np.inf), (0.0, 0.0), (-0.0, -0.0),
        (1.5 * 2.0 ** -149, 2.0 ** -149),        # subnormals: 2**-149 (odd), 2**-148 (even)
        (2.5 * 2.0 ** -149, 3 * 2.0 ** -149), (2.0 ** -151, 2.0 ** -149), (-(2.0 ** -200), -(2.0 ** -149)),
    ]
    x = np.array([c[0] for c in cases], F64)
    got = numerics.round_to_odd(x, F32)
    _same(got, np.array([c[1] for c in cases], F32), "round_to_odd")
    assert np.isnan(numerics.round_to_odd(np.array([np.nan]), F32)[0])


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 62, reason="long double is float64 on this platform")
def test_round_to_odd_from_long_double_by_hand():
    big = np.ldexp(np.longdouble(1), 1024)       # above float64's largest finite value
    x = np.array([1 + np.ldexp(np.longdouble(1), -60), big, -big, np.longdouble(np.inf)], LD)
    want = np.array([1 + 2.0 ** -52, np.finfo(F64).max, -np.finfo(F64).max, np.inf], F64)
    _same(numerics.round_to_odd(x, F64), want, "long double -> float64")


@pytest.mark.parametrize("dtype", NARROW + (F32,), ids=str)
def test_round_to_odd_overflow_to_the_largest_value_was_harmless_to_its_callers(dtype):
    """lax_special's copy of round-to-odd overflowed to inf, the other two to the largest finite
    value (the definition: round toward zero, then the sticky bit). Every caller rounds the result
    once more into a narrower dtype, where both give the overflow value: the difference was no
    caller's need, and no bug either. By hand: float32's largest value and inf round alike in
    every narrower dtype (inf, NaN where it has no inf, float4_e2m1fn's saturation)."""
    m = np.finfo(F32).max
    if dtype == F32:                             # (the float64 -> float32 step of long double inputs)
        m = np.finfo(F64).max
        with np.errstate(over="ignore"):
            _same(numerics.round_float(np.array([m, -m], F64), F32), np.array([np.inf, -np.inf], F32))
        return
    got = numerics.round_float(np.array([m, -m], F32), dtype)
    want = numerics.round_float(np.array([np.inf, -np.inf], F32), dtype)
    _same(got, want, str(dtype))
    fi = ml_dtypes.finfo(dtype)
    expected = {"float4_e2m1fn": [fi.max, -fi.max]}.get(dtype.name)
    if expected is None:
        has_inf = np.isinf(np.array(np.inf, F32).astype(dtype).astype(F32))
        expected = [np.inf, -np.inf] if has_inf else [np.nan, np.nan]
    _same(got.astype(F32).astype(F64), np.array(expected, F64).astype(F32).astype(F64), str(dtype))
    # and a float64 beyond float32's range, through round_to_odd's saturation
    with np.errstate(over="ignore"):
        _same(numerics.round_float(np.array([1e39, -1e300], F64), dtype), got, str(dtype))


# ---------------------------------------------------------------------------------------------
# round_float and convert: one rounding, every dtype

@pytest.mark.parametrize("dtype", ROUNDED_DTYPES, ids=str)
def test_round_float_is_nearest_even_against_fractions(dtype):
    """float64 values at, next to and between midpoints of every float dtype (subnormals and the
    top binade included), rounded once: against the definition on Fractions. Values beyond the
    largest finite value are left to the overflow tests."""
    rng = np.random.default_rng(3)
    x = near_midpoints(dtype, rng, 400)
    fmax = float(ml_dtypes.finfo(dtype).max)
    x = x[np.abs(x) <= fmax]
    got = numerics.round_float(x, dtype)
    want = np.array([float(nearest(Fraction(float(v)), dtype)) for v in x], F64)
    want = np.where(np.signbit(x) & (want == 0), -0.0, want)     # a zero keeps the sign
    _same(got, want.astype(F32).astype(dtype) if dtype != F64 else want, str(dtype))


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 62, reason="long double is float64 on this platform")
@pytest.mark.parametrize("dtype", [d for d in ROUNDED_DTYPES if d != LD], ids=str)
def test_round_float_from_long_double_rounds_once(dtype):
    """Long double inputs a hair below or above a midpoint of ``dtype`` (closer than float64 can
    hold): rounding through float64 would land on the midpoint and round to even; round_float
    decides on the long double value. Against Fractions."""
    rng = np.random.default_rng(4)
    lo, hi = neighbour_pairs(dtype, rng, 200)
    mid = lo.astype(LD) / 2 + hi.astype(LD) / 2
    tiny = np.ldexp(np.abs(mid), -60)
    x = np.concatenate([mid - tiny, mid + tiny, mid])
    x = x[(x != 0) & (np.abs(x) <= float(ml_dtypes.finfo(dtype).max))]
    got = numerics.round_float(x, dtype)
    want = np.array([float(nearest(Fraction(*v.as_integer_ratio()), dtype)) for v in x], F64)
    want = np.where((x < 0) & (want == 0), -0.0, want)            # a zero keeps the sign
    _same(got, want.astype(dtype) if dtype in (F32, F64) else want.astype(F32).astype(dtype), str(dtype))


def test_round_float_by_hand():
    """Hand-computed cases: the top of bfloat16 (a value just below the overflow midpoint stays
    finite: double rounding through float32 would reach the midpoint), float4_e2m1fn's NaN -> -0.0
    (XLA's convert), float8_e4m3fn's overflow to NaN, e8m0fnu's powers of two, an array already of
    the dtype returned as it is."""
    bf_max = 2.0 ** 127 * (2 - 2.0 ** -7)
    x = np.array([2.0 ** 127 * (2 - 2.0 ** -8 - 2.0 ** -30), 2.0 ** 127 * (2 - 2.0 ** -8), 1 + 3 * 2.0 ** -8,
                  1 + 3 * 2.0 ** -8 - 2.0 ** -40], F64)
    got = numerics.round_float(x, BF16)
    _same(got, np.array([bf_max, np.inf, 1 + 2.0 ** -6, 1 + 2.0 ** -7], F64).astype(F32).astype(BF16))
    f4 = np.dtype(ml_dtypes.float4_e2m1fn)
    assert _bits(numerics.round_float(np.array(np.nan, F64), f4)) == 0x8        # -0.0
    assert _bits(numerics.round_float(np.array(-np.nan, F32), f4)) == 0x8
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    # float8_e4m3fn: 448 is the largest value, 480 would be the next: 464 is the tie (to 448, even)
    assert np.isnan(numerics.round_float(np.array([464.5, 1e10], F64), e4m3).astype(F32)).all()
    assert (numerics.round_float(np.array([464.0, 463.9], F64), e4m3).astype(F32) == 448.0).all()
    e8m0 = np.dtype(ml_dtypes.float8_e8m0fnu)
    _same(numerics.round_float(np.array([2.0 ** -127, 1.0, 2.0 ** 127], F64), e8m0),
          np.array([0, 127, 254], np.uint8).view(e8m0))
    a = np.ones(3, F32)
    assert numerics.round_float(a, F32) is a
    # NaN into float16: quiet, its top payload bits, as through float32 (NumPy's direct
    # double -> half cast would keep a signaling NaN whose payload is all below bit 42: 0x7c01)
    snan = np.array([0x7FF0000000000001, 0xFFF8000000000000], np.uint64).view(F64)
    got = numerics.round_float(snan, F16)
    assert [_bits(g) for g in got] == [0x7E00, 0xFE00]
    assert [_bits(g) for g in numerics.convert(snan, F16)] == [0x7E00, 0xFE00]


def test_convert_by_hand():
    """XLA convert cases computed by hand: a 64-bit integer just above a bfloat16 midpoint (float64
    would round it onto the midpoint), float -> int saturation against the bound rounded into the
    source type (float4_e2m1fn 6.0 is int8's 127 rounded), NaN -> 0, integer wrap-around, bool."""
    big = np.array([2 ** 60 + 2 ** 52 + 1, -(2 ** 60 + 2 ** 52 + 1), 2 ** 60 + 2 ** 52], np.int64)
    _same(numerics.convert(big, BF16), np.array([2.0 ** 60 + 2.0 ** 53, -(2.0 ** 60 + 2.0 ** 53), 2.0 ** 60],
                                               F32).astype(BF16))
    f4 = np.dtype(ml_dtypes.float4_e2m1fn)
    _same(numerics.convert(np.array([6.0, -6.0, 4.0], F32).astype(f4), np.int8), np.array([127, -128, 4], np.int8))
    _same(numerics.convert(np.array([np.nan, 1e10, -1e10, -2.9, 2.9], F32), np.int32),
          np.array([0, 2 ** 31 - 1, -2 ** 31, -2, 2], np.int32))
    _same(numerics.convert(np.array([300, -1], np.int32), np.uint8), np.array([44, 255], np.uint8))
    _same(numerics.convert(np.array([np.nan, 0.0, -0.0], F32), np.bool_), np.array([True, False, False]))
    _same(numerics.convert(np.array([1.5 + 2j], np.complex64), np.int8), np.array([1], np.int8))


# ---------------------------------------------------------------------------------------------
# Integers

INT_DTYPES = dtypes.SIGNED + dtypes.UNSIGNED


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_wrap_int_is_twos_complement(dtype):
    """Against Python's unbounded integers: v mod 2**n, shifted into the signed range."""
    n = dtypes.bit_width(dtype)
    rng = np.random.default_rng(n)
    edges = [0, 1, -1, 2 ** (n - 1), 2 ** (n - 1) - 1, -2 ** (n - 1), -2 ** (n - 1) - 1, 2 ** n, -2 ** 63,
             2 ** 63 - 1]
    v = np.concatenate([rng.integers(-2 ** 63, 2 ** 63 - 1, 300, dtype=np.int64),
                        np.array([e for e in edges if -2 ** 63 <= e < 2 ** 63], np.int64)])
    signed = dtypes.is_signed(dtype)

    def want(x: int) -> int:
        r = x % (1 << n)
        return r - (1 << n) if signed and r >= 1 << (n - 1) else r
    got = numerics.wrap_int(v, dtype)
    assert got.dtype == dtype
    assert [int(g) for g in got.astype(np.int64 if signed else np.uint64)] == [want(int(x)) for x in v]
    assert [numerics.int_wrapper(n, signed)(int(x)) for x in v] == [want(int(x)) for x in v]
    u = v.astype(np.uint64)              # (uint64 inputs: the same bits)
    assert [int(g) for g in numerics.wrap_int(u, dtype).astype(np.int64 if signed else np.uint64)] == \
        [want(int(x)) for x in u]


def test_wrap_int_by_hand():
    i4, u4, i2 = (np.dtype(getattr(ml_dtypes, n)) for n in ("int4", "uint4", "int2"))
    _same(numerics.wrap_int(np.array([8, 7, -9, 15, -8]), i4), np.array([-8, 7, 7, -1, -8], i4))
    _same(numerics.wrap_int(np.array([16, -1, 17]), u4), np.array([0, 15, 1], u4))
    _same(numerics.wrap_int(np.array([2, -3]), i2), np.array([-2, 1], i2))
    _same(numerics.wrap_int(np.array([128, 255, -129]), np.int8), np.array([-128, -1, 127], np.int8))
    _same(numerics.wrap_int(np.array([2 ** 63], np.uint64), np.int64), np.array([-2 ** 63], np.int64))
    _same(numerics.wrap_int(np.array([-1]), np.uint64), np.array([2 ** 64 - 1], np.uint64))
    _same(numerics.sign_extend(np.array([0, 7, 8, 15]), 4), np.array([0, 7, -8, -1]))


# ---------------------------------------------------------------------------------------------
# Exact values rounded once

@pytest.mark.parametrize("dtype", ROUNDED_DTYPES, ids=str)
def test_round_exact_fraction_and_mpmath_against_fractions(dtype):
    """n * 2**e (round_exact), rationals (round_fraction) and mpmath reals (mp_round), rounded once:
    against the definition on Fractions, for values between neighbours of ``dtype`` (at a
    midpoint, a hair off it either side) and far below the smallest subnormal."""
    rng = np.random.default_rng(5)
    lo, hi = neighbour_pairs(dtype, rng, 60)
    fmax = Fraction(float(ml_dtypes.finfo(dtype).max))
    tiny = Fraction(1, 2 ** 1200)
    for a, b in zip(lo.tolist(), hi.tolist()):
        mid = (Fraction(a) + Fraction(b)) / 2
        for v in (mid, mid - tiny, mid + tiny, Fraction(a) + (Fraction(b) - Fraction(a)) / 3):
            if v == 0 or abs(v) > fmax:
                continue
            want = np.array(float(nearest(v, dtype)), F64)
            want = np.array(-0.0 if want == 0 and v < 0 else want, F64)
            want = want.astype(dtype) if dtype in (F32, F64) else want.astype(F32).astype(dtype)
            d = v.denominator.bit_length() - 1
            if v.denominator == 1 << d:              # dyadic: n * 2**-d
                got = numerics.round_exact(v.numerator, -d, dtype)
                if want != 0:                        # (round_exact's exact zero is +0: n = 0 only)
                    _same(got, want, f"round_exact {v}")
            _same(np.asarray(numerics.round_fraction(v, dtype)).astype(dtype), want, f"round_fraction {v}")
            with mpmath.workprec(v.numerator.bit_length() + v.denominator.bit_length() + 64):
                m = mpmath.mpf(v.numerator) / v.denominator    # (exact where v is dyadic)
            _same(numerics.mp_round([m], dtype), want.reshape(1), f"mp_round {v}")


def test_exact_roundings_by_hand():
    """Hand-computed: an exact zero is +0, overflow gives the dtype's overflow value, mpmath
    infinities and NaN stay, a value below half the smallest float64 subnormal is zero."""
    assert _bits(numerics.round_exact(0, 5, F32)) == 0
    assert numerics.round_exact(1, 2000, F64) == np.inf and numerics.round_exact(-1, 200, F32) == -np.inf
    assert numerics.round_exact(3, -1076, F64) == 2.0 ** -1074          # 3/4 of the smallest subnormal
    assert numerics.round_exact(1, -1075, F64) == 0.0                   # half of it: tie to even (0)
    assert numerics.round_exact(3, -1075, F64) == 2.0 ** -1073          # 1.5 of it: tie to even (2)
    got = numerics.mp_round([mpmath.inf, -mpmath.inf, mpmath.nan, mpmath.mpf(2) ** -1080], F64)
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2]) and _bits(got[3]) == 0
    assert numerics.round_fraction(Fraction(10) ** 400, F32) == np.inf


def test_ziv_decides_or_refuses_loudly():
    """An enclosure whose ends round alike gives that value; one straddling a rounding boundary at
    every precision raises Uncertified (never a guess)."""
    third = numerics.ziv(lambda prec: (mpmath.mpf(1) / 3, mpmath.mpf(2) ** -(prec - 4)), F32, "1/3")
    _same(third, np.array(float(nearest(Fraction(1, 3), F32)), F32))
    midpoint = mpmath.mpf(1) + mpmath.mpf(2) ** -24           # a float32 tie, exactly
    with pytest.raises(numerics.Uncertified, match="not certified"):
        numerics.ziv(lambda prec: (midpoint, mpmath.mpf(2) ** -prec), F32, "a tie", precs=(64, 128))


# ---------------------------------------------------------------------------------------------
# Certified sums

@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64, np.dtype(ml_dtypes.float8_e4m3fn)], ids=str)
def test_float_sum_last_is_the_exact_sum_rounded_once(dtype):
    """Rows built to cancel or to land near a rounding boundary of ``dtype``, summed: each the
    exact (Fraction) sum rounded once. A single -0.0 term keeps its sign; an exact zero sum is +0;
    infinities and NaN as IEEE."""
    rng = np.random.default_rng(6)
    fi = ml_dtypes.finfo(dtype)
    rows = []
    for _ in range(60):
        k = int(rng.integers(2, 12))
        big = float(rng.choice([1.0, 16.0, 2.0 ** -4]))
        half_ulp = big * 2.0 ** -(fi.nmant + 1)
        r = [big, -big, big, half_ulp] + list(rng.standard_normal(k - 2) * half_ulp * 2.0 ** -8)
        rows.append(np.array(r, F64).astype(dtype))
    k = max(len(r) for r in rows)
    x = np.stack([np.concatenate([r, np.zeros(k - r.size, dtype)]) for r in rows])
    got = numerics.float_sum_last(x, dtype)
    want = np.array([float(nearest(sum(Fraction(float(v)) for v in row.astype(F64)), dtype)) for row in x], F64)
    _same(got, want.astype(dtype) if dtype in (F32, F64) else want.astype(F32).astype(dtype), str(dtype))
    special = np.array([[-0.0], [0.0]], F64).astype(dtype)
    _same(numerics.float_sum_last(special, dtype), np.array([-0.0, 0.0], F64).astype(dtype))
    _same(numerics.float_sum_last(np.array([[1.0, -1.0], [-0.0, -0.0]], F64).astype(dtype), dtype),
          np.array([0.0, 0.0], F64).astype(dtype))
    if not np.isinf(np.array(np.inf, F64).astype(dtype).astype(F32)):
        return                                    # (no infinities in this dtype)
    inf = np.array([[np.inf, 1.0], [np.inf, -np.inf], [np.nan, 1.0]], F64).astype(dtype)
    got = numerics.float_sum_last(inf, dtype).astype(F64)
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2])


def test_exact_dot_and_two_sum_are_exact():
    """exact_dot and two_sum against Fractions; odd_sum is odd where inexact."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal(50) * np.ldexp(1.0, rng.integers(-60, 60, 50))
    b = rng.standard_normal(50) * np.ldexp(1.0, rng.integers(-60, 60, 50))
    n, e = numerics.exact_dot(a, b)
    assert Fraction(n) * Fraction(2) ** e == sum(Fraction(x) * Fraction(y) for x, y in zip(a, b))
    s, err = numerics.two_sum(a, b)
    assert all(Fraction(x) + Fraction(y) == Fraction(p) + Fraction(q) for x, y, p, q in zip(a, b, s, err))
    odd = numerics.odd_sum(a, b)
    inexact = err != 0
    assert np.all((odd.view(np.uint64) & np.uint64(1))[inexact] == 1)
    assert np.all(odd[~inexact] == s[~inexact])
    assert np.all(np.abs(odd - s) <= np.spacing(np.abs(s)))


def test_float_keys_order_signed_zeros_and_nan():
    x = np.array([-np.inf, -1.0, -0.0, 0.0, 2.0 ** -149, np.inf, np.nan], F32)
    for nan_key in ("max", "min"):
        k = numerics.float_key(x, nan_key)
        finite_order = k[:-1]
        assert np.all(np.diff(finite_order) > 0)            # -0.0 strictly below +0.0
        assert (k[-1] > k[:-1]).all() if nan_key == "max" else (k[-1] < k[:-1]).all()
        back = numerics.key_to_float(k, F32)
        _same(back[:-1], x[:-1])
        assert np.isnan(back[-1])


# ---------------------------------------------------------------------------------------------
# Whether an approximation decides its rounding (the special functions' fast test)

def _needs_exact(w: float, rel: float, dtype) -> bool:
    """Whether [w - rel|w|, w + rel|w|] holds a rounding boundary of ``dtype`` (a midpoint between
    neighbours, or the overflow threshold), in exact rational arithmetic. ``w`` is normal in
    ``dtype``'s range."""
    fi = ml_dtypes.finfo(dtype)
    p = fi.nmant + 1
    a = Fraction(abs(w))
    e = math.frexp(abs(w))[1] - 1                       # 2**e <= |w| < 2**(e+1)
    s = Fraction(2) ** (e - p + 1)             # the spacing of dtype in this binade
    n = math.floor(a / s)
    below = (n - Fraction(1, 2)) * s if n > 2 ** (p - 1) else 2 ** e - s / 4
    nearest = min(abs(a - (n + Fraction(1, 2)) * s), abs(a - below))
    return nearest <= Fraction(rel) * a


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
@pytest.mark.parametrize("rel", [2.0 ** -44, 2.0 ** -32])
def test_rounding_undecided_flags_every_interval_holding_a_midpoint(dtype, rel):
    """Against exact rationals: every float64 whose interval holds a midpoint is flagged, and a
    flagged one is within the stated tolerance (rel * 2**(e+1)) of one; specials, zeros and
    values below the normal range agree with the generic interval-rounding test."""
    fi = ml_dtypes.finfo(dtype)
    k = 52 - fi.nmant
    tol = math.ceil(rel * 2.0 ** 53)
    rng = np.random.default_rng(7)
    n = 3000
    # significands whose low k bits sit within 3 tol of the midpoint pattern, or at random
    hi = rng.integers(0, 1 << (52 - k), n, dtype=np.uint64) << np.uint64(k)
    off = rng.integers(-3 * tol, 3 * tol + 1, n) + (1 << (k - 1))
    off[: n // 4] = rng.integers(0, 1 << k, n // 4)
    sig = (hi | off.astype(np.uint64)) | np.uint64(1 << 52)
    e = rng.integers(fi.minexp, fi.maxexp, n)
    w = np.ldexp(sig.astype(F64) / 2.0 ** 52, e) * rng.choice([-1.0, 1.0], n)
    # and the binade edges (both sides of a power of two) and the overflow threshold's binade
    edges = np.ldexp(1.0, np.arange(fi.minexp + 1, fi.maxexp))
    w = np.concatenate([w, edges, np.nextafter(edges, 0), np.nextafter(edges, np.inf),
                        [float(fi.max) * (1 + 2.0 ** -(fi.nmant + 2))]])
    got = numerics.rounding_undecided(w, rel, dtype)
    assert got.shape == w.shape
    need = np.array([_needs_exact(float(v), rel, dtype) for v in w])
    assert need.sum() > n // 10                           # not vacuous
    assert np.all(got[need]), w[need & ~got]
    for v in w[got & ~need]:
        # only the tolerance's slack: within rel * 2**(e+1) of a midpoint
        assert _needs_exact(float(v), rel * 2 * 2.0 ** (math.frexp(abs(v))[1] - 1) / abs(v), dtype), v
    # outside the normal range: what the generic test says
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 2.0 ** -1022,
                        float(fi.smallest_subnormal) * 1.5, float(fi.smallest_normal) * (1 - 2.0 ** -30),
                        2.0 ** fi.maxexp, 1e300])
    for v in np.concatenate([special, -special]):
        assert bool(numerics.rounding_undecided(np.array([v]), rel, dtype)[0]) == bool(
            numerics._undecided_generic(np.array([v]), rel, dtype)[0]), v
