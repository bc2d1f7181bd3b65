"""Interpreter speed: per-equation overhead, loops, and large programs against hand-written NumPy.

    python -m bench.interpreter [--quick]      (or python -m bench, which runs every bench module)

Cases (issue 2, Speed):
- a 1,000-equation jaxpr of scalar ops (target: < 5 ms per evaluation), once with the real rules
  and once with every rule replaced by a trivial one (what the evaluator itself costs);
- a fori_loop and a scan of 10,000 iterations (loop bodies reuse one plan), against the same loop
  written in Python over NumPy scalars;
- large elementwise and dot programs as a ratio to the same NumPy code (target: <= 1.2x),
  timed in alternating rounds (bench/_timing.py compare) because the machine is shared.
Every case also checks its result against the NumPy version, so a fast wrong answer cannot hide.
A case whose primitive has no rule yet is reported as missing, not timed.
"""
from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

import interp  # noqa: E402
from interp.evaluator import Plan  # noqa: E402
from interp.options import Options  # noqa: E402
from bench._timing import compare, measure


def _time(fn, repeats):
    """(median seconds, result) of ``repeats`` calls after one warm-up call."""
    t = measure(fn, repeats)
    return t.median, t.out


def _scalar_chain(x):
    # 1,000 equations: 250 x (mul, add, max, sub) on a float32 scalar.
    for _ in range(250):
        x = x * np.float32(1.0001) + np.float32(0.5)
        x = jnp.maximum(x, np.float32(-1.0)) - np.float32(0.25)
    return x


def _numpy_scalar_chain(x):
    for _ in range(250):
        x = x * np.float32(1.0001) + np.float32(0.5)
        x = np.maximum(x, np.float32(-1.0)) - np.float32(0.25)
    return x


def _trivial_rule(eqn, *args, **params):
    return args[0]


def _overhead_rows(repeats):
    x = np.float32(1.0)
    closed = jax.make_jaxpr(_scalar_chain)(x)
    n = len(closed.jaxpr.eqns)
    rows = []
    plan = Plan(closed.jaxpr, Options())
    t_real, out = _time(lambda: plan.run([], [x]), repeats)
    t_np, want = _time(lambda: _numpy_scalar_chain(x), repeats)
    rows.append((f"{n} scalar eqns, real rules", t_real, t_np, out, want,
                 f"{t_real / n * 1e6:.2f} us/eqn (target total < 5 ms)"))
    # The evaluator alone: the same plan with every rule a trivial function (aval check kept).
    bare = Plan(closed.jaxpr, Options())
    bare.steps = [(_trivial_rule,) + tuple(s[1:8]) + (None,) for s in bare.steps]
    t_bare, _ = _time(lambda: bare.run([], [x]), repeats)
    rows.append((f"{n} scalar eqns, trivial rules", t_bare, None, None, None,
                 f"{t_bare / n * 1e6:.2f} us/eqn: the evaluator's own cost"))
    return rows


def _loop_rows(repeats, iters):
    rows = []

    def fori(x):
        return lax.fori_loop(0, iters, lambda i, c: c * np.float32(0.999) + np.float32(1.0), x)

    def numpy_fori(x):
        for _ in range(iters):
            x = x * np.float32(0.999) + np.float32(1.0)
        return x

    def scan(x, xs):
        return lax.scan(lambda c, a: (c * np.float32(0.999) + a, c), x, xs)

    def numpy_scan(x, xs):
        ys = np.empty_like(xs)
        for i in range(xs.shape[0]):
            ys[i] = x
            x = x * np.float32(0.999) + xs[i]
        return x, ys

    x = np.float32(1.0)
    xs = np.linspace(0, 1, iters, dtype=np.float32)
    for name, fn, npfn, args in ((f"fori_loop x{iters}", fori, numpy_fori, (x,)),
                                 (f"scan x{iters}", scan, numpy_scan, (x, xs))):
        f = interp.interpret(fn)
        t, out = _time(lambda: f(*args), repeats)
        t_np, want = _time(lambda: npfn(*args), repeats)
        rows.append((name, t, t_np, out, want, f"{t / iters * 1e6:.2f} us/iteration"))
    return rows


def _large_rows(repeats, n, k):
    rng = np.random.default_rng(0)
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    a = rng.standard_normal((k, k)).astype(np.float32)
    b = rng.standard_normal((k, k)).astype(np.float32)
    cases = [
        (f"elementwise x*y+z f32[{n}]", lambda x, y, z: x * y + z, lambda: x * y + z, (x, y, z)),
        (f"elementwise max(x,y)-z f32[{n}]", lambda x, y, z: jnp.maximum(x, y) - z,
         lambda: np.maximum(x, y) - z, (x, y, z)),
        (f"elementwise 8-op chain f32[{n}]", lambda x, y, z: (((x * y + z) * x - y) * z + x) / y - z,
         lambda: (((x * y + z) * x - y) * z + x) / y - z, (x, y, z)),
        (f"dot f32[{k},{k}] @ f32[{k},{k}]", lambda a, b: jnp.dot(a, b), lambda: a @ b, (a, b)),
    ]
    rows = []
    for name, fn, npfn, args in cases:
        f = interp.interpret(fn)
        # Alternating rounds: both sides see the same load on a shared machine.
        c = compare(lambda: f(*args), npfn, repeats)
        note = "target <= 1.2x NumPy" if "dot" not in name else \
            "vs naive f32 a @ b (another result); bench.contractions: same-semantics ratio"
        rows.append((name, c.a, c.b, c.out_a, c.out_b, f"median ratio {c.ratio:.2f}x; {note}"))
    return rows


def run(quick: bool = False, repeats: int = 5):
    """Rows (case, reference s, NumPy s or None, reference out, NumPy out, note)."""
    groups = (lambda: _overhead_rows(repeats),
              lambda: _loop_rows(max(1, repeats // 2), 2_000 if quick else 10_000),
              lambda: _large_rows(repeats, 1 << (20 if quick else 22), 256 if quick else 1024))
    rows = []
    for group in groups:
        try:
            rows += group()
        except interp.UnsupportedPrimitiveError as e:
            rows.append((f"missing rule: {e.primitive}", None, None, None, None, str(e)[:60]))
    return rows


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations, smaller arrays")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    rows = run(quick=a.quick, repeats=a.repeats)
    print(f"JAX {jax.__version__}; times are medians of steady-state calls")
    print(f"{'case':<40} {'reference':>11} {'NumPy':>11} {'ratio':>7} {'max |diff|':>11}  note")
    for name, t, t_np, out, want, note in rows:
        if t is None:
            print(f"{name:<40} {'-':>11} {'-':>11} {'-':>7} {'-':>11}  {note}")
            continue
        ratio = f"{t / t_np:6.2f}x" if t_np else "      -"
        if out is not None and want is not None:
            diffs = [float(np.max(np.abs(np.asarray(o, np.float64) - np.asarray(w, np.float64))))
                     for o, w in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(want))]
            diff = f"{max(diffs):11.2e}"
        else:
            diff = f"{'-':>11}"
        np_s = f"{t_np * 1e3:9.3f}ms" if t_np else f"{'-':>11}"
        print(f"{name:<40} {t * 1e3:9.3f}ms {np_s} {ratio} {diff}  {note}")


if __name__ == "__main__":
    main()
