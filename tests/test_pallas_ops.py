"""The kernels JAX ships (jax.experimental.pallas.ops.tpu and the plain-Pallas ops.gpu kernels)
run in the reference at small shapes and match their own reference functions on XLA:CPU.

Float kernels reassociate sums (blocked matmuls, online softmax), so they agree with their jnp
reference only up to f32 rounding of those sums: the bound used is ``TOL * (1 + |want|)`` with
TOL = 2e-5 for f32 (K <= 512 terms: a few hundred ulps of 2^-24 at most), stated per kernel where
it differs. Integer and PRNG kernels are compared bit-exactly.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import interp
from tests.support import xla_cpu

TOL = 2e-5
RNG = np.random.default_rng(2)



def _close(got, want, tol=TOL):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.isfinite(got).all(), "non-finite values in the reference result"
    err = np.abs(got - want) / (1 + np.abs(want))
    assert err.max() <= tol, f"max scaled error {err.max():.3g} > {tol}"


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# --------------------------------------------------------------------------------------------
# ops.tpu

def test_tpu_example_double():
    from jax.experimental.pallas.ops.tpu import example_kernel
    x = _f32(8, 128)
    np.testing.assert_array_equal(interp.interpret(example_kernel.double)(x), 2 * x)


def test_tpu_matmul():
    from jax.experimental.pallas.ops.tpu import matmul
    x, y = _f32(256, 256), _f32(256, 256)
    f = functools.partial(matmul.matmul, block_shape=(128, 128), block_k=128)
    _close(interp.interpret(f)(x, y), xla_cpu(lambda a, b: a @ b, x, y))


@pytest.mark.parametrize("causal", [False, True])
def test_tpu_flash_attention_forward(causal):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    q, k, v = (_f32(1, 2, 256, 64) for _ in range(3))
    bs = fa.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1)
    f = functools.partial(fa.flash_attention, causal=causal, sm_scale=0.125, block_sizes=bs)
    ref = functools.partial(fa.mha_reference, ab=None, causal=causal, sm_scale=0.125)
    _close(interp.interpret(f)(q, k, v), xla_cpu(ref, q, k, v))


def test_tpu_flash_attention_backward():
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    q, k, v = (_f32(1, 1, 256, 64, scale=0.3) for _ in range(3))
    bs = fa.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1,
                       block_q_major_dkv=128, block_k_major_dkv=128, block_k_dkv=128,
                       block_q_dkv=128, block_k_major_dq=128, block_k_dq=128, block_q_dq=128)

    def loss(fn):
        return lambda q, k, v: jax.grad(lambda *a: fn(*a).sum(), argnums=(0, 1, 2))(q, k, v)

    # (the kernel's backward only implements sm_scale=1)
    f = loss(functools.partial(fa.flash_attention, causal=True, block_sizes=bs))
    ref = loss(functools.partial(fa.mha_reference, ab=None, causal=True))
    for got, want in zip(interp.interpret(f)(q, k, v), xla_cpu(ref, q, k, v)):
        _close(got, want, 1e-4)  # gradients sum 256-term products of softmax terms twice


@pytest.mark.parametrize("op", ["gmm", "tgmm"])
def test_tpu_megablox(op):
    import importlib
    mb = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")
    m, k, n, g = 256, 128, 128, 3
    sizes = np.array([64, 0, 192], np.int32)
    if op == "gmm":
        lhs, rhs = _f32(m, k), _f32(g, k, n)
        f = functools.partial(mb.gmm, tiling=(64, 128, 128))

        def ref(lhs, rhs, sizes):
            ends = jnp.cumsum(sizes)
            row = jnp.arange(m)
            grp = jnp.sum(row[:, None] >= ends[None, :], axis=1)
            return jnp.einsum("mk,mkn->mn", lhs, rhs[grp])
    else:
        lhs, rhs = _f32(k, m), _f32(m, n)
        f = functools.partial(mb.tgmm, tiling=(64, 128, 128))

        def ref(lhs, rhs, sizes):
            ends = jnp.cumsum(sizes)
            starts = ends - sizes
            col = jnp.arange(m)
            masks = (col[None, :] >= starts[:, None]) & (col[None, :] < ends[:, None])
            return jnp.einsum("km,gm,mn->gkn", lhs, masks.astype(lhs.dtype), rhs)
    _close(interp.interpret(f)(lhs, rhs, sizes), xla_cpu(ref, lhs, rhs, sizes))


def test_tpu_paged_attention():
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention_kernel as pa
    from jax.experimental.pallas.ops.tpu.paged_attention import util
    b, hq, hkv, d, page, pages_per_seq = 2, 4, 2, 128, 16, 4
    total = b * pages_per_seq
    q = _f32(b, hq, d)
    k_pages, v_pages = _f32(hkv, total, page, d), _f32(hkv, total, page, d)
    lengths = np.array([37, 64], np.int32)
    page_indices = RNG.permutation(total).reshape(b, pages_per_seq).astype(np.int32)
    f = functools.partial(pa.paged_attention, pages_per_compute_block=2)

    def ref(q, k_pages, v_pages, lengths, page_indices):
        # The kernel computes with bf16 K/V by design (it casts the pages); the reference gets the
        # same rounded pages, gathered per sequence.
        kp = k_pages.astype(jnp.bfloat16).astype(jnp.float32)[:, page_indices]
        vp = v_pages.astype(jnp.bfloat16).astype(jnp.float32)[:, page_indices]
        kp = kp.transpose(1, 0, 2, 3, 4).reshape(b, hkv, pages_per_seq * page, d)
        vp = vp.transpose(1, 0, 2, 3, 4).reshape(b, hkv, pages_per_seq * page, d)
        return util.grouped_query_attention_reference(q, kp, vp, lengths)

    got = interp.interpret(f)(q, k_pages, v_pages, lengths, page_indices)
    _close(got, xla_cpu(ref, q, k_pages, v_pages, lengths, page_indices), 1e-2)


def test_tpu_threefry_random_bits_bit_exact():
    from jax.experimental.pallas.ops.tpu.random import threefry
    # The kernel hashes the element counter with Threefry-2x32 under the raw key: JAX's
    # partitionable random_bits.
    key = np.array([0, 7], np.uint32)
    f = lambda key: threefry.plthreefry_random_bits(key, 32, (16, 256))
    with jax.threefry_partitionable(True):
        want = np.asarray(jax.random.bits(jax.random.wrap_key_data(key, impl="threefry2x32"),
                                          (16, 256)))
    got = interp.interpret(f)(key)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want)


def test_tpu_philox_random_bits_match_xla():
    from jax.experimental.pallas.ops.tpu.random import philox
    from jax.experimental.pallas import tpu as pltpu
    key = np.array([0, 11], np.uint32)

    def f(key):
        return philox.philox_random_bits(key, 32, (16, 256))

    got = interp.interpret(f)(key)
    with pltpu.force_tpu_interpret_mode(True):
        want = xla_cpu(f, key)
    np.testing.assert_array_equal(got, want)


def test_tpu_splash_attention():
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm
    h, s, d = 2, 256, 128
    mask = sm.MultiHeadMask([sm.CausalMask((s, s)) for _ in range(h)])
    bs = sk.BlockSizes(block_q=128, block_kv=128, block_kv_compute=128)
    kernel = sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=bs)
    q, k, v = _f32(h, s, d), _f32(h, s, d), _f32(h, s, d)
    causal = np.tril(np.ones((s, s), bool))

    def ref(q, k, v):
        logits = jnp.einsum("hqd,hkd->hqk", q, k)
        logits = jnp.where(causal, logits, -jnp.inf)
        return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(logits, axis=-1), v)

    _close(interp.interpret(kernel)(q, k, v), xla_cpu(ref, q, k, v))


# --------------------------------------------------------------------------------------------
# ops.gpu (plain Pallas, Triton-style kernels)

def test_gpu_softmax():
    from jax.experimental.pallas.ops.gpu import softmax
    x = _f32(16, 200)
    _close(interp.interpret(softmax.softmax)(x), xla_cpu(lambda x: jax.nn.softmax(x, -1), x))


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_gpu_norms_forward_and_backward(name):
    import importlib
    mod = importlib.import_module(f"jax.experimental.pallas.ops.gpu.{name}")
    fn, ref = getattr(mod, name), getattr(mod, f"{name}_reference")
    x, w, b = _f32(4, 8, 256), _f32(256), _f32(256)
    _close(interp.interpret(fn)(x, w, b), xla_cpu(ref, x, w, b))
    grad = lambda f: jax.grad(lambda x, w, b: (f(x, w, b) ** 2).sum(), argnums=(0, 1, 2))
    for got, want in zip(interp.interpret(grad(fn))(x, w, b), xla_cpu(grad(ref), x, w, b)):
        _close(got, want, 1e-4)


def test_gpu_attention_forward_and_backward():
    from jax.experimental.pallas.ops.gpu import attention
    q, k, v = (_f32(1, 128, 2, 64) for _ in range(3))
    bs = attention.BlockSizes(block_q=64, block_k=64, block_q_dkv=64, block_kv_dkv=64,
                              block_q_dq=64, block_kv_dq=64)
    f = functools.partial(attention.mha, causal=True, segment_ids=None, block_sizes=bs)
    ref = functools.partial(attention.mha_reference, causal=True, segment_ids=None)
    _close(interp.interpret(f)(q, k, v), xla_cpu(ref, q, k, v))
    grad = lambda g: jax.grad(lambda q, k, v: g(q, k, v).sum(), argnums=(0, 1, 2))
    for got, want in zip(interp.interpret(grad(f))(q, k, v), xla_cpu(grad(ref), q, k, v)):
        _close(got, want, 1e-4)


@pytest.mark.parametrize("op", ["mqa", "gqa"])
def test_gpu_decode_attention(op):
    from jax.experimental.pallas.ops.gpu import decode_attention as da
    if op == "mqa":
        q, k, v = _f32(2, 4, 64), _f32(2, 256, 64), _f32(2, 256, 64)
    else:
        q, k, v = _f32(2, 4, 64), _f32(2, 256, 2, 64), _f32(2, 256, 2, 64)
    f = functools.partial(getattr(da, op), block_k=64)
    _close(interp.interpret(f)(q, k, v), xla_cpu(getattr(da, f"{op}_reference"), q, k, v))


def test_gpu_paged_attention():
    from jax.experimental.pallas.ops.gpu import paged_attention as pa
    b, h, d, page, pages_per_seq = 2, 2, 64, 16, 4
    total = b * pages_per_seq
    q = _f32(b, h, d)
    k_pages, v_pages = _f32(h, total, page, d), _f32(h, total, page, d)
    block_tables = RNG.permutation(total).reshape(b, pages_per_seq).astype(np.int32)
    lengths = np.array([40, 64], np.int32)
    f = functools.partial(pa.paged_attention, pages_per_compute_block=2, k_splits=2)

    def ref(q, k_pages, v_pages, block_tables, lengths):
        # gather each sequence's pages: [b, seq, kv_heads, d] as the reference takes them
        k = k_pages[:, block_tables].reshape(h, b, -1, d).transpose(1, 2, 0, 3)
        v = v_pages[:, block_tables].reshape(h, b, -1, d).transpose(1, 2, 0, 3)
        return pa.paged_attention_reference(q, k, v, lengths)

    want = xla_cpu(ref, q, k_pages, v_pages, block_tables, lengths)
    _close(interp.interpret(f)(q, k_pages, v_pages, block_tables, lengths), want)


def test_tpu_ragged_paged_attention():
    # Fails in both of JAX's interpret modes (a static TypedInt index in masked_swap; a
    # ReshapeTransform in the TPU interpret get callback): the reference must run it.
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as rpa
    heads_q, heads_kv, d, page, pages_per_seq, num_pages = 4, 2, 128, 16, 4, 16
    q_lens, kv_lens = [5, 12, 1], [20, 40, 64]
    cu_q = np.array([0] + list(np.cumsum(q_lens)) + [sum(q_lens)], np.int32)
    tokens = 32
    q = _f32(tokens, heads_q, d, scale=0.3)
    kv_pages = _f32(num_pages, page, 2 * heads_kv, d, scale=0.3)
    page_indices = RNG.permutation(num_pages)[:4 * pages_per_seq].reshape(4, pages_per_seq)
    page_indices = page_indices.astype(np.int32)
    kv = np.array(kv_lens + [0], np.int32)
    num_seqs = np.array([3], np.int32)
    args = (q, kv_pages, kv, page_indices, cu_q, num_seqs)
    f = functools.partial(rpa.ragged_paged_attention, sm_scale=0.125,
                          num_kv_pages_per_block=2, num_queries_per_block=8)
    ref = functools.partial(rpa.ref_ragged_paged_attention, sm_scale=0.125)
    got = interp.interpret(f)(*args)
    want = np.asarray(ref(*args))  # eager on CPU: the reference reads num_seqs as a Python int
    n = sum(q_lens)  # rows past the last sequence's queries are not defined by the kernel
    _close(got[:n], want[:n])
