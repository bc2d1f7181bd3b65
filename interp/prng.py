"""The bit generators of JAX and XLA as plain NumPy functions (``interp.prng``), bit-exact.

Everything here is vectorised over whole arrays of counters and keys (uint32 NumPy ops, in place,
in cache-sized chunks); nothing loops over elements in Python.

Layers:

* Counter-based cores (Random123, Salmon et al., SC'11): :func:`threefry2x32`,
  :func:`threefry4x32`, :func:`philox4x32`, :func:`philox2x32` (any round count; JAX and XLA use
  20 for Threefry and 10 for Philox). Arguments broadcast like NumPy.
* JAX's PRNG implementations (``jax.random.key(..., impl=name)``): :data:`IMPLS` maps each name
  to an object with ``seed``, ``split``, ``fold_in`` and ``random_bits`` over arrays of keys (key
  data ``uint32[*batch, *key_shape]``), as ``jax/_src/random/{threefry2x32,rbg,philox4x32,
  threefry4x32,philox2x32}.py`` define them, in both ``jax_threefry_partitionable`` modes.
* XLA's ``RngBitGenerator`` (:func:`rng_bit_generator`): THREE_FRY and PHILOX (and DEFAULT,
  which is PHILOX on XLA:CPU/GPU), u64[2] and u64[3] states, every output width and shape rule,
  and the new state, as ``xla/hlo/builder/lib/prng.cc`` defines them.
* :func:`pallas_tpu_bits`: the documented deterministic emulation of the TPU hardware PRNG
  (whose bits are generation-specific and cannot be reproduced).

The algorithms, their sources and the known-answer vectors are in ``spec/random.py``.
"""
from __future__ import annotations

import math

import numpy as np

U32 = np.uint32
U64 = np.uint64
_MASK32 = U64(0xFFFFFFFF)
_S32 = U64(32)
UINT_DTYPES = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32),
               64: np.dtype(np.uint64)}

# Elements per block: four uint32 words of this many elements stay in L2, which makes the
# twenty passes of a Threefry hash several times faster than whole-array passes.
CHUNK = 1 << 14


# ----------------------------------------------------------------------------------------------
# Helpers

def _u32(x) -> np.ndarray:
    return np.asarray(x, dtype=U32) if np.asarray(x).dtype == U32 else np.asarray(x).astype(U32)


def _broadcast_words(*words):
    """Broadcast uint32 words; returns (shape, list of flat arrays or uint32 scalars)."""
    arrs = [np.asarray(w) for w in words]
    for a in arrs:
        if a.dtype != U32:
            raise TypeError(f"PRNG words must be uint32, got {a.dtype}")
    shape = np.broadcast_shapes(*(a.shape for a in arrs))
    flat = []
    for a in arrs:
        if a.size == 1:
            flat.append(U32(a.reshape(())))  # a scalar word: no per-element memory traffic
        else:
            flat.append(np.ascontiguousarray(np.broadcast_to(a, shape)).reshape(-1))
    return shape, flat


def _chunked(core, n_in_words: int, n_out: int, words, rounds):
    """Run ``core(key words, counter words (1-D chunk buffers, modified in place), rounds)`` over
    the broadcast of ``words`` in chunks; returns ``n_out`` uint32 arrays of the broadcast shape."""
    shape, flat = _broadcast_words(*words)
    size = math.prod(shape)
    outs = [np.empty(size, U32) for _ in range(n_out)]
    nkey = len(flat) - n_in_words
    for start in range(0, size, CHUNK):
        stop = min(size, start + CHUNK)
        sl = slice(start, stop)
        keys = [k if np.ndim(k) == 0 else k[sl] for k in flat[:nkey]]
        xs = [outs[i][sl] for i in range(n_out)]
        for i, w in enumerate(flat[nkey:]):
            xs[i][...] = w if np.ndim(w) == 0 else w[sl]
        core(keys, xs, rounds)
    return tuple(o.reshape(shape) for o in outs)


def _rotl(x: np.ndarray, r: int, tmp: np.ndarray) -> None:
    """x = rotate_left(x, r) in place (uint32)."""
    np.left_shift(x, U32(r), out=tmp)
    np.right_shift(x, U32(32 - r), out=x)
    np.bitwise_or(x, tmp, out=x)


# ----------------------------------------------------------------------------------------------
# Random123 cores

_R_2x32 = (13, 15, 26, 6, 17, 29, 16, 24)
_R_4x32 = ((10, 26), (11, 21), (13, 27), (23, 5), (6, 20), (17, 11), (25, 10), (18, 20))
_SKEIN_PARITY = U32(0x1BD11BDA)


def _threefry2x32_core(keys, xs, rounds):
    k0, k1 = keys
    x0, x1 = xs
    ks = (k0, k1, k0 ^ k1 ^ _SKEIN_PARITY)
    tmp = np.empty_like(x0)
    x0 += ks[0]
    x1 += ks[1]
    for r in range(rounds):
        x0 += x1
        _rotl(x1, _R_2x32[r % 8], tmp)
        x1 ^= x0
        if r % 4 == 3:  # key injection s after every fourth round
            s = r // 4 + 1
            x0 += ks[s % 3]
            x1 += ks[(s + 1) % 3]
            x1 += U32(s)


def threefry2x32(k0, k1, x0, x1, rounds: int = 20):
    """Threefry-2x32 (Random123 ``threefry2x32_R``): key (k0, k1), counter (x0, x1) -> (y0, y1).

    Arguments are uint32 arrays (or scalars) that broadcast together; this is JAX's
    ``threefry2x32`` primitive and XLA's ``ThreeFry2x32`` with ``rounds=20``.
    """
    return _chunked(_threefry2x32_core, 2, 2, (k0, k1, x0, x1), rounds)


def _threefry4x32_core(keys, xs, rounds):
    k0, k1, k2, k3 = keys
    x0, x1, x2, x3 = xs
    ks = (k0, k1, k2, k3, k0 ^ k1 ^ k2 ^ k3 ^ _SKEIN_PARITY)
    tmp = np.empty_like(x0)
    x0 += ks[0]
    x1 += ks[1]
    x2 += ks[2]
    x3 += ks[3]
    for r in range(rounds):
        ra, rb = _R_4x32[r % 8]
        if r % 2 == 0:
            x0 += x1
            _rotl(x1, ra, tmp)
            x1 ^= x0
            x2 += x3
            _rotl(x3, rb, tmp)
            x3 ^= x2
        else:
            x0 += x3
            _rotl(x3, ra, tmp)
            x3 ^= x0
            x2 += x1
            _rotl(x1, rb, tmp)
            x1 ^= x2
        if r % 4 == 3:
            s = r // 4 + 1
            x0 += ks[s % 5]
            x1 += ks[(s + 1) % 5]
            x2 += ks[(s + 2) % 5]
            x3 += ks[(s + 3) % 5]
            x3 += U32(s)


def threefry4x32(k0, k1, k2, k3, x0, x1, x2, x3, rounds: int = 20):
    """Threefry-4x32 (Random123 ``threefry4x32_R``): 4-word key and counter -> 4 words."""
    return _chunked(_threefry4x32_core, 4, 4, (k0, k1, k2, k3, x0, x1, x2, x3), rounds)


_PHILOX_M4 = (U64(0xD2511F53), U64(0xCD9E8D57))
_PHILOX_W = (U32(0x9E3779B9), U32(0xBB67AE85))
_PHILOX_M2 = U64(0xD256D193)


import sys as _sys

_LO, _HI = (0, 1) if _sys.byteorder == "little" else (1, 0)


def _mulhilo(m: np.uint64, x: np.ndarray, wide: np.ndarray):
    """(hi, lo) 32-bit halves of the 64-bit products m * x, as strided views into ``wide``."""
    np.multiply(x, m, out=wide, casting="unsafe")
    halves = wide.view(U32)
    return halves[_HI::2], halves[_LO::2]


def _philox4x32_core(keys, xs, rounds):
    k0, k1 = keys
    x0, x1, x2, x3 = xs
    wide0 = np.empty(x0.shape, U64)
    wide1 = np.empty(x0.shape, U64)
    for r in range(rounds):
        if r:
            k0 = k0 + _PHILOX_W[0]
            k1 = k1 + _PHILOX_W[1]
        hi0, lo0 = _mulhilo(_PHILOX_M4[0], x0, wide0)
        hi1, lo1 = _mulhilo(_PHILOX_M4[1], x2, wide1)
        # (x0, x1, x2, x3) <- (hi1 ^ x1 ^ k0, lo1, hi0 ^ x3 ^ k1, lo0)
        np.bitwise_xor(hi1, x1, out=x0)
        x0 ^= k0
        np.bitwise_xor(hi0, x3, out=x2)
        x2 ^= k1
        np.copyto(x1, lo1)
        np.copyto(x3, lo0)


def philox4x32(k0, k1, x0, x1, x2, x3, rounds: int = 10):
    """Philox-4x32 (Random123 ``philox4x32_R``): key (k0, k1), 4-word counter -> 4 words."""
    with np.errstate(over="ignore"):
        return _chunked(_philox4x32_core, 4, 4, (k0, k1, x0, x1, x2, x3), rounds)


def _philox2x32_core(keys, xs, rounds):
    (k0,) = keys
    x0, x1 = xs
    wide = np.empty(x0.shape, U64)
    for r in range(rounds):
        if r:
            k0 = k0 + _PHILOX_W[0]
        hi, lo = _mulhilo(_PHILOX_M2, x0, wide)
        np.bitwise_xor(hi, x1, out=x0)
        x0 ^= k0
        np.copyto(x1, lo)


def philox2x32(k0, x0, x1, rounds: int = 10):
    """Philox-2x32 (Random123 ``philox2x32_R``): key k0, counter (x0, x1) -> (y0, y1)."""
    with np.errstate(over="ignore"):
        return _chunked(_philox2x32_core, 2, 2, (k0, x0, x1), rounds)


# ----------------------------------------------------------------------------------------------
# JAX's key-level operations

def iota_2x32_shape(shape) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) uint32 words of the row-major index of every element of ``shape`` (JAX's
    ``iota_2x32_shape``: a uint64 iota reshaped to ``shape``, split into two words)."""
    hi, lo = _counters(shape)
    return np.broadcast_to(hi, lo.shape).copy(), lo


def _counters(shape):
    """Like :func:`iota_2x32_shape`, with ``hi`` a scalar 0 whenever the size is below 2**32 (the
    common case: no per-element memory for the high word)."""
    shape = tuple(shape)
    n = math.prod(shape)
    if n <= 1 << 32:
        return U32(0), np.arange(n, dtype=U32).reshape(shape)
    idx = np.arange(n, dtype=U64).reshape(shape)
    return (idx >> _S32).astype(U32), (idx & _MASK32).astype(U32)


def seed_words(seeds) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) words of integer seeds, as JAX's ``threefry_seed`` computes them.

    ``hi`` is ``shift_right_logical(seed, 32)``: the top word of a 64-bit seed and 0 for narrower
    types (XLA shifts by >= the bit width give 0). ``lo`` is the low 32 bits of the seed sign- or
    zero-extended (``seed & 0xFFFFFFFF`` after standard promotion), i.e. the seed modulo 2**32.
    """
    s = np.asarray(seeds)
    if s.dtype.kind not in "iu" and not str(s.dtype).startswith(("int", "uint")):
        raise TypeError(f"PRNG seeds must be integers, got {s.dtype}")
    if s.dtype.itemsize == 8:
        u = s.view(U64)
        hi = (u >> _S32).astype(U32)
    else:
        u = s.astype(np.int64).view(U64) if s.dtype.kind == "i" or s.dtype.kind == "V" \
            else s.astype(U64)
        hi = np.zeros(s.shape, U32)
    return hi, (u & _MASK32).astype(U32)


def _expand(words: np.ndarray, n: int) -> np.ndarray:
    """Key words of batch shape K reshaped to broadcast against K + (n trailing dims)."""
    return words.reshape(words.shape + (1,) * n)


def threefry_2x32(k0, k1, count: np.ndarray) -> np.ndarray:
    """JAX's legacy ``threefry_2x32(key, count)`` for a 1-D ``count``: pad to even length, hash
    the first half against the second half, concatenate, drop the pad. Keys broadcast over
    leading batch dims: result ``(*k0.shape, count.size)``."""
    n = count.shape[0]
    c = np.concatenate([count, np.zeros(n % 2, U32)]) if n % 2 else count
    half = c.shape[0] // 2
    y0, y1 = threefry2x32(_expand(k0, 1), _expand(k1, 1), c[:half], c[half:])
    return np.concatenate([y0, y1], axis=-1)[..., :n]


def _bits_from_words(out_words, bit_width: int) -> np.ndarray:
    """Final step of the partitionable ``random_bits``: 64-bit = hi << 32 | lo, else xor of all
    words truncated to the width (JAX's ``convert_element_type`` to a narrower uint)."""
    if bit_width == 64:
        hi, lo = out_words
        return (hi.astype(U64) << _S32) | lo.astype(U64)
    x = out_words[0].copy()
    for w in out_words[1:]:
        x ^= w
    return x if bit_width == 32 else x.astype(UINT_DTYPES[bit_width])


class Threefry2x32Impl:
    """``jax.random`` impl ``threefry2x32`` (tag ``fry``, key ``uint32[2]``)."""
    name = "threefry2x32"
    key_shape = (2,)

    def seed(self, seeds):
        hi, lo = seed_words(seeds)
        return np.stack([hi, lo], axis=-1)

    def split(self, keys, shape, partitionable: bool):
        kb = keys.shape[:-1]
        k0, k1 = keys[..., 0], keys[..., 1]
        if partitionable:  # _threefry_split_foldlike: hash (hi, lo) of each index
            hi, lo = _counters(shape)
            y0, y1 = threefry2x32(_expand(k0, len(shape)), _expand(k1, len(shape)), hi, lo)
            return np.stack([y0, y1], axis=-1)
        n = math.prod(shape)  # _threefry_split_original: threefry_2x32(key, iota(2n))
        words = threefry_2x32(k0, k1, np.arange(2 * n, dtype=U32))
        return words.reshape(kb + tuple(shape) + (2,))

    def fold_in(self, keys, msgs):
        # threefry_2x32(key, threefry_seed(uint32 msg)) == hash of the counter (0, msg)
        k0, k1, m = np.broadcast_arrays(keys[..., 0], keys[..., 1], _u32(msgs))
        y0, y1 = threefry2x32(k0, k1, U32(0), m)
        return np.stack([y0, y1], axis=-1)

    def random_bits(self, keys, bit_width: int, shape, partitionable: bool):
        kb = keys.shape[:-1]
        k0, k1 = keys[..., 0], keys[..., 1]
        if partitionable:
            hi, lo = _counters(shape)
            y0, y1 = threefry2x32(_expand(k0, len(shape)), _expand(k1, len(shape)), hi, lo)
            return _bits_from_words((y0, y1), bit_width)
        size = math.prod(shape)
        max_count = -(-bit_width * size // 32)
        if max_count >= 0xFFFFFFFF:
            # JAX splits the key into blocks here; 2**32 words (16 GiB) are out of our reach.
            raise NotImplementedError("threefry random_bits (partitionable=False) of more than "
                                      "2**32 - 2 words")
        words = threefry_2x32(k0, k1, np.arange(max_count, dtype=U32))
        if bit_width == 64:  # first half of the words are the high halves
            out = (words[..., :size].astype(U64) << _S32) | words[..., size:].astype(U64)
        elif bit_width == 32:
            out = words
        else:  # little-endian view of the words, truncated
            le = np.ascontiguousarray(words).astype("<u4", copy=False)
            out = le.view(UINT_DTYPES[bit_width])[..., :size]
        return out.reshape(kb + tuple(shape))


def u32x4_to_state(key) -> np.ndarray:
    """JAX's uint32[4] rng_bit_generator key -> XLA's u64[2] state (u64[i] = w[2i] | w[2i+1]<<32)."""
    w = np.asarray(key, U32).reshape(-1, 2).astype(U64)
    return w[:, 0] | (w[:, 1] << _S32)


def state_to_u32x4(state: np.ndarray) -> np.ndarray:
    s = np.asarray(state, U64)
    return np.stack([(s & _MASK32).astype(U32), (s >> _S32).astype(U32)], axis=-1).reshape(-1)


class RbgImpl:
    """``jax.random`` impl ``rbg`` (key ``uint32[4]``): threefry seed/split/fold_in on each half
    key, bits from ``rng_bit_generator`` with RNG_DEFAULT (PHILOX on XLA:CPU/GPU)."""
    name = "rbg"
    key_shape = (4,)
    _fry = Threefry2x32Impl()

    def seed(self, seeds):
        half = self._fry.seed(seeds)
        return np.concatenate([half, half], axis=-1)

    def split(self, keys, shape, partitionable: bool):
        kb = keys.shape[:-1]
        halves = keys.reshape(kb + (2, 2))
        out = self._fry.split(halves, shape, partitionable)  # (*kb, 2, *shape, 2)
        out = np.moveaxis(out, len(kb), len(kb) + len(shape))
        return out.reshape(kb + tuple(shape) + (4,))

    def fold_in(self, keys, msgs):
        keys, msgs = _broadcast_keys_msgs(keys, msgs, 4)
        out = self._fry.fold_in(keys.reshape(keys.shape[:-1] + (2, 2)), msgs[..., None])
        return out.reshape(keys.shape)

    def random_bits(self, keys, bit_width: int, shape, partitionable: bool):
        # vmap of rng_bit_generator uses the first key of the batch for the whole batch (JAX's
        # _rng_bit_generator_batching_rule), and random_bits is vmapped over the key batch dims.
        kb = keys.shape[:-1]
        first = keys.reshape(-1, 4)[0] if math.prod(kb) else np.zeros(4, U32)
        _, bits = rng_bit_generator(first, kb + tuple(shape), UINT_DTYPES[bit_width], "DEFAULT")
        return bits


def _broadcast_keys_msgs(keys, msgs, nwords):
    msgs = _u32(msgs)
    shape = np.broadcast_shapes(keys.shape[:-1], msgs.shape)
    return (np.broadcast_to(keys, shape + (nwords,)), np.broadcast_to(msgs, shape))


class UnsafeRbgImpl(RbgImpl):
    """``jax.random`` impl ``unsafe_rbg``: rbg seed and bits; split and fold_in through
    ``rng_bit_generator`` itself (10 draws as a hash)."""
    name = "unsafe_rbg"

    def split(self, keys, shape, partitionable: bool):
        kb = keys.shape[:-1]
        num = math.prod(shape)
        first = keys.reshape(-1, 4)[0] if math.prod(kb) else np.zeros(4, U32)
        _, words = rng_bit_generator(first, kb + (10 * num, 4), np.uint32, "DEFAULT")
        return words[..., ::10, :].reshape(kb + tuple(shape) + (4,))

    def fold_in(self, keys, msgs):
        # rng_bit_generator(rbg_seed(msg), (10, 4))[-1] ^ key; when the messages are batched the
        # batching rule draws the whole batch from the first message's seed.
        msgs = _u32(msgs)
        first = msgs.reshape(-1)[0] if msgs.size else U32(0)
        _, words = rng_bit_generator(self.seed(first), msgs.shape + (10, 4), np.uint32, "DEFAULT")
        keys, last = np.broadcast_arrays(keys, words[..., -1, :])
        return keys ^ last


class Philox4x32Impl:
    """``jax.random`` impl ``philox4x32`` (tag ``phx4``, key ``uint32[2]``)."""
    name = "philox4x32"
    key_shape = (2,)

    def seed(self, seeds):
        hi, lo = seed_words(seeds)
        y = philox4x32(U32(0), U32(0), hi, lo, U32(0), U32(0))
        return np.stack(y[:2], axis=-1)

    def split(self, keys, shape, partitionable: bool):
        n = len(shape)
        hi, lo = _counters(shape)
        y = philox4x32(_expand(keys[..., 0], n), _expand(keys[..., 1], n), U32(0), U32(0), hi, lo)
        return np.stack(y[:2], axis=-1)

    def fold_in(self, keys, msgs):
        keys, msgs = _broadcast_keys_msgs(keys, msgs, 2)
        y = philox4x32(keys[..., 0], keys[..., 1], U32(0), U32(0), U32(0), msgs)
        return np.stack(y[:2], axis=-1)

    def random_bits(self, keys, bit_width: int, shape, partitionable: bool):
        n = len(shape)
        hi, lo = _counters(shape)
        y = philox4x32(_expand(keys[..., 0], n), _expand(keys[..., 1], n), hi, lo, U32(0), U32(0))
        return _bits_from_words(y[:2] if bit_width == 64 else y, bit_width)


class Threefry4x32Impl:
    """``jax.random`` impl ``threefry4x32`` (tag ``fry4``, key ``uint32[4]``)."""
    name = "threefry4x32"
    key_shape = (4,)

    def seed(self, seeds):
        hi, lo = seed_words(seeds)
        z = U32(0)
        return np.stack(threefry4x32(hi, lo, z, z, z, z, z, z), axis=-1)

    def split(self, keys, shape, partitionable: bool):
        n = len(shape)
        hi, lo = _counters(shape)
        k = [_expand(keys[..., i], n) for i in range(4)]
        return np.stack(threefry4x32(*k, U32(0), U32(0), hi, lo), axis=-1)

    def fold_in(self, keys, msgs):
        keys, msgs = _broadcast_keys_msgs(keys, msgs, 4)
        k = [keys[..., i] for i in range(4)]
        return np.stack(threefry4x32(*k, U32(0), U32(0), U32(0), msgs), axis=-1)

    def random_bits(self, keys, bit_width: int, shape, partitionable: bool):
        n = len(shape)
        hi, lo = _counters(shape)
        k = [_expand(keys[..., i], n) for i in range(4)]
        y0, y1, y2, y3 = threefry4x32(*k, hi, lo, U32(0), U32(0))
        if bit_width == 64:
            return _bits_from_words((y0 ^ y2, y1 ^ y3), 64)
        return _bits_from_words((y0, y1, y2, y3), bit_width)


class Philox2x32Impl:
    """``jax.random`` impl ``philox2x32`` (tag ``phx2``, key ``uint32[1]``)."""
    name = "philox2x32"
    key_shape = (1,)

    def seed(self, seeds):
        hi, lo = seed_words(seeds)
        return philox2x32(U32(0), hi, lo)[0][..., None]

    def split(self, keys, shape, partitionable: bool):
        hi, lo = _counters(shape)
        return philox2x32(_expand(keys[..., 0], len(shape)), hi, lo)[0][..., None]

    def fold_in(self, keys, msgs):
        keys, msgs = _broadcast_keys_msgs(keys, msgs, 1)
        return philox2x32(keys[..., 0], U32(0), msgs)[0][..., None]

    def random_bits(self, keys, bit_width: int, shape, partitionable: bool):
        hi, lo = _counters(shape)
        y = philox2x32(_expand(keys[..., 0], len(shape)), hi, lo)
        return _bits_from_words(y, bit_width)


IMPLS = {impl.name: impl for impl in (Threefry2x32Impl(), RbgImpl(), UnsafeRbgImpl(),
                                       Philox4x32Impl(), Threefry4x32Impl(), Philox2x32Impl())}


# ----------------------------------------------------------------------------------------------
# XLA RngBitGenerator

ALGORITHMS = ("DEFAULT", "THREE_FRY", "PHILOX")


def _split_shape_into_halves(shape):
    """XLA's SplitShapeIntoHalves: (split dim, half shape). The first even dimension, else the
    first largest one; a scalar is generated as shape (1,) of which element 0 is used."""
    if not shape:
        return 0, (1,)
    d = next((i for i, s in enumerate(shape) if s % 2 == 0), None)
    if d is None:
        d = max(range(len(shape)), key=lambda i: (shape[i], -i))
    half = list(shape)
    half[d] = -(-shape[d] // 2)
    return d, tuple(half)


def _threefry_bits(state: np.ndarray, shape, width: int):
    key, ctr = state[0], state[1]
    k0, k1 = U32(key & _MASK32), U32(key >> _S32)
    if width == 64:
        n = math.prod(shape)
        c = ctr + np.arange(n, dtype=U64)  # wraps modulo 2**64 like XLA's u64 add
        y0, y1 = threefry2x32(k0, k1, (c & _MASK32).astype(U32), (c >> _S32).astype(U32))
        bits = (y0.astype(U64) | (y1.astype(U64) << _S32)).reshape(shape)
    else:
        d, half = _split_shape_into_halves(shape)
        n = math.prod(half)
        c = ctr + np.arange(n, dtype=U64)
        y0, y1 = threefry2x32(k0, k1, (c & _MASK32).astype(U32), (c >> _S32).astype(U32))
        if not shape:
            bits = y0.reshape(())
        else:
            pair = np.stack([y0.reshape(half), y1.reshape(half)], axis=d + 1)
            full = list(half)
            full[d] = 2 * half[d]
            bits = pair.reshape(full)[tuple(slice(0, s) for s in shape)]
    new_state = state.copy()
    new_state[1] = ctr + U64(n)
    return new_state, bits


def _philox_bits(state: np.ndarray, shape, width: int):
    key = state[0]
    if state.shape[0] >= 3:
        lo, hi = state[1], state[2]
    else:  # u64[2] (what JAX passes): the high counter word is the key word itself
        lo, hi = state[0 + 1], state[0]
    n = math.prod(shape)
    blocks = -(-(2 * n if width == 64 else n) // 4)
    j = np.arange(blocks, dtype=U64)
    clo = lo + j
    chi = hi + (clo < lo).astype(U64)  # 128-bit add: carry into the high word
    w = lambda v, s: ((v >> U64(s)) & _MASK32).astype(U32)  # noqa: E731
    y = philox4x32(U32(key & _MASK32), U32(key >> _S32), w(clo, 0), w(clo, 32), w(chi, 0), w(chi, 32))
    if width == 64:
        a = y[0].astype(U64) | (y[1].astype(U64) << _S32)
        b = y[2].astype(U64) | (y[3].astype(U64) << _S32)
        flat = np.stack([a, b], axis=-1).reshape(-1)
    else:
        flat = np.stack(y, axis=-1).reshape(-1)
    bits = flat[:n].reshape(shape)
    new_state = state.copy()
    new_lo = lo + U64(blocks)
    new_state[1] = new_lo
    if state.shape[0] >= 3:
        new_state[2] = hi + U64(new_lo < lo)
    return new_state, bits


def rng_bit_generator(key, shape, dtype, algorithm: str = "DEFAULT"):
    """XLA's ``RngBitGenerator(algorithm, state, shape)`` -> (new state, bits).

    ``key``: the state as XLA's ``u64[N]`` (N >= 2; N >= 3 for the 128-bit Philox counter), or
    JAX's ``uint32[4]`` (converted to u64[2] and back, like JAX's lowering). ``dtype``: uint8,
    uint16, uint32 or uint64 (8/16-bit outputs are 32-bit draws truncated). ``algorithm``:
    "DEFAULT" (PHILOX, as on XLA:CPU and XLA:GPU), "THREE_FRY" or "PHILOX".
    """
    dtype = np.dtype(dtype)
    if dtype not in UINT_DTYPES.values():
        raise TypeError(f"rng_bit_generator: unsupported dtype {dtype}")
    key = np.asarray(key)
    as_u32 = key.dtype == U32
    if as_u32:
        if key.shape != (4,):
            raise ValueError(f"a uint32 rng_bit_generator key must have shape (4,), got {key.shape}")
        state = u32x4_to_state(key)
    else:
        state = np.asarray(key, U64)
        if state.ndim != 1 or state.shape[0] < 2:
            raise ValueError(f"rng_bit_generator state must be u64[N], N >= 2; got {state.shape}")
    shape = tuple(int(s) for s in shape)
    width = 64 if dtype.itemsize == 8 else 32
    alg = str(algorithm).replace("RNG_", "").upper()
    if alg == "DEFAULT":
        alg = "PHILOX"
    with np.errstate(over="ignore"):
        if alg == "THREE_FRY":
            new_state, bits = _threefry_bits(state, shape, width)
        elif alg == "PHILOX":
            new_state, bits = _philox_bits(state, shape, width)
        else:
            raise ValueError(f"unknown RngBitGenerator algorithm {algorithm!r}")
    bits = bits.astype(dtype)  # 8/16-bit: low bits of the 32-bit draws
    return (state_to_u32x4(new_state) if as_u32 else new_state), bits


# ----------------------------------------------------------------------------------------------
# Pallas TPU hardware PRNG emulation

def pallas_tpu_bits(seeds, grid_index, shape, draw: int = 0, options_seed: int = 0) -> np.ndarray:
    """Deterministic emulation of the TPU core's hardware PRNG (``prng_seed`` then
    ``prng_random_bits``): uint32 bits of ``shape``.

    The hardware generator is generation-specific and undocumented, so its bits cannot be
    reproduced; this is a documented stand-in (spec/random.py, "pallas_tpu_bits") that keeps the
    properties a kernel may rely on: the same (seeds, grid point, draw) give the same bits, and
    any change of these gives independent bits. Definition: the 32-bit seed values, the grid
    indices, the draw number (how many ``prng_random_bits`` calls came after the last
    ``prng_seed``) and ``options_seed`` are folded in turn into the Threefry-2x32 key (0, 0)
    with JAX's ``fold_in`` (Threefry hash of the counter (0, value)); element i of the result is
    ``y0 ^ y1`` of the hash of the counter (hi32(i), lo32(i)) under that key, i.e. JAX's
    partitionable ``random_bits``. Never a constant.
    """
    fry = IMPLS["threefry2x32"]
    key = np.zeros(2, U32)
    for v in (*np.asarray(seeds).reshape(-1).tolist(), len(np.asarray(seeds).reshape(-1)),
              *tuple(grid_index), draw, options_seed):
        key = fry.fold_in(key, np.asarray(int(v) & 0xFFFFFFFF, U32))
    return fry.random_bits(key, 32, tuple(shape), partitionable=True)
