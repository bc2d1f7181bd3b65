"""The bit generators of JAX and XLA as plain NumPy functions (``interp.prng``), bit-exact.

Everything here is vectorised over whole arrays of counters and keys; nothing loops over elements
in Python. The counter-based cores run over the flattened broadcast of their arguments in
large chunks (:func:`_hash`): each chunk's words live in one small work array, every round
is a handful of in-place ufuncs over all of its words at once (Threefry-4x32 and Philox-4x32 mix
two word pairs per call), chunks are spread over a few threads (NumPy releases the GIL in its
loops), and the ``random_bits`` callers fold the output words into the result chunk by chunk and
generate the index counters per chunk, so no full-size intermediate is ever written.

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
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

U32 = np.uint32
U64 = np.uint64
_MASK32 = U64(0xFFFFFFFF)
_S32 = U64(32)
UINT_DTYPES = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32),
               64: np.dtype(np.uint64)}

# Elements per chunk. A ufunc call costs about as much as a pass over 10-20 thousand elements, so
# chunks must be large; 2**16 was fastest on the 2-core CI machine (2**13..2**17 measured: 2**13
# 1.5-2x slower, 2**17 no faster), though a 4-word chunk then lives in L2/L3 rather than L1.
CHUNK = 1 << 16
# Threads over which the chunks of one call are spread (results do not depend on it).
THREADS = max(1, min(4, os.cpu_count() or 1))


# ----------------------------------------------------------------------------------------------
# The chunked driver

def _u32(x) -> np.ndarray:
    return np.asarray(x, dtype=U32) if np.asarray(x).dtype == U32 else np.asarray(x).astype(U32)


class _Iota:
    """A counter word given by position: element p of the flattened ``shape`` has the value
    ``(offset + p) mod 2**32``. Generated chunk by chunk instead of read from a full array."""
    __slots__ = ("shape", "offset")

    def __init__(self, shape, offset: int = 0):
        self.shape = tuple(shape)
        self.offset = offset

    def fill(self, out: np.ndarray, start: int) -> None:
        global _IOTA
        if _IOTA.shape[0] < out.shape[0]:
            _IOTA = np.arange(out.shape[0], dtype=U32)
        np.add(_IOTA[:out.shape[0]], U32((self.offset + start) & 0xFFFFFFFF), out=out,
               casting="unsafe")


_IOTA = np.arange(0, dtype=U32)


def _broadcast_words(*words):
    """Broadcast uint32 words; returns (shape, list of flat arrays, uint32 scalars or _Iota)."""
    arrs = [w if isinstance(w, _Iota) else np.asarray(w) for w in words]
    for a in arrs:
        if not isinstance(a, _Iota) and a.dtype != U32:
            raise TypeError(f"PRNG words must be uint32, got {a.dtype}")
    shape = np.broadcast_shapes(*(a.shape for a in arrs))
    flat = []
    for a in arrs:
        if isinstance(a, _Iota):
            if a.shape != shape:
                raise ValueError("an iota counter must have the broadcast shape")
            flat.append(a)
        elif a.size == 1:
            flat.append(U32(a.reshape(())))  # a scalar word: no per-element memory traffic
        else:
            flat.append(np.ascontiguousarray(np.broadcast_to(a, shape)).reshape(-1))
    return shape, flat


_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _map_chunks(work, size: int) -> None:
    """Call ``work(starts)`` on the chunk starts of ``range(size)``, split over THREADS threads."""
    starts = range(0, size, CHUNK)
    n = min(THREADS, len(starts) // 4)  # a thread only pays for itself on a few chunks
    if n <= 1:
        work(starts)
        return
    global _pool, _pool_pid
    with _pool_lock:
        # a forked child inherits the pool object but not its threads: it makes its own
        if _pool is None or _pool._max_workers < n or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="interp-prng")
            _pool_pid = os.getpid()
    per = -(-len(starts) // n)
    for f in [_pool.submit(work, starts[i:i + per]) for i in range(0, len(starts), per)]:
        f.result()


def _hash(core, nkey: int, words, rounds: int, reduce=None, out_dtype=U32):
    """Run ``core`` over the broadcast of ``words`` (``nkey`` key words, then counter words).

    ``core(keys, x, rounds, scratch)`` hashes in place the work array ``x`` (``core.dtype``,
    shape ``(n counter words, m)``, holding a chunk's counter words) under ``keys`` (uint32
    scalars or length-m arrays); ``scratch`` is a per-thread dict for its temporaries. Without
    ``reduce`` the result is one uint32 array of the broadcast shape per counter word; with it,
    ``reduce(x, out)`` folds each chunk's words into the chunk ``out`` of one ``out_dtype`` array.
    """
    shape, flat = _broadcast_words(*words)
    size = math.prod(shape)
    keys, ctrs = flat[:nkey], flat[nkey:]
    nw = len(ctrs)
    direct = reduce is None and core.dtype == U32  # hash in the output itself
    out = np.empty((nw, size), U32) if reduce is None else np.empty(size, out_dtype)

    def work(starts):
        buf = None if direct else np.empty((nw, CHUNK), core.dtype)
        scratch: dict = {}
        for start in starts:
            stop = min(size, start + CHUNK)
            x = out[:, start:stop] if direct else buf[:, :stop - start]
            for row, w in zip(x, ctrs):
                if isinstance(w, _Iota):
                    w.fill(row, start)
                else:
                    row[...] = w if np.ndim(w) == 0 else w[start:stop]
            core([k if np.ndim(k) == 0 else k[start:stop] for k in keys], x, rounds, scratch)
            if reduce is not None:
                reduce(x, out[start:stop])
            elif not direct:
                np.copyto(out[:, start:stop], x, casting="unsafe")

    with np.errstate(over="ignore"):
        _map_chunks(work, size)
    if reduce is not None:
        return out.reshape(shape)
    return tuple(o.reshape(shape) for o in out)


def _temp(scratch: dict, name: str, like: np.ndarray) -> np.ndarray:
    """A per-thread temporary of ``like``'s shape and dtype (the chunk buffer, sliced)."""
    buf = scratch.get(name)
    if buf is None or buf.dtype != like.dtype or buf.shape[0] != like.shape[0]:
        buf = scratch[name] = np.empty((like.shape[0], CHUNK), like.dtype)
    return buf[:, :like.shape[1]]


def _rows(values, dtype, m: int) -> np.ndarray:
    """Per-row operands for a (rows, m) work array: (rows, 1) for scalars, else (rows, m)."""
    if all(np.ndim(v) == 0 for v in values):
        return np.array([[v] for v in values], dtype)
    return np.stack([np.broadcast_to(np.asarray(v).astype(dtype), (m,)) for v in values])


# ----------------------------------------------------------------------------------------------
# Random123 cores

_R_2x32 = (13, 15, 26, 6, 17, 29, 16, 24)
_R_4x32 = ((10, 26), (11, 21), (13, 27), (23, 5), (6, 20), (17, 11), (25, 10), (18, 20))
_SKEIN_PARITY = U32(0x1BD11BDA)


def _threefry2x32_core(keys, x, rounds, scratch):
    k0, k1 = keys
    x0, x1 = x
    ks = (k0, k1, k0 ^ k1 ^ _SKEIN_PARITY)
    tmp = _temp(scratch, "tmp", x[:1])[0]
    x0 += ks[0]
    x1 += ks[1]
    for r in range(rounds):
        x0 += x1
        rot = _R_2x32[r % 8]  # x1 = rotl(x1, rot) ^ x0
        np.left_shift(x1, U32(rot), out=tmp)
        np.right_shift(x1, U32(32 - rot), out=x1)
        x1 |= tmp
        x1 ^= x0
        if r % 4 == 3:  # key injection s after every fourth round
            s = r // 4 + 1
            x0 += ks[s % 3]
            x1 += ks[(s + 1) % 3]
            x1 += U32(s)


_threefry2x32_core.dtype = U32


def threefry2x32(k0, k1, x0, x1, rounds: int = 20):
    """Threefry-2x32 (Random123 ``threefry2x32_R``): key (k0, k1), counter (x0, x1) -> (y0, y1).

    Arguments are uint32 arrays (or scalars) that broadcast together; this is JAX's
    ``threefry2x32`` primitive and XLA's ``ThreeFry2x32`` with ``rounds=20``.
    """
    return _hash(_threefry2x32_core, 2, (k0, k1, x0, x1), rounds)


# Threefry-4x32 mixes the pairs (x0, x1), (x2, x3) in even rounds and (x0, x3), (x2, x1) in odd
# ones: with a = rows (x0, x2) and b = rows (x1, x3) (b reversed in odd rounds), each round is
# a += b; b = rotl(b, (ra, rb)) ^ a: five ufuncs for both pairs.
_ROT_4x32 = [(np.array([[ra], [rb]], U32), np.array([[32 - ra], [32 - rb]], U32))
             for ra, rb in _R_4x32]


def _threefry4x32_injections(keys, rounds: int, m: int, scratch) -> list:
    """The (a rows, b rows) operands of each key injection s (before round 4s): computed once
    per call for scalar keys (every chunk has the same), per chunk for per-element keys."""
    if "injections" in scratch:
        return scratch["injections"]
    k0, k1, k2, k3 = keys
    ks = (k0, k1, k2, k3, k0 ^ k1 ^ k2 ^ k3 ^ _SKEIN_PARITY)
    out = [(_rows((ks[s % 5], ks[(s + 2) % 5]), U32, m),
            _rows((ks[(s + 1) % 5], ks[(s + 3) % 5] + U32(s)), U32, m))
           for s in range(rounds // 4 + 1)]
    if all(np.ndim(k) == 0 for k in keys):
        scratch["injections"] = out
    return out


def _threefry4x32_core(keys, x, rounds, scratch):
    a, b = x[0::2], x[1::2]
    tmp = _temp(scratch, "tmp", a)
    for s, (ka, kb) in enumerate(_threefry4x32_injections(keys, rounds, x.shape[1], scratch)):
        a += ka
        b += kb
        for r in range(4 * s, min(rounds, 4 * s + 4)):
            bb = b if r % 2 == 0 else b[::-1]
            left, right = _ROT_4x32[r % 8]
            a += bb
            np.left_shift(bb, left, out=tmp)
            np.right_shift(bb, right, out=bb)
            bb |= tmp
            bb ^= a


_threefry4x32_core.dtype = U32


def threefry4x32(k0, k1, k2, k3, x0, x1, x2, x3, rounds: int = 20):
    """Threefry-4x32 (Random123 ``threefry4x32_R``): 4-word key and counter -> 4 words."""
    return _hash(_threefry4x32_core, 4, (k0, k1, k2, k3, x0, x1, x2, x3), rounds)


# Philox works on 64-bit words holding 32-bit values: the 32x32 -> 64-bit products are then one
# contiguous same-type multiply, and their halves a shift and a mask. With a = rows (x0, x2) and
# b = rows (x1, x3), a round is p = a * (M0, M1); a = reversed(p >> 32) ^ b ^ k_r;
# b = reversed(p) & 0xFFFFFFFF, over both pairs at once. The round key is carried in b: b holds
# b ^ k_r, so each round's key xor goes into p (p ^= k_{r+1} leaves p >> 32 unchanged and puts
# the next key into p's low half): five ufuncs per round for both pairs (multiply, xor, shift,
# xor, mask), nothing else (uint32 work arrays with views of the product's halves measured
# slower: NumPy does not vectorise the strided half-word views).
_PHILOX_M4 = np.array([[0xD2511F53], [0xCD9E8D57]], U64)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_PHILOX_M2 = U64(0xD256D193)


def _philox_keys(keys, rounds: int, scratch):
    """Round r's key words ``k_i + r * W_i mod 2**32`` as per-row uint64 operands, as a function
    of r: (rows, 1) for scalar keys (all rounds computed once per call: every chunk has the
    same) or (rows, m) for per-element keys (made when the round needs them)."""
    w = np.array(_PHILOX_W[:len(keys)], U64)[:, None]
    if all(np.ndim(k) == 0 for k in keys):
        if "philox_keys" not in scratch:
            k = np.array([[int(k)] for k in keys], U64)
            r = np.arange(rounds, dtype=U64)[:, None, None]
            scratch["philox_keys"] = (k + r * w) & _MASK32
        return scratch["philox_keys"].__getitem__
    k = np.stack([np.asarray(k, U64) for k in keys])
    return lambda r: (k + U64(r) * w) & _MASK32


def _philox_rounds(keys, a, b, mult, rounds, scratch):
    """Philox rounds over rows ``a`` (multiplied by ``mult``) and ``b`` (uint64 work rows):
    the pairs (a[i], b[i]) mix with the product of the other pair (rows reversed; one pair
    mixes with itself)."""
    if rounds == 0:
        return
    p = _temp(scratch, "p", a)
    ks = _philox_keys(keys, rounds, scratch)
    b ^= ks(0)
    for r in range(rounds):
        np.multiply(a, mult, out=p)
        if r + 1 < rounds:
            p ^= ks(r + 1)[::-1]  # the next round's key, for the new b
        np.right_shift(p[::-1], _S32, out=a)
        a ^= b
        np.bitwise_and(p[::-1], _MASK32, out=b)


def _philox4x32_core(keys, x, rounds, scratch):
    _philox_rounds(keys, x[0::2], x[1::2], _PHILOX_M4, rounds, scratch)


_philox4x32_core.dtype = U64


def philox4x32(k0, k1, x0, x1, x2, x3, rounds: int = 10):
    """Philox-4x32 (Random123 ``philox4x32_R``): key (k0, k1), 4-word counter -> 4 words."""
    return _hash(_philox4x32_core, 2, (k0, k1, x0, x1, x2, x3), rounds)


def _philox2x32_core(keys, x, rounds, scratch):
    _philox_rounds(keys, x[0:1], x[1:2], _PHILOX_M2, rounds, scratch)


_philox2x32_core.dtype = U64


def philox2x32(k0, x0, x1, rounds: int = 10):
    """Philox-2x32 (Random123 ``philox2x32_R``): key k0, counter (x0, x1) -> (y0, y1)."""
    return _hash(_philox2x32_core, 1, (k0, x0, x1), rounds)


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


def _index_counters(kb, shape):
    """(hi, lo) counter words of each element's row-major index in ``shape``, for keys of batch
    shape ``kb``: one key and fewer than 2**32 elements (the common case) give ``hi`` = 0 and
    ``lo`` generated chunk by chunk (:class:`_Iota`); otherwise arrays, as JAX's
    ``iota_2x32_shape``."""
    shape = tuple(shape)
    if math.prod(kb) == 1 and math.prod(shape) < 1 << 32:
        return U32(0), _Iota(tuple(kb) + shape)
    return _counters(shape)


def _index_hash(core, keys, before, after, shape, rounds, reduce=None, out_dtype=U32):
    """``core`` over the counters ``(*before, hi(i), lo(i), *after)`` for every index i of
    ``shape``, under every key of ``keys`` (``uint32[*kb, key words]``): result ``kb + shape``."""
    kb, n = keys.shape[:-1], len(shape)
    hi, lo = _index_counters(kb, shape)
    k = [_expand(keys[..., i], n) for i in range(keys.shape[-1])]
    return _hash(core, len(k), (*k, *before, hi, lo, *after), rounds, reduce, out_dtype)


def _xor_rows(x: np.ndarray, rows) -> np.ndarray:
    """The xor of ``x``'s ``rows``, accumulated in place in the first of them (``x`` is the
    chunk's work array, free once hashed): no temporary per chunk."""
    first, *rest = rows
    acc = x[first]
    for r in rest:
        acc ^= x[r]
    return acc


def _bits(core, keys, before, after, shape, rounds, bit_width: int, hi_rows=(0,), lo_rows=(1,)):
    """Partitionable ``random_bits``: the hash of each index (:func:`_index_hash`) folded into
    the output chunk by chunk. 64-bit: xor of the ``hi_rows`` words << 32 | xor of the
    ``lo_rows`` words; narrower: the xor of all words, truncated (JAX's convert_element_type)."""
    def reduce(x, out):
        if bit_width == 64:
            np.copyto(out, _xor_rows(x, hi_rows), casting="unsafe")
            out <<= _S32
            out |= _xor_rows(x, lo_rows)
        else:
            np.copyto(out, _xor_rows(x, range(x.shape[0])), casting="unsafe")

    return _index_hash(core, keys, before, after, shape, rounds, reduce, UINT_DTYPES[bit_width])


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
            return np.stack(_index_hash(_threefry2x32_core, keys, (), (), shape, 20), axis=-1)
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
            return _bits(_threefry2x32_core, keys, (), (), shape, 20, bit_width)
        size = math.prod(shape)
        max_count = -(-bit_width * size // 32)
        if max_count >= 0xFFFFFFFF:
            # JAX splits the key into blocks here; 2**32 words (16 GiB) are out of our reach.
            raise NotImplementedError("random_bits/c6: threefry random_bits (partitionable=False) of "
                                      "more than 2**32 - 2 words")
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
        y = _index_hash(_philox4x32_core, keys, (U32(0), U32(0)), (), shape, 10)
        return np.stack(y[:2], axis=-1)

    def fold_in(self, keys, msgs):
        keys, msgs = _broadcast_keys_msgs(keys, msgs, 2)
        y = philox4x32(keys[..., 0], keys[..., 1], U32(0), U32(0), U32(0), msgs)
        return np.stack(y[:2], axis=-1)

    def random_bits(self, keys, bit_width: int, shape, partitionable: bool):
        # 64-bit: y0 << 32 | y1; narrower: y0 ^ y1 ^ y2 ^ y3
        return _bits(_philox4x32_core, keys, (), (U32(0), U32(0)), shape, 10, bit_width)


class Threefry4x32Impl:
    """``jax.random`` impl ``threefry4x32`` (tag ``fry4``, key ``uint32[4]``)."""
    name = "threefry4x32"
    key_shape = (4,)

    def seed(self, seeds):
        hi, lo = seed_words(seeds)
        z = U32(0)
        return np.stack(threefry4x32(hi, lo, z, z, z, z, z, z), axis=-1)

    def split(self, keys, shape, partitionable: bool):
        y = _index_hash(_threefry4x32_core, keys, (U32(0), U32(0)), (), shape, 20)
        return np.stack(y, axis=-1)

    def fold_in(self, keys, msgs):
        keys, msgs = _broadcast_keys_msgs(keys, msgs, 4)
        k = [keys[..., i] for i in range(4)]
        return np.stack(threefry4x32(*k, U32(0), U32(0), U32(0), msgs), axis=-1)

    def random_bits(self, keys, bit_width: int, shape, partitionable: bool):
        # 64-bit: (y0 ^ y2) << 32 | (y1 ^ y3); narrower: y0 ^ y1 ^ y2 ^ y3
        return _bits(_threefry4x32_core, keys, (), (U32(0), U32(0)), shape, 20, bit_width,
                     hi_rows=(0, 2), lo_rows=(1, 3))


class Philox2x32Impl:
    """``jax.random`` impl ``philox2x32`` (tag ``phx2``, key ``uint32[1]``)."""
    name = "philox2x32"
    key_shape = (1,)

    def seed(self, seeds):
        hi, lo = seed_words(seeds)
        return philox2x32(U32(0), hi, lo)[0][..., None]

    def split(self, keys, shape, partitionable: bool):
        return _index_hash(_philox2x32_core, keys, (), (), shape, 10)[0][..., None]

    def fold_in(self, keys, msgs):
        keys, msgs = _broadcast_keys_msgs(keys, msgs, 1)
        return philox2x32(keys[..., 0], U32(0), msgs)[0][..., None]

    def random_bits(self, keys, bit_width: int, shape, partitionable: bool):
        return _bits(_philox2x32_core, keys, (), (), shape, 10, bit_width)


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

def pallas_tpu_bits(seeds, shape, draw: int = 0, options_seed: int = 0) -> np.ndarray:
    """Deterministic emulation of the TPU core's hardware PRNG (``prng_seed`` then
    ``prng_random_bits``): uint32 bits of ``shape``.

    The hardware generator is generation-specific and undocumented, so its bits cannot be
    reproduced; this is a documented stand-in (spec/pallas_tpu.py pallas_tpu/hardware-prng) that
    keeps the properties a kernel may rely on: the same (seeds, draw) give the same bits, and any
    change of these gives independent bits; like the hardware's sequential generator, the bits do not
    depend on the grid point. Definition: the 32-bit seed values, their count, the draw number
    (how many ``prng_random_bits`` calls came after the last ``prng_seed``) and
    ``options_seed`` are folded in turn into the Threefry-2x32 key (0, 0)
    with JAX's ``fold_in`` (Threefry hash of the counter (0, value)); element i of the result is
    ``y0 ^ y1`` of the hash of the counter (hi32(i), lo32(i)) under that key, i.e. JAX's
    partitionable ``random_bits``. Never a constant.
    """
    fry = IMPLS["threefry2x32"]
    key = np.zeros(2, U32)
    for v in (*np.asarray(seeds).reshape(-1).tolist(), len(np.asarray(seeds).reshape(-1)),
              draw, options_seed):
        key = fry.fold_in(key, np.asarray(int(v) & 0xFFFFFFFF, U32))
    return fry.random_bits(key, 32, tuple(shape), partitionable=True)
