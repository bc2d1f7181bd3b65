"""Semantics of the lax.linalg primitives (interp/rules/lax_linalg.py).

All decompositions are computed in float64/complex128 with the LAPACK routine XLA:CPU calls
(through SciPy) and rounded once to the output dtype: the results are defined by accuracy
(residuals of a few ulps of the output type; the class CONVENTION below means "accuracy-defined,
under the stated conventions", never bitwise), plus the conventions below where a decomposition
is not unique. Leading dimensions are batch dimensions. Pivots, permutations and structural zeros
are exact.
"""
from __future__ import annotations

from .base import CONVENTION, EXACT, Semantics, table

LA = "jax/_src/lax/linalg.py"
PHASE = ("each eigen/singular vector is scaled by a unit scalar so that its first entry of largest "
         "magnitude is real and positive (exactly real)")
FAIL_NAN = "a LAPACK failure (info != 0) gives all-NaN results (complex NaN is nan+nanj), as XLA:CPU"

SEMANTICS = table(
    Semantics("cholesky", "Lower Cholesky factor (potrf 'L'); the upper triangle of the input is not read.",
              {"cholesky/c1": "the result's strictly upper triangle is exactly zero",
               "cholesky/c2": "not positive definite (or non-finite lower triangle): " + FAIL_NAN},
              (LA + " _cholesky_cpu_lowering",), CONVENTION,
              "Residual-defined: L L^H = A within a few ulps; not bitwise with XLA:CPU's float32 potrf."),
    Semantics("cholesky_update", "Upper R' with R'^T R' = R^T R + w w^T: JAX's Givens rotations in float64.",
              {"cholesky_update/c1": "strictly lower triangle exactly zero; diagonal positive"},
              (LA + " _cholesky_update_jax_fn",), CONVENTION),
    Semantics("symmetric_product", "alpha * A A^T + beta * C, the whole matrix (JAX documents only the "
              "lower triangle as guaranteed on every platform).", {},
              (LA + " _symmetric_product_jax_fn",), CONVENTION),
    Semantics("geqrf", "Householder QR in LAPACK's packed form (R upper, reflectors below, taus).",
              {"geqrf/c1": "LAPACK dgeqrf/zgeqrf convention: H(i) = I - tau v v^H, v(i) = 1; R's "
                           "diagonal signs are LAPACK's (not made positive)"},
              (LA + " geqrf",), CONVENTION),
    Semantics("geqp3", "Column-pivoted QR (LAPACK geqp3); jpvt 1-based in and out, as LAPACK.",
              {"geqp3/c1": "columns with jpvt != 0 on input (any sign) are fixed: moved to the front in "
                           "their original order and factored without pivoting (geqrf); Q^H is applied "
                           "to the free columns, which are pivoted by LAPACK geqp3 on the trailing rows "
                           "(dgeqp3's own structure); with no rows left below the fixed block the free "
                           "columns keep their order (bitwise jpvt agreement with XLA:CPU's LAPACK, "
                           "tests/test_lax_linalg.py test_geqp3_fixed_columns)",
               "geqp3/c2": "computed in float64 / complex128 and rounded once: factors agree with a "
                           "float32 LAPACK within its rounding, not bitwise (pivot choices on "
                           "near-equal norms could differ)"},
              (LA + " geqp3, _qr_lowering (subtracts 1)",), CONVENTION),
    Semantics("householder_product", "Q = H(1)...H(k) from reflectors and taus, first n columns (orgqr).", {},
              (LA + " householder_product",), CONVENTION),
    Semantics("ormqr", "Q C, Q^H C, C Q or C Q^H without forming Q in the caller (transpose is the "
              "conjugate transpose for complex).", {}, (LA + " ormqr",), CONVENTION),
    Semantics("qr", "JAX's composition: geqrf (or geqp3 with pivoting) then householder_product.",
              {"qr/c1": "R is upper triangular with exact zeros; R's diagonal signs follow LAPACK (same "
                        "as XLA:CPU); pivots are 0-based and exact",
               "qr/c2": "m == 0 or n == 0: Q the identity columns, R zeros, as JAX"},
              (LA + " _qr_lowering",), CONVENTION),
    Semantics("lu", "Partial-pivoting LU (getrf): packed L\\U, 0-based pivots, the permutation.",
              {"lu/c1": "pivots and permutation are exact (LAPACK's first maximal |a| in float64)",
               "lu/c2": "singular matrices are no failure (info > 0 is kept, as XLA:CPU)"},
              (LA + " _lu_cpu_gpu_lowering",), CONVENTION),
    Semantics("lu_pivots_to_permutation", "Applies swaps i <-> pivots[i] in order to the identity.",
              {"lu_pivots_to_permutation/c1": "negative pivots in [-size, 0) wrap (jnp indexing); "
                                              "others outside [0, size) raise UndefinedBehaviorError "
                                              "(JAX's gather clamps and its scatter drops them)"},
              (LA + " _generic_lu_pivots_to_permutation",), EXACT),
    Semantics("triangular_solve", "Solves op(A) X = B or X op(A) = B reading one triangle of A.",
              {"triangular_solve/c1": "op(A) is A, A^T, conj(A) or A^H by transpose_a/conjugate_a; "
                                      "unit_diagonal ignores the diagonal of A",
               "triangular_solve/c2": "substitution in the wide type with IEEE division: a zero pivot "
                                      "gives inf/NaN as trsm"},
              (LA + " triangular_solve",), CONVENTION),
    Semantics("tridiagonal_solve", "gtsv (partial pivoting); dl[0] and du[-1] are not read.",
              {"tridiagonal_solve/c1": "singular system: " + FAIL_NAN,
               "tridiagonal_solve/c2": "perturb_singular=True: jaxlib's own kernel "
                                       "(SolveWithGaussianEliminationWithPivotingAndPerturbSingular, "
                                       "after LAPACK xLAGTF/xLAGTS): row-pivoted LU fused with the "
                                       "forward solve; in the back substitution a pivot p with |p| < 1 "
                                       "for which row / p could overflow is moved by eps * max|U| (sign "
                                       "of Re p, doubled until safe; at least safemin) or scaled with "
                                       "its row by 1 / safemin. A singular system's result is made of "
                                       "rounding residues, so the procedure is run in the operand's own "
                                       "precision, each operation rounded once as the C++ source writes "
                                       "it (no FMA contraction), complex * and / as libgcc's "
                                       "__mulsc3/__divsc3 (C99 Annex G; Smith's division): bitwise with "
                                       "XLA:CPU of JAX 0.10.2, inf/NaN included",
               "tridiagonal_solve/c3": "perturb_singular=True quirks kept: row n-2 of U does not enter "
                                       "max|U|; a NaN right-hand side meeting a pivot |p| < 1 raises "
                                       "UnsupportedPrimitiveError where jaxlib's vectorised max (NaN or "
                                       "the largest other magnitude, by position) would change the "
                                       "result; float16 / bfloat16 raise (no kernel; JAX 0.12 rejects "
                                       "them when tracing)"},
              (LA + " _tridiagonal_solve_cpu_lowering",
               "jaxlib/tridiagonal_solve_perturbed.h, jaxlib/cpu/tridiagonal_solve_kernels.cc"),
              CONVENTION),
    Semantics("eigh", "Hermitian eigendecomposition (syevd/heevd on the `lower` triangle): (V, w).",
              {"eigh/c1": "eigenvalues ascending (also for sort_eigenvalues=False: the order is then "
                          "implementation-defined and this is the order chosen)",
               "eigh/c2": PHASE,
               "eigh/c3": "within a repeated eigenvalue the basis is LAPACK's",
               "eigh/c4": "subset_by_index (lo, hi): columns/values lo..hi-1 of the full result "
                          "(XLA:CPU does not support it)",
               "eigh/c5": "non-finite input: " + FAIL_NAN},
              (LA + " _eigh_cpu_gpu_lowering",), CONVENTION),
    Semantics("eig", "General eigendecomposition (geev): w, then left and right eigenvectors as asked.",
              {"eig/c1": "eigenvalues in LAPACK's order (complex pairs with the positive imaginary part "
                         "first)",
               "eig/c2": "eigenvectors have unit 2-norm; " + PHASE,
               "eig/c3": "left eigenvectors: vl^H A = w vl^H",
               "eig/c4": "implementation (EigImplementation LAPACK, MAGMA, CUSOLVER or None) selects an "
                         "algorithm, not a result: the reference gives the same bits for all of them, "
                         "under the conventions above. MAGMA (LAPACK's geev with a GPU Hessenberg step) "
                         "and cuSOLVER Xgeev (packed real pairs, unpacked by JAX) agree with them only up "
                         "to rounding: their eigenvalue order may differ where rounding reorders the QR "
                         "iteration's deflation, and their vector phases are LAPACK's (largest component "
                         "real) where the reference's are " + PHASE + "; compare them through order- and "
                         "phase-free quantities",
               "eig/c5": "CUSOLVER with compute_left_eigenvectors=True raises UnsupportedPrimitiveError "
                         "(a NotImplementedError), as JAX's GPU lowering; XLA:CPU refuses "
                         "MAGMA/CUSOLVER with ValueError (a platform limit, not a semantic one)",
               "eig/c6": "non-finite input: " + FAIL_NAN},
              (LA + " _eig_cpu_lowering",), CONVENTION),
    Semantics("svd", "Singular value decomposition (gesdd): s descending, U, V^H.",
              {"svd/c1": "each pair (u_i, v_i) is scaled so that u_i satisfies: " + PHASE,
               "svd/c2": "with full_matrices=True the extra columns of U / rows of V^H (a basis of the "
                         "orthogonal complement) are LAPACK's",
               "svd/c3": "s is bit-identical whatever compute_uv/full_matrices are (one LAPACK call)",
               "svd/c4": "subset_by_index selects indices of the descending order; empty matrices as JAX "
                         "_empty_svd; non-finite input: " + FAIL_NAN},
              (LA + " _svd_cpu_gpu_lowering, _empty_svd",), CONVENTION),
    Semantics("schur", "Schur decomposition (gees): T and Z with A = Z T Z^H.",
              {"schur/c1": "real input: real Schur form with LAPACK's standardized 2x2 blocks; complex "
                           "input: upper triangular T",
               "schur/c2": "sort_eig_vals=True raises (UnsupportedPrimitiveError, a "
                           "NotImplementedError), as JAX's only lowering does; select_callable is "
                           "ignored without sorting, as JAX's lowering ignores it",
               "schur/c3": "non-finite input: " + FAIL_NAN},
              (LA + " _schur_cpu_lowering",), CONVENTION),
    Semantics("hessenberg", "Hessenberg reduction (gehrd) in LAPACK's packed form and n-1 taus.", {},
              (LA + " _hessenberg_cpu_lowering",), CONVENTION),
    Semantics("tridiagonal", "Tridiagonal reduction (sytrd/hetrd on the `lower` triangle): packed a, "
              "d and e (real), taus.", {}, (LA + " _tridiagonal_cpu_gpu_lowering",), CONVENTION),
)

# What XLA:CPU computes differently from the reference, by design of the backend (not bugs).
BACKEND_PROPERTIES = (
    ("xla:cpu", "perturbed-tridiagonal-fma",
     "jaxlib 0.12's build of the perturb_singular kernel contracts its two scalar multiply-subtracts "
     "(u -= factor * u', utmp - factor * d) into FMAs (vfnmadd in jaxlib/cpu/_lapack.so; 0.10.2's build "
     "has none): the fma-contraction allowance. On nonsingular systems a few ulps; on singular ones the "
     "rounding residue that becomes the pivot changes, so the (huge) solution differs in magnitude, "
     "not in direction. Replayed bitwise with the two operations fused.",
     "tests/test_lax_linalg.py test_tridiagonal_solve_perturbed_vs_xla"),
    ("xla:cpu", "hessenberg-forward-error",
     "float32 gehrd is backward stable (~ n eps ||A||), but H's forward error is that times the "
     "reduction's condition number, which grows as a subdiagonal |h[k+1, k]| gets small: the nightly "
     "search's seed 287 (min subdiagonal 0.014, kappa 2441) is 325 eps*max|A| from the reference, which "
     "is within 0.5 eps of a 200-bit reduction. Not a bug: the conformance case bounds the error by "
     "eps * max|A| * kappa (conformance/cases/lax_linalg.py MODE_HESSENBERG).",
     "tests/test_lax_linalg.py test_hessenberg_nightly_seed_287"),
    ("xla:cpu", "flush-to-zero",
     "the perturb_singular kernel runs under XLA:CPU's FTZ/DAZ: subnormal results are flushed (the "
     "flush-to-zero allowance)", "spec/allowances.py flush-to-zero"),
)
