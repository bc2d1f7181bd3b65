"""Saved backend outputs (``jax-conformance run --save-outputs``, read by ``jax-conformance recheck``).

Format (docs/conformance.md, "Saved outputs and recheck"): NumPy ``.npz`` files named
``outputs-<RUNNER>[.<PART>].npz``, RUNNER the runner's name with its first ``:`` written ``_``
(``outputs-xla_cuda.npz``, ``outputs-pallas_triton.gw0-1234.npz``). One array per backend output,
under the key ``CASE_ID::SEED::I::DTYPE``: output ``I`` of the case run with inputs
``case.make_inputs(SEED)``, of dtype ``DTYPE`` (NumPy's name for it: ``float32``, ``bfloat16``,
``float8_e4m3fn``, ``int4``...). Dtypes NumPy's format cannot hold (the ml_dtypes types) are
stored as their bits, an unsigned integer array of the same item size; the key's DTYPE says how
to read them back. This is the format of the H100 evidence of 2026-11-27 (``outputs-xla_cuda.npz``),
so those files are rechecked as they are.

A case whose program changed since its outputs were saved has a higher ``Case.revision``; a file
records the revision of each case saved at a revision other than 0 under the key
``#revision::CASE_ID`` (a scalar integer; absent: revision 0, as in every file written before
revisions existed). ``recheck`` does not judge outputs of another revision than the checkout's:
they were computed by another program.
"""
from __future__ import annotations

import collections
import os
from typing import Iterable, Iterator

import numpy as np

SEP = "::"
REVISION = "#revision" + SEP     # key prefix of a case's revision (not an output)
_NATIVE = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
           "float32", "float64", "complex64", "complex128"}


def key(case_id: str, seed: int, index: int, dtype) -> str:
    return SEP.join((case_id, str(seed), str(index), np.dtype(dtype).name))


def parse_key(k: str) -> tuple[str, int, int, str]:
    case_id, seed, index, dtype = k.rsplit(SEP, 3)
    return case_id, int(seed), int(index), dtype


def encode(a) -> np.ndarray:
    """What is stored for output ``a``: itself, or its bits where npz cannot hold its dtype."""
    a = np.asarray(a)
    return a if a.dtype.name in _NATIVE else a.view(f"u{a.dtype.itemsize}")


def dtype_named(name: str) -> np.dtype:
    """The dtype a key names: NumPy's own, else the ml_dtypes type of that name."""
    if name in _NATIVE:
        return np.dtype(name)
    import ml_dtypes
    t = getattr(ml_dtypes, name, None)
    if t is None:
        raise ValueError(f"saved output of unknown dtype {name!r} (not NumPy's, not ml_dtypes')")
    return np.dtype(t)


def decode(stored: np.ndarray, dtype_name: str) -> np.ndarray:
    dt = dtype_named(dtype_name)
    return stored if stored.dtype == dt else stored.view(dt)


def file_name(runner: str, part: str | None = None) -> str:
    return f"outputs-{runner.replace(':', '_', 1)}" + (f".{part}" if part else "") + ".npz"


def runner_of(path: str) -> str:
    """The runner name a file name gives (``outputs-xla_cuda.gw0-12.npz`` -> ``xla:cuda``)."""
    stem = os.path.basename(path)[len("outputs-"):].split(".", 1)[0]
    return stem.replace("_", ":", 1)


class Writer:
    """Collects one process's backend outputs and writes one file per runner (at ``close``)."""

    def __init__(self, directory: str, part: str):
        self.directory, self.part = directory, part
        self.arrays: dict[str, dict[str, np.ndarray]] = collections.defaultdict(dict)

    def add(self, case_id: str, runner: str, seed: int, outputs: Iterable, revision: int = 0) -> None:
        if revision:
            self.arrays[runner][REVISION + case_id] = np.array(revision, np.int64)
        for i, o in enumerate(outputs):
            o = np.asarray(o)
            self.arrays[runner][key(case_id, seed, i, o.dtype)] = encode(o)

    def close(self) -> list[str]:
        os.makedirs(self.directory, exist_ok=True)
        paths = []
        for runner, arrays in self.arrays.items():
            path = os.path.join(self.directory, file_name(runner, self.part))
            np.savez_compressed(path, **arrays)
            paths.append(path)
        self.arrays.clear()
        return paths


def find(paths: Iterable[str]) -> list[str]:
    """The ``outputs-*.npz`` files among ``paths`` (directories searched recursively)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                out += [os.path.join(root, f) for f in files if f.startswith("outputs-") and f.endswith(".npz")]
        else:
            out.append(p)
    return sorted(out)


def read(path: str) -> Iterator[tuple[str, int, list[np.ndarray]]]:
    """(case id, seed, outputs in order) for every (case, seed) a file holds."""
    groups: dict = collections.defaultdict(dict)
    with np.load(path) as data:
        for k in data.files:
            if k.startswith(REVISION):
                continue
            case_id, seed, index, dtype = parse_key(k)
            groups[(case_id, seed)][index] = decode(data[k], dtype)
    for (case_id, seed), outs in sorted(groups.items()):
        if sorted(outs) != list(range(len(outs))):
            raise ValueError(f"{path}: {case_id} seed {seed} has outputs {sorted(outs)}, not 0..{len(outs) - 1}")
        yield case_id, seed, [outs[i] for i in range(len(outs))]


def revisions(path: str) -> dict[str, int]:
    """The revision each case of a file was saved at, for the cases saved at a revision other than 0."""
    with np.load(path) as data:
        return {k[len(REVISION):]: int(data[k]) for k in data.files if k.startswith(REVISION)}
