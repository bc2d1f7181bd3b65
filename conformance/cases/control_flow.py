"""cond, while/fori_loop, scan, custom_jvp/vjp, remat: the loop bodies are computed exactly as
written. Float bodies here avoid mul-feeding-add patterns on purpose: FMA contraction inside a loop
body is a backend allowance the equation replay does not reach (it replays top-level equations)."""
from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
from jax import lax

import numpy as np

from spec import compliance as C

from ..case import Case, applicable_if, random_array
from ._elementwise import F32, I32, U8
from ._programs import program_cases


def _fori_int(x):
    return lax.fori_loop(0, 7, lambda i, c: c * 3 + i ^ (c >> 2), x)


def _while_collatz(x):
    def cond(s):
        return (s[0] != 1) & (s[1] < 50)

    def body(s):
        v, n = s
        return jnp.where(v % 2 == 0, v // 2, 3 * v + 1), n + 1
    return jax.vmap(lambda v: lax.while_loop(cond, body, (v, jnp.int32(0))))(jnp.abs(x) % 1000 + 1)


def _scan_cumulative(x):
    return lax.scan(lambda c, v: (jnp.maximum(c, v) + v, c - v), jnp.zeros(x.shape[1:], x.dtype), x)


def _cond(p, x):
    return lax.cond(p[0] > 0, lambda x: x * 2, lambda x: x - 1, x)


def _switch(i, x):
    return lax.switch(i[0], [lambda x: x + 1, lambda x: -x, lambda x: x * x], x)


@jax.custom_jvp
def _clip_grad(x):
    return jnp.tanh(x)


_clip_grad.defjvp(lambda p, t: (_clip_grad(p[0]), t[0] * 0.5))   # a tangent rule unlike tanh's


def cases():
    P = program_cases
    fam = "control_flow"
    yield from P(fam, "fori_loop_int", _fori_int, [(3, 4)], (I32, U8), primitives=["while"])
    yield from P(fam, "while_collatz", _while_collatz, [(16,)], (I32,), primitives=["while"], specials=0)
    yield from P(fam, "scan_max_add", _scan_cumulative, [(6, 5)], (F32, I32), primitives=["scan"])
    yield from P(fam, "cond", _cond, [(3, 4)], (F32, I32), int_inputs={0: (-1, 1, (1,))}, primitives=["cond"])
    yield from P(fam, "switch_clamped_index", _switch, [(5,)], (F32, I32), int_inputs={0: (-2, 4, (1,))},
                 primitives=["cond"])
    yield from P(fam, "custom_jvp_grad", jax.grad(lambda x: jnp.sum(_clip_grad(x) * 3)), [(7,)], (F32,),
                 primitives=["custom_jvp_call", "mul"], specials=0)
    # d/dy (sin(y) y) = sin(y) + y cos(y): a sum that cancels (at y = 2.0424 it is -0.0372 from terms
    # near 0.9), so a per-operation ULP budget bounds the terms, not the result. With M = max|y|:
    # sin within 8 ulp adds 8 eps |sin y| <= 8 eps M (|sin y| <= min(1, |y|)); cos within 8 ulp, times
    # y, adds 8 eps M; rounding y cos(y) adds eps M / 2 and the final add eps |result| / 2: ABS_REL
    # with atol 17 (16.5 rounded up), rtol 1, in eps (8 ulp: JAX's f32 test tolerance, JTU_F32_ULP).
    yield from P(fam, "remat_grad", jax.grad(lambda x: jnp.sum(jax.checkpoint(lambda y: jnp.sin(y) * y)(x))),
                 [(6,)], (F32,), primitives=["remat", "sin", "cos"], specials=0,
                 modes=C.abs_rel(2 * C.JTU_F32_ULP + 1, 1, "first-order"))
    yield from call_cases()


# --------------------------------------------------------------------------------------------
# Calls, custom rules, callbacks and placement: each program runs its primitive for real (the
# traced jaxpr contains it; `jax-conformance coverage` checks) around a body whose value is
# defined bit for bit (integer arithmetic, or float operations that are each correctly rounded
# and never a multiply feeding an add), so every output is EXACT. Float inputs carry no
# subnormals (specials=0): XLA:CPU's flush-to-zero is an allowance the equation replay only
# applies outside call bodies. A primitive only some JAX versions have is gated on the API's
# presence: elsewhere the case is listed as not applicable, with the reason.
# --------------------------------------------------------------------------------------------
_DEF = C.exact("definition")    # integer/bit results and data movement: one right answer
_IEEE = C.exact("ieee754")      # float bodies of correctly rounded basic operations


def _case(name, fn, inputs, primitives, modes=_DEF, **kw):
    return Case(id=f"control_flow/{name}", fn=fn, inputs=inputs, modes=modes, primitives=tuple(primitives),
                tags=("calls",), **kw)


def _ints(*shapes):
    return lambda rng: [random_array(rng, I32, s) for s in shapes]


def _floats(*shapes, low=-10, high=10):
    return lambda rng: [random_array(rng, F32, s, specials=0, low=low, high=high) for s in shapes]


def _mix(x, y):
    return (x ^ (y >> 3)) + x * 3 - (y & 0xFF)


def _composite(x, y):
    return lax.composite(_mix, name="conformance.mix", version=1)(x, y)


def _custom_vmap(x, y):
    from jax.custom_batching import custom_vmap

    @custom_vmap
    def f(a, b):
        return _mix(a, b)

    f.def_vmap(lambda size, batched, a, b: (_mix(a, b), batched[0] or batched[1]))
    return f(x, y)


def _linear_call(d, t):
    from jax.custom_derivatives import linear_call
    # f(t) = t / d (a diagonal solve); its transpose is the same division.
    return linear_call(lambda dd, tt: tt / dd, lambda dd, ct: ct / dd, d, t)


def _linear_call_grad(d, t):
    return jax.grad(lambda tt: jnp.sum(_linear_call(d, tt) * 4.0))(t)


def _diag_solve(d, b):
    # matvec v -> d * v, solve v -> v / d: the value is b / d, correctly rounded per element.
    return lax.custom_linear_solve(lambda v: d * v, b, lambda mv, v: v / d, symmetric=True)


def _diag_solve_grad(d, b):
    # d/db sum(solve(b) * 2) = transpose_solve(2) = 2 / d (symmetric: the same solve).
    return jax.grad(lambda bb: jnp.sum(_diag_solve(d, bb) * 2.0))(b)


def _custom_partitioning(x, y):
    from jax.experimental.custom_partitioning import custom_partitioning

    @custom_partitioning
    def f(a, b):
        return _mix(a, b)

    # Shardy (the default partitioner of both ends of the JAX range) needs a sharding rule.
    f.def_partition(partition=lambda mesh, args, result: (mesh, _mix, args[0].sharding,
                                                           (args[0].sharding, args[1].sharding)),
                    sharding_rule="i, i -> i")
    return f(x, y)


def _square_fwd(x):
    return x * x, x


def _square_bwd(r, ct):
    return (ct * (r * 2.0),)


def _defvjp_remat(f, fwd, bwd):
    import inspect
    kw = {"optimize_remat": True} if "optimize_remat" in inspect.signature(f.defvjp).parameters else {}
    f.defvjp(fwd, bwd, **kw)
    return f


_square_opt = _defvjp_remat(jax.custom_vjp(lambda x: x * x), _square_fwd, _square_bwd)


def _remat_opt_grad(x):
    # optimize_remat: the forward pass is staged as remat_opt (custom_derivatives.py).
    return jax.grad(lambda v: jnp.sum(_square_opt(v)))(x)


def _remat_opt_checkpointed_grad(x):
    # Checkpointing it: the rematerialised primal becomes a call of the primal jaxpr
    # (eval_jaxpr on JAX 0.12, closed_call on 0.10.2) beside remat_opt.
    return jax.grad(lambda v: jnp.sum(jax.checkpoint(_square_opt)(v) * 3.0))(x)


def _remat_policy_grad(x):
    from jax.ad_checkpoint import checkpoint_name

    def layer(v):
        h = checkpoint_name(v * v, "h")
        return -(h * 3.0) - v
    policy = jax.checkpoint_policies.save_only_these_names("h")
    return jax.grad(lambda v: jnp.sum(jax.checkpoint(layer, policy=policy)(v)))(x)


def _barrier(x, y):
    a, b = lax.optimization_barrier((x + y, x - y))
    return a * b, a ^ b


def _runner_device():
    """The device the program is traced for: runners trace under jax.default_device(their device)
    (hardware_runners/base.py); elsewhere (the reference) JAX's first device."""
    dev = jax.config.jax_default_device
    if isinstance(dev, str):   # jax_default_device also takes a platform name
        return jax.devices(dev)[0]
    return dev if dev is not None else jax.devices()[0]


def _placement(x):
    dev = _runner_device()
    s = jax.sharding.SingleDeviceSharding(dev)
    y = lax.with_sharding_constraint(x * 5, s)
    return jax.device_put(y - 7, dev) ^ x


def _reshard(x):
    mesh = jax.make_mesh((1,), ("x",))
    return jax.sharding.reshard(x * 5, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))) ^ x


def _layout(x):
    from jax.experimental.layout import Layout, with_layout_constraint
    y = with_layout_constraint(x.reshape(4, 6) * 5, Layout(major_to_minor=(1, 0)))
    return y.T - 1


def _relayout(x):
    from jax._src.pjit import explicit_layout      # relayout's only producer (traceable from JAX 0.12)
    from jax.experimental.layout import Layout
    f = explicit_layout(lambda a: -a, in_layouts=Layout(major_to_minor=(0, 1)))
    return f(x.reshape(4, 6))


def _xla_metadata_value(x):
    from jax.experimental.xla_metadata import set_xla_metadata
    return set_xla_metadata(x * 5, conformance="tag") ^ x


def _xla_metadata_call(x):
    from jax.experimental.xla_metadata import xla_metadata_call
    return xla_metadata_call(lambda a: (a * 5) ^ x, conformance="call")(x)


def _platform_dependent(x):
    # The reference takes the branch of the platform of the runner it is compared with (Options.platform).
    return lax.platform_dependent(x, cpu=lambda v: v * 3, tpu=lambda v: v * 5, default=lambda v: v - 1)


def _tokens(x):
    # Tokens order side effects; their creation and joining never touch values.
    t = lax.after_all(lax.create_token(), lax.create_token())
    del t
    return x * 3


def _dce_sink(x):
    lax.dce_sink(x * 7)    # keeps an otherwise dead value alive
    return x + 1


def _debug_check(x):
    from jax.experimental import checkify
    # A debug check is a no-op outside checkify (check with debug=True); it holds here anyway.
    checkify.debug_check(jnp.all(x == x), "an integer equals itself")
    return x ^ 5


def _searchsorted(a, q):
    # JAX 0.12 stages this as a hijax primitive (call_hi_primitive[SearchSorted]); 0.10.2 as lax ops.
    return jnp.searchsorted(jnp.sort(a), q, side="left"), jnp.searchsorted(jnp.sort(a), q, side="right")


def _host_prefix_xor(x):
    return np.bitwise_xor.accumulate(np.asarray(x), axis=-1).astype(np.int32)


def _pure_callback(x):
    out = jax.ShapeDtypeStruct(x.shape, jnp.int32)
    return jax.pure_callback(_host_prefix_xor, out, x * 3) + 1


def _pure_callback_vmap(x):
    f = lambda v: jax.pure_callback(_host_prefix_xor, jax.ShapeDtypeStruct(v.shape, jnp.int32), v,  # noqa: E731
                                    vmap_method="sequential")
    return jax.vmap(f)(x)


def _io_callback(x):
    from jax.experimental import io_callback

    def host(v):
        # Stateless on purpose: JAX shares one trace (and so one host closure) between
        # make_jaxpr and jit, so a host counter would carry over from one runner to the next.
        v = np.asarray(v)
        return ((v * 3) ^ (v >> 2)).astype(np.int32)

    def body(i, c):
        return c + io_callback(host, jax.ShapeDtypeStruct(c.shape, jnp.int32), c, ordered=True)
    return lax.fori_loop(0, 3, body, x)


def _debug_callback_and_print(x):
    jax.debug.callback(lambda v: None, x * 2)
    jax.debug.print("conformance debug_print {} {}", x[0], x[-1])
    return x - 3


def _relayout_not_applicable() -> str:
    """Why this JAX cannot trace the relayout case ("" where it can). JAX 0.10.2 has no
    explicit_layout; 0.11.2 has it but no lax primitive has a layout rule yet, so tracing any
    body raises "Missing layout rule for neg" (pjit.py); 0.12 traces it."""
    if not _has(jax, "_src", "pjit", "explicit_layout"):
        return applicable_if(False, "no jax._src.pjit.explicit_layout (relayout's only producer)")
    try:
        jax.make_jaxpr(_relayout)(np.zeros(24, np.int32))
    except NotImplementedError as e:
        return applicable_if(False, f"explicit_layout cannot trace an elementwise body: {e}")
    return ""


def _program_order(x):
    from jax.experimental.overlap import program_order   # (JAX 0.11 on)
    ordered = program_order(lambda a, b: (a * 3 - b, a ^ b), enforce=False)
    y, z = ordered(x, x + 1)
    return y + z


def _core_call(x):
    # JAX 0.10's core.call_p ("call"), bound with its callee as a subfun (what core.call does)
    from jax._src import api_util, core
    from jax._src import linear_util as lu
    body = lambda a: [a * 3 - 1]
    callee = lu.wrap_init(body, debug_info=api_util.debug_info("call", body, (x,), {}))
    return core.call_p.bind(x, subfuns=(callee,))[0] ^ x


def _core_call_is_call() -> bool:
    from jax._src import core
    return core.call_p.name == "call"


def _has(obj, *path):
    for p in path:
        obj = getattr(obj, p, None)
        if obj is None:
            return False
    return True


def call_cases():
    from jax.experimental import xla_metadata
    yield _case("composite/int32", _composite, _ints((3, 5), (3, 5)), ["composite"])
    yield _case("custom_vmap_call/int32", _custom_vmap, _ints((7,), (7,)), ["custom_vmap_call"])
    yield _case("linear_call/float32", _linear_call, _floats((6,), (6,), low=0.5, high=8), ["linear_call"], _IEEE)
    yield _case("linear_call/grad/float32", _linear_call_grad, _floats((6,), (6,), low=0.5, high=8),
                ["linear_call"], _IEEE)
    yield _case("custom_linear_solve/diagonal/float32", _diag_solve, _floats((8,), (8,), low=0.5, high=8),
                ["custom_linear_solve"], _IEEE)
    yield _case("custom_linear_solve/diagonal_grad/float32", _diag_solve_grad,
                _floats((8,), (8,), low=0.5, high=8), ["custom_linear_solve"], _IEEE)
    yield _case("custom_partitioning/int32", _custom_partitioning, _ints((8,), (8,)), ["custom_partitioning"])
    yield _case("remat_opt/grad/float32", _remat_opt_grad, _floats((9,)), ["remat_opt"], _IEEE)
    yield _case("remat_opt/checkpointed_grad/float32", _remat_opt_checkpointed_grad, _floats((9,)),
                ["remat2", "eval_jaxpr", "closed_call"], _IEEE)
    yield _case("remat_policy_names/grad/float32", _remat_policy_grad, _floats((9,)), ["remat2", "name"], _IEEE)
    yield _case("optimization_barrier/int32", _barrier, _ints((4, 3), (4, 3)), ["optimization_barrier"])
    yield _case("placement/sharding_constraint_device_put/int32", _placement, _ints((10,)),
                ["sharding_constraint", "device_put"])
    yield _case("placement/reshard/int32", _reshard, _ints((10,)), ["reshard"])
    yield _case("placement/layout_constraint/int32", _layout, _ints((24,)), ["layout_constraint"])
    yield _case("placement/relayout/int32", _relayout, _ints((24,)), ["relayout"],
                not_applicable=_relayout_not_applicable())
    yield _case("xla_metadata_value/int32", _xla_metadata_value, _ints((10,)), ["xla_metadata_value"])
    yield _case("xla_metadata_call/int32", _xla_metadata_call, _ints((10,)), ["xla_metadata_call"],
                not_applicable=applicable_if(hasattr(xla_metadata, "xla_metadata_call"),
                                             "no jax.experimental.xla_metadata.xla_metadata_call"))
    yield _case("program_order/int32", _program_order, _ints((10,)), ["program_order"],
                not_applicable=applicable_if(importlib.util.find_spec("jax.experimental.overlap")
                                             is not None,
                                             "no jax.experimental.overlap.program_order (JAX 0.11 on)"))
    yield _case("core_call/int32", _core_call, _ints((10,)), ["call"],
                not_applicable=applicable_if(_core_call_is_call(), "core.call_p is eval_jaxpr from "
                                             "JAX 0.11 (core.py: call_p = eval_jaxpr_p)"))
    yield _case("platform_dependent/int32", _platform_dependent, _ints((6,)), ["platform_index", "cond"])
    yield _case("tokens/create_token_after_all/int32", _tokens, _ints((5,)), ["create_token", "after_all"])
    yield _case("dce_sink/int32", _dce_sink, _ints((5,)), ["dce_sink"])
    yield _case("checkify_debug_check/int32", _debug_check, _ints((5,)), ["check"])
    yield _case("searchsorted/int32", _searchsorted, _ints((12,), (3, 5)), ["call_hi_primitive"])
    yield _case("pure_callback/int32", _pure_callback, _ints((3, 6)), ["pure_callback"])
    yield _case("pure_callback/vmap_sequential/int32", _pure_callback_vmap, _ints((3, 6)), ["pure_callback"])
    yield _case("io_callback/ordered_in_loop/int32", _io_callback, _ints((6,)), ["io_callback"])
    yield _case("debug_callback_and_print/int32", _debug_callback_and_print, _ints((4,)),
                ["debug_callback", "debug_print"])
