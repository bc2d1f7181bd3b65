"""PRNG semantics: the generators, key operations and samplers as the reference implements them
(``interp/prng.py``, ``interp/rules/random.py``), with their sources and exactness.

Sources (the installed JAX is the ground truth for its version; both ends of the range were read):
  * jax/_src/random/prng.py (PRNGImpl, key arrays, random_* primitives, iota_2x32_shape)
  * jax/_src/random/threefry2x32.py, rbg.py, philox4x32.py, threefry4x32.py, philox2x32.py
  * jax/_src/random/core.py (samplers; random_gamma primitive)
  * jax/_src/lax/lax.py (rng_bit_generator lowering: u32[4] key <-> u64[2] state; rng_uniform)
  * jax/_src/lax/control_flow/loops.py (_rng_bit_generator_batching_rule)
  * xla/hlo/builder/lib/prng.cc (ThreeFry2x32, Philox4x32, SplitShapeIntoHalves, counters)
  * xla/service/rng_bit_generator_expander.cc (state layouts, RNG_DEFAULT)
  * Random123 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and its
    tests/kat_vectors (spec/kat/random123_kat_vectors.txt)
  * docs/prng.md (these algorithms as read from the sources, verified on XLA:CPU)
"""
from __future__ import annotations

import dataclasses

from .base import CONVENTION, Semantics, shared, table

_JAX = "jax/_src/random/"
_XLA_PRNG = "xla/hlo/builder/lib/prng.cc"

# Key arrays (jax.random.key, random_wrap): the structural primitives the random family lifts to
# them (interp/rules/random.py, registered with extended=True).
KEY_ARRAYS = {
    "random/key-array-structure": "broadcast_in_dim, reshape, squeeze, transpose, slice, "
                                  "dynamic_slice, dynamic_update_slice, gather, scatter, concatenate, "
                                  "split, stack, unstack, tile, rev, copy and select_n on key arrays "
                                  "act on the key data with the key's trailing dimensions appended "
                                  "(broadcast dimensions, slice sizes, gather offset dims and scatter "
                                  "window dims extended, zero start indices added); eq/ne compare all "
                                  "key words. Control flow (jit, cond, while, scan carries) passes key "
                                  "arrays through (jax/_src/random/prng.py KeyTyRules; "
                                  "jax/_src/interpreters/mlir.py broadcast_in_dim on extended dtypes; "
                                  "jax/_src/lax/slicing.py _gather_lower_opaque, "
                                  "_scatter_lower_opaque; jax/_src/lax/lax.py "
                                  "_compare_lower_hlo_opaque, _select_hlo_lowering_opaque)",
}

# jax.random on keys of the pallas_tpu impl inside a Pallas TPU kernel, as Mosaic lowers them
# (jax/_src/pallas/mosaic/random.py, lowering.py random_bits_lowering / random_fold_in_lowering;
# docs/pallas/tpu/prng.rst); the random_* entries list these.
PALLAS_TPU_KEYS = {
    "pallas_tpu_key/meaning": "keys of the pallas_tpu impl (pltpu.to_pallas_key, jax.random.key(s, "
                              "impl='pallas_tpu'), wrap_pallas_seed) inside a kernel, as Mosaic lowers "
                              "them (the impl function traced on the key itself): random_bits seeds "
                              "the hardware PRNG with the key's two scalars and draws (so it re-seeds: "
                              "later stateful draws continue from there) and returns the bits as "
                              "uint32; fold_in adds the message to the second word and applies one "
                              "Threefry-2x32 round (rotation 13), bit-exact; random_seed broadcasts the "
                              "seed to both words. The stateful placeholder impl (pltpu.stateful_"
                              "uniform/normal/bernoulli/bits) draws without seeding",
    "pallas_tpu_key/no-split": "random_split: JAX defines none for Pallas keys (_split raises): "
                               "unsupported",
    "pallas_tpu_key/bit-width": "bit widths other than 32 (e.g. uint8 bits, bfloat16 uniform): "
                                "unsupported ('Bit width must be 32')",
    "pallas_tpu_key/scalar-key": "key arrays of rank > 0 in random_bits / fold_in: unsupported "
                                 "(Mosaic seeds from one key)",
    "pallas_tpu_key/in-kernel-only": "random_bits / fold_in of Pallas keys outside a kernel: "
                                     "unsupported (JAX lowers them only inside Pallas TPU kernels; "
                                     "elsewhere they fail)",
    "pallas_tpu_key/seed-in-kernel": "random_seed inside a kernel: Mosaic's lowering gives a vector, "
                                     "not the scalar bundle its random_bits needs, so the program does "
                                     "not compile on TPU; the reference evaluates it by the key's "
                                     "JAX-defined value",
}

SEMANTICS = table(
    Semantics(
        "threefry2x32",
        "Threefry-2x32 with 20 rounds (Random123 threefry2x32_20): key (k0, k1), counter "
        "(x0, x1) -> (y0, y1), elementwise over broadcast uint32 arrays.",
        edge_cases={"threefry2x32/c1": "ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA); x += (ks0, ks1); rotations "
                                       "13,15,26,6 | 17,29,16,24",
                    "threefry2x32/c2": "after every 4 rounds, injection s = 1..5: x0 += ks[s % 3]; x1 "
                                       "+= ks[(s + 1) % 3] + s",
                    "threefry2x32/c3": "all arithmetic modulo 2**32"},
        sources=(_JAX + "threefry2x32.py (_threefry2x32_lowering)", _XLA_PRNG + " ThreeFry2x32",
                 "Random123 threefry.h"),
    ),
    Semantics(
        "threefry4x32",
        "Threefry-4x32 with 20 rounds (Random123 threefry4x32_20).",
        edge_cases={"threefry4x32/c1": "rotation pairs (10,26) (11,21) (13,27) (23,5) (6,20) (17,11) "
                                       "(25,10) (18,20); even rounds mix (x0,x1),(x2,x3), odd rounds "
                                       "(x0,x3),(x2,x1)",
                    "threefry4x32/c2": "injection s after every 4 rounds: x_i += ks[(s + i) % 5], x3 += "
                                       "s; ks4 = k0^k1^k2^k3^0x1BD11BDA"},
        sources=(_JAX + "threefry4x32.py", "Random123 threefry.h"),
    ),
    Semantics(
        "philox4x32",
        "Philox-4x32 with 10 rounds (Random123 philox4x32_10): key (k0, k1), 4-word counter.",
        edge_cases={"philox4x32/c1": "round: (hi0, lo0) = 0xD2511F53 * x0, (hi1, lo1) = 0xCD9E8D57 * x2 "
                                     "(64-bit products); x = (hi1 ^ x1 ^ k0, lo1, hi0 ^ x3 ^ k1, lo0)",
                    "philox4x32/c2": "key bumped before every round but the first: k0 += 0x9E3779B9, k1 "
                                     "+= 0xBB67AE85"},
        sources=(_JAX + "philox4x32.py", _XLA_PRNG + " Philox4x32", "Random123 philox.h"),
    ),
    Semantics(
        "philox2x32",
        "Philox-2x32 with 10 rounds: (hi, lo) = 0xD256D193 * x0; x = (hi ^ x1 ^ k, lo); "
        "k += 0x9E3779B9 before every round but the first.",
        sources=(_JAX + "philox2x32.py", "Random123 philox.h"),
    ),
    Semantics(
        "iota_2x32_shape",
        "(hi, lo) uint32 words of the row-major index of every element of `shape` (a uint64 iota).",
        sources=(_JAX + "prng.py (iota_2x32_shape_lowering)",),
    ),
    Semantics(
        "random_seed",
        "Key data from integer seeds, per implementation (vmapped over the seed array).",
        edge_cases={"random_seed/c1": "threefry_seed: (shift_right_logical(seed, 32), seed & "
                                      "0xFFFFFFFF): hi is 0 for seeds narrower than 64 bits; lo is the "
                                      "seed modulo 2**32 (sign-extended)",
                    "random_seed/c2": "jax_enable_x64=False: Python int seeds are converted to int32 "
                                      "before tracing (2**32 + 5 -> 5); jax_random_seed_offset is added "
                                      "by an `add` equation before random_seed",
                    "random_seed/c3": "rbg/unsafe_rbg: (h, h) with h the threefry key; philox4x32: "
                                      "philox((0,0), (hi, lo, 0, 0))[:2]; threefry4x32: "
                                      "threefry4x32((hi, lo, 0, 0), 0); philox2x32: philox2x32(0, (hi, "
                                      "lo))[0]",
                    **shared(PALLAS_TPU_KEYS, "pallas_tpu_key/meaning", "pallas_tpu_key/seed-in-kernel")},
        sources=(_JAX + "prng.py", _JAX + "threefry2x32.py (threefry_seed)", _JAX + "rbg.py",
                 _JAX + "philox4x32.py", _JAX + "threefry4x32.py", _JAX + "philox2x32.py"),
    ),
    Semantics(
        "random_split",
        "New keys of shape keys.shape + shape.",
        edge_cases={"random_split/c1": "threefry2x32, jax_threefry_partitionable=True (read from "
                                       "jax.config when the rule runs, as JAX's lowering reads it): key "
                                       "i = threefry(k, (hi(i), lo(i)))",
                    "random_split/c2": "threefry2x32, partitionable=False: threefry_2x32(k, "
                                       "iota(2n)).reshape(*shape, 2) (legacy: pad to even, hash first "
                                       "half against second half)",
                    "random_split/c3": "rbg: threefry split of each half key; unsafe_rbg: "
                                       "rng_bit_generator(k, (10n, 4))[::10]",
                    "random_split/c4": "philox4x32: philox(k, (0, 0, hi(i), lo(i)))[:2]; threefry4x32: "
                                       "threefry4x32(k, (0, 0, hi(i), lo(i))); philox2x32: "
                                       "philox2x32(k, (hi(i), lo(i)))[0]",
                    "random_split/c5": "batched unsafe_rbg keys: the rng_bit_generator batching rule "
                                       "draws the whole batch from the first key",
                    **shared(PALLAS_TPU_KEYS, "pallas_tpu_key/no-split")},
        sources=(_JAX + "threefry2x32.py (_threefry_split_foldlike/_original)", _JAX + "rbg.py"),
    ),
    Semantics(
        "random_fold_in",
        "Key combined with uint32 data (broadcast over keys and messages).",
        edge_cases={"random_fold_in/c1": "threefry2x32 (both modes): threefry(k, (0, d)) == row d of "
                                         "the partitionable split",
                    "random_fold_in/c2": "rbg: threefry fold_in of each half; unsafe_rbg: k ^ "
                                         "rng_bit_generator(rbg_seed(d), (10, 4))[-1], batched messages "
                                         "drawing from the first message's seed",
                    "random_fold_in/c3": "philox4x32: philox(k, (0, 0, 0, d))[:2]; threefry4x32: "
                                         "threefry4x32(k, (0, 0, 0, d)); philox2x32: philox2x32(k, (0, "
                                         "d))[0]",
                    "random_fold_in/c4": "non-uint32 messages wrap modulo 2**32 (jnp.asarray(d, "
                                         "uint32))",
                    **shared(PALLAS_TPU_KEYS, "pallas_tpu_key/meaning", "pallas_tpu_key/scalar-key",
                             "pallas_tpu_key/in-kernel-only")},
        sources=(_JAX + "threefry2x32.py (_threefry_fold_in)", _JAX + "rbg.py"),
    ),
    Semantics(
        "random_bits",
        "uint{8,16,32,64} bits of shape keys.shape + shape.",
        edge_cases={"random_bits/c1": "threefry2x32 partitionable: (y0, y1) = threefry(k, (hi(i), "
                                      "lo(i))); 64: y0 << 32 | y1; 32: y0 ^ y1; 8/16: low bits of y0 ^ "
                                      "y1",
                    "random_bits/c2": "threefry2x32 legacy: w = threefry_2x32(k, iota(ceil(bw * n / "
                                      "32))); 64: w[i] << 32 | w[n + i]; 8/16: little-endian view of w, "
                                      "first n",
                    "random_bits/c3": "philox4x32: philox(k, (hi, lo, 0, 0)); 64: y0 << 32 | y1; else "
                                      "xor of all 4 words. threefry4x32: 64: (y0^y2) << 32 | (y1^y3). "
                                      "philox2x32: 64: y0 << 32 | y1, else y0^y1",
                    "random_bits/c4": "rbg/unsafe_rbg: rng_bit_generator(k, shape, uint{bw}, "
                                      "RNG_DEFAULT); batched keys: one draw of shape keys.shape + shape "
                                      "from the first key (batching rule)",
                    "random_bits/c5": "jax_enable_x64=False and bit_width 64: the result is uint32: the "
                                      "low word (hi << 32 vanishes in uint32), and 32-bit draws for "
                                      "rbg/unsafe_rbg",
                    "random_bits/c6": "threefry legacy with >= 2**32 - 1 words (16 GiB) is not "
                                      "implemented: raises",
                    **shared(PALLAS_TPU_KEYS, "pallas_tpu_key/meaning", "pallas_tpu_key/bit-width",
                             "pallas_tpu_key/scalar-key", "pallas_tpu_key/in-kernel-only")},
        sources=(_JAX + "threefry2x32.py (threefry_random_bits)", _JAX + "rbg.py"),
    ),
    Semantics("random_wrap", "uint32[..., *key_shape] -> key array (same data).",
              edge_cases=KEY_ARRAYS, sources=(_JAX + "prng.py",)),
    Semantics("random_unwrap", "key array -> its uint32 key data.", sources=(_JAX + "prng.py",)),
    Semantics("random_clone", "Identity on key arrays (exists for key-reuse checking).",
              sources=(_JAX + "core.py (random_clone_p)",)),
    Semantics(
        "random_gamma",
        "Marsaglia-Tsang gamma samples: evaluated as its lowering defines it (_gamma_impl with "
        "use_vmap=True traced by JAX, then run op by op in the reference).",
        sources=(_JAX + "core.py (_gamma_impl, _gamma_one)",),
        notes="exactness follows the lax ops it is made of (log, sqrt, pow): see SAMPLERS['gamma']",
    ),
    Semantics(
        "rng_bit_generator",
        "XLA RngBitGenerator: (new state, bits) for THREE_FRY, PHILOX and DEFAULT (= PHILOX on "
        "XLA:CPU and XLA:GPU), uint8/16/32/64 outputs.",
        edge_cases={"rng_bit_generator/c1": "JAX's uint32[4] key is the u64[2] state s[i] = w[2i] | "
                                            "w[2i+1] << 32; the new state is converted back",
                    "rng_bit_generator/c2": "THREE_FRY: key k0 = lo32(s0), k1 = hi32(s0), counter s1. "
                                            "64-bit: element i hashes (lo32(s1+i), hi32(s1+i)), result "
                                            "y0 | y1 << 32. 32/16/8-bit: SplitShapeIntoHalves (first "
                                            "even dim, else the first largest), counters over the half "
                                            "shape, y0 and y1 interleaved along that dim, cropped; a "
                                            "scalar is y0 of counter s1; new s1 = s1 + elements hashed",
                    "rng_bit_generator/c3": "PHILOX: key (lo32(s0), hi32(s0)); 128-bit counter (s1, s2) "
                                            "for u64[3] and (s1, s0) for u64[2]; block j hashes counter "
                                            "+ j (carry into the high word); 32-bit: element 4j + w is "
                                            "word w of block j; 64-bit: 2j = y0 | y1 << 32, 2j + 1 = y2 "
                                            "| y3 << 32; new counter + blocks (u64[2]: only the low "
                                            "word is stored)",
                    "rng_bit_generator/c4": "8/16-bit outputs are the low bits of 32-bit draws",
                    "rng_bit_generator/c5": "RNG_DEFAULT on TPU is backend-specific and not reproduced"},
        sources=(_XLA_PRNG, "xla/service/rng_bit_generator_expander.cc",
                 "jax/_src/lax/lax.py (_rng_bit_generator_lowering)",
                 "https://openxla.org/xla/operation_semantics#rngbitgenerator"),
    ),
    Semantics(
        "rng_uniform",
        "XLA's stateful Rng (UNIFORM): values uniform on [a, b). XLA:CPU draws from hidden "
        "global state (two runs of one program differ), so no bit pattern is defined; the "
        "reference emulates it deterministically: Threefry bits keyed by Options.seed and the "
        "number of earlier evaluations of the equation; floats (float16, bfloat16, float32, "
        "float64: the types XLA's RngExpander takes) are a + (b - a) * u with u on the 2**-23 "
        "grid (2**-52 for float64), computed wider and rounded toward a, so every representable "
        "value of [a, b) gets its share even in a range of a few ulps and b is never returned; "
        "integers are a + bits64 % (b - a).",
        edge_cases={"rng_uniform/c1": "b <= a raises (undefined)",
                    "rng_uniform/c2": "other float types (fp8...) raise: XLA:CPU has no Rng for them",
                    "rng_uniform/c3": "XLA:CPU rounds a + (b - a) * u to nearest and returns b (about "
                                      "one draw in eight in a range of four ulps; float16/bfloat16 "
                                      "reach 1.0 on [0, 1)): divergence xla-rng-uniform-reaches-b; "
                                      "uint8 aborts XLA:CPU's compiler (rng_expander.cc CHECK), so no "
                                      "case uses it"},
        sources=("jax/_src/lax/lax.py (rng_uniform)", "https://openxla.org/xla/operation_semantics#rng",
                 "xla/service/rng_expander.cc"),
        exactness=CONVENTION,
        notes="compliance: STATISTICAL (conformance/cases/random.py: 4096 draws quantized to "
              "integers with uniform bits: bit balance within 6 sigma, repeats within 10x the "
              "birthday expectation, byte chi-square p >= 1e-9; fixed inputs and seed) plus an "
              "EXACT count of draws outside [a, b)",
    ),
)


# --- samplers ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Sampler:
    """How exactly a jax.random sampler's reference result matches XLA:CPU, per float dtype.

    exactness: "exact" (bitwise: built from exactly defined ops), "fma" (bitwise except where
    XLA:CPU contracts a multiply-add into one FMA: explained, not hidden), "qr" (a factorisation
    whose backend error depends on the host: held to a perturbation bound, see orthogonal), or
    "ulp" (goes through
    transcendental functions whose XLA:CPU approximations differ from the correctly rounded
    reference). ulp: the measured worst case vs XLA:CPU per float dtype: jax.random.key(42), the
    shapes and parameters of tests/test_random.py SAMPLERS, float16/bfloat16/float32 without and
    float64 with jax_enable_x64, the larger of JAX 0.10.2 and 0.12.0.1 (XLA:CPU of each);
    by_version: the two measurements where they differ ({dtype: {jax version: ulp}}; the tests
    hold each version to its own). Integer-valued samplers (poisson, binomial, geometric,
    categorical) measure the largest difference of the integers. None: not measured yet.

    The large ones are XLA's approximations, not the reference's: gumbel -log(-log(u)) (XLA's
    float32 log near 1 loses relative accuracy), loggamma and chisquare (log-space gamma),
    truncated_normal (erf/erf_inv near the bounds). float64 on JAX 0.10.2's
    XLA:CPU is much less accurate than on 0.12.0.1 wherever log/log1p is involved (exponential
    125 ulp, laplace 118, logistic 250, weibull_min 86; 1 on 0.12.0.1). float16/bfloat16 are
    computed in float32 and rounded once by XLA:CPU, so they are mostly 0-1 ulp; dirichlet's
    normalisation is rounded per equation by the reference but kept in float32 across XLA:CPU's
    fusion (excess precision), hence 10 ulp in float16.
    """
    exactness: str
    ulp: dict = dataclasses.field(default_factory=dict)
    dtypes: tuple = ("float32",)
    notes: str = ""
    by_version: dict = dataclasses.field(default_factory=dict)

    def float_dtypes_tested(self, dtype: str) -> bool:
        return dtype in self.dtypes

    def budget(self, dtype: str, jax_version: str):
        """The worst case measured for ``dtype`` on this JAX version (else on either end)."""
        return self.by_version.get(dtype, {}).get(jax_version, self.ulp.get(dtype))


_ALL_FLOATS = ("float32", "float16", "bfloat16")
_FLOATS = ("float32", "float16", "bfloat16", "float64")
_LINALG_FLOATS = ("float32", "float64")  # JAX's cholesky / qr take no float16 or bfloat16
_V12, _V10 = "0.12.0.1", "0.10.2"


def _ulp(notes="", dtypes=_FLOATS, by_version=None, **ulp):
    """A transcendental sampler; ``by_version``: {dtype: (JAX 0.12.0.1, JAX 0.10.2)}."""
    versions = {d: {_V12: a, _V10: b} for d, (a, b) in (by_version or {}).items()}
    for d, v in versions.items():
        ulp[d] = max(v.values())
    assert set(ulp) == set(dtypes), (notes, ulp, dtypes)
    return Sampler("ulp", ulp, dtypes, notes, versions)


_EXACT_F16 = dict(float16=0, bfloat16=0)  # float16/bfloat16 measured 0 ulp on both versions

SAMPLERS = {
    "bits": Sampler("exact"),
    "uniform": Sampler("exact", dtypes=_ALL_FLOATS,
                       notes="mantissa bits | exponent of 1, bitcast, - 1; bf16/f16/fp8 from 8 or "
                             "16-bit draws"),
    "uniform_range": Sampler("fma", notes="u * (max - min) + min: XLA:CPU fuses into one FMA "
                                          "(allowance fma-contraction); the reference rounds twice "
                                          "as the program says"),
    "randint": Sampler("exact"),
    "bernoulli": Sampler("exact"),
    "choice": Sampler("exact"),
    "choice_p": Sampler("exact", notes="cumsum of p then searchsorted: exact while the cumsum "
                                       "order matches"),
    "permutation": Sampler("exact"),
    "shuffle": Sampler("exact"),
    "rademacher": Sampler("exact"),
    "categorical": _ulp("gumbel (log) then argmax: an index differs only where a gumbel value does",
                        float32=0, float64=0, **_EXACT_F16),
    "normal": _ulp("sqrt(2) * erf_inv(uniform(-1, 1)): XLA uses Giles' erf_inv polynomial",
                   float32=3, float16=1, bfloat16=0, by_version={"float64": (21, 25)}),
    "truncated_normal": _ulp("erf, erf_inv", float32=135, float64=187, **_EXACT_F16),
    "gumbel": _ulp("-log(-log(u))", float32=511, bfloat16=0, float64=1,
                   by_version={"float16": (0, 3)}),
    "exponential": _ulp("-log1p(-u)", float32=1, by_version={"float64": (1, 125)}, **_EXACT_F16),
    "laplace": _ulp("log1p", float32=1, by_version={"float64": (1, 118)}, **_EXACT_F16),
    "logistic": _ulp("log(u) - log1p(-u)", float32=8, bfloat16=0,
                     by_version={"float16": (0, 3), "float64": (1, 250)}),
    "gamma": _ulp("rejection loop: log, sqrt, pow; a differing acceptance changes a sample",
                  float32=6, by_version={"float64": (8, 10)}, **_EXACT_F16),
    "beta": _ulp("two gammas (log space)", float32=6, by_version={"float64": (6, 14)}, **_EXACT_F16),
    "dirichlet": _ulp("gammas (log space), exp, normalised by their sum", float32=11,
                      float16=10, bfloat16=2, by_version={"float64": (8, 12)}),
    "poisson": _ulp("Knuth / rejection (log, lgamma): integer counts", float32=0, float64=0,
                    **_EXACT_F16),
    "binomial": _ulp("BTRS rejection (log, lgamma)", float32=0, float64=0, **_EXACT_F16),
    "multivariate_normal": _ulp("cholesky/svd and normal", dtypes=_LINALG_FLOATS, float32=3,
                                by_version={"float64": (3, 12)}),
    "orthogonal": Sampler(
        "qr", dtypes=_LINALG_FLOATS,
        notes="Q of the QR of a normal matrix Z, signs fixed by diag(R). XLA's QR is a blocked "
              "Householder factorisation whose rounding depends on the host's vector width (43 "
              "ulp in float32 on an AVX2 host, 97 on an AVX-512 one, same JAX), so no measured "
              "figure is a constant. Held instead to the perturbation bound of a backward-stable "
              "QR: max |Q_backend - Q_exact| <= 8 n eps kappa_2(Z) (Higham, Accuracy and "
              "Stability of Numerical Algorithms, 2nd ed., Thm 19.4 for the backward error, "
              "and Sun, BIT 31 (1991) 341-352 for ||dQ||_F <= sqrt(2) kappa_2(A) ||dA||_F / "
              "||A||_2)"),
    "ball": _ulp("generalized normal and pow", float32=4, float16=1, bfloat16=1,
                 by_version={"float64": (4, 27)}),
    "maxwell": _ulp("norm of 3 normals", float32=5, float16=0, bfloat16=1, float64=51),
    "double_sided_maxwell": _ulp("maxwell", float32=12, float16=0, bfloat16=1,
                                 by_version={"float64": (4, 14)}),
    "weibull_min": _ulp("pow, log", float32=1, by_version={"float64": (1, 86)}, **_EXACT_F16),
    "pareto": _ulp("exp(exponential / b)", float32=2, float16=2, bfloat16=0,
                   by_version={"float64": (4, 25)}),
    "t": _ulp("normal / sqrt(gamma)", float32=6, by_version={"float64": (7, 14)}, **_EXACT_F16),
    "chisquare": _ulp("gamma", float32=28, float64=14, **_EXACT_F16),
    "f": _ulp("gamma ratio", float32=11, float16=1, bfloat16=0, by_version={"float64": (8, 16)}),
    "cauchy": _ulp("tan(pi * (u - 0.5))", float32=1, float64=1, **_EXACT_F16),
    "loggamma": _ulp("gamma in log space", float32=640, float64=256, **_EXACT_F16),
    "triangular": _ulp("sqrt", float32=0, float64=0, **_EXACT_F16),
    "geometric": _ulp("floor(log1p(-u) / log1p(-p)) + 1: integer counts", float32=0, float64=0,
                      **_EXACT_F16),
    "generalized_normal": _ulp("gamma and pow", float32=4, float64=5, **_EXACT_F16),
    "lognormal": _ulp("exp(sigma * normal)", float32=3, float64=27, **_EXACT_F16),
    "wald": _ulp("normal, sqrt", float32=16, float64=32, **_EXACT_F16),
}
