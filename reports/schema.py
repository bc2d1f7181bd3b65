"""The results schema: one JSON object per line, append-only, one file per worker.

Line types: ``{"type": "result", ...}`` (one per (case, runner)) and
``{"type": "environment", ...}`` (one per worker: versions, devices, host). Every line carries
``schema`` (the version below); readers accept every version up to theirs.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import time
from typing import Iterable, Iterator

SCHEMA_VERSION = 1

# Fields of a result record (the contract of issue 5); all present, None when not applicable.
RESULT_FIELDS = (
    "case", "family", "runner", "outcome", "allowance", "known_divergence", "max_ulp", "max_abs_err",
    "mismatches", "first_mismatch", "first_divergent_eqn", "duration_s", "reproducer", "seed",
    "detail", "output", "modes", "reference_duration_s", "jax_version", "run_id", "worker", "timestamp",
)
OUTCOMES = ("pass", "pass-with-allowance", "fail", "crash", "timeout", "backend-unsupported",
            "reference-unsupported", "known-divergence")
BAD = ("fail", "crash", "timeout")
# The four counts a nightly reader follows per column (the history's trend): outcome -> series.
SERIES = {"pass": "pass", "pass-with-allowance": "allowance", "known-divergence": "known",
          "fail": "fail", "crash": "fail", "timeout": "fail"}
# Numeric fields that can be infinite (an inf/NaN output against a finite reference): strict JSON has
# no Infinity/NaN, so they are written as the strings below and read back as floats.
NONFINITE_FIELDS = ("max_ulp", "max_abs_err")
NONFINITE_STRINGS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def new_record(**fields) -> dict:
    rec = {"schema": SCHEMA_VERSION, "type": "result"}
    rec.update({k: None for k in RESULT_FIELDS})
    rec["mismatches"] = 0
    rec["timestamp"] = time.time()
    rec.update(fields)
    return rec


def validate(rec: dict) -> dict:
    if rec.get("schema", 0) > SCHEMA_VERSION:
        raise ValueError(f"results schema {rec.get('schema')} is newer than this reader ({SCHEMA_VERSION})")
    if rec.get("type") == "result":
        missing = [k for k in ("case", "runner", "outcome") if rec.get(k) is None]
        if missing:
            raise ValueError(f"result record without {missing}: {rec}")
        if rec["outcome"] not in OUTCOMES:
            raise ValueError(f"unknown outcome {rec['outcome']!r}")
        for k in RESULT_FIELDS:
            rec.setdefault(k, None)
        for k in NONFINITE_FIELDS:
            if isinstance(rec[k], str) and rec[k] in NONFINITE_STRINGS:
                rec[k] = NONFINITE_STRINGS[rec[k]]
    return rec


def strict_json(x):
    """``x`` with every non-finite float replaced by "inf", "-inf" or "nan" (strict JSON, which
    jq, browsers and other languages' parsers read; ``validate`` turns them back into floats)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {str(k): strict_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [strict_json(v) for v in x]
    if x is None or isinstance(x, (str, int, float)):
        return x
    return strict_json(_json_default(x))   # NumPy scalars and arrays as Python values, anything else as str


def dumps(x, **kw) -> str:
    """Strict JSON text of ``x``."""
    return json.dumps(strict_json(x), allow_nan=False, **kw)


class JsonlWriter:
    """Append-only JSONL; each line is flushed so a crash loses nothing already written."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._f = open(path, "a", encoding="utf-8")

    def write(self, rec: dict) -> None:
        self._f.write(dumps(rec) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def _json_default(x):
    import numpy as np
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def _open_text(path: str):
    return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def read_jsonl(path: str) -> Iterator[dict]:
    """The lines of a results file (``.jsonl`` or ``.jsonl.gz``), or the environments and results of
    a report's ``results.json`` (``.json`` / ``.json.gz``: a merged report can be merged again)."""
    if path.endswith((".json", ".json.gz")):
        with _open_text(path) as f:
            doc = json.load(f)
        for rec in doc.get("environments", []) + doc.get("results", []):
            yield validate(rec)
        return
    with _open_text(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield validate(json.loads(line))
            except json.JSONDecodeError:
                # A worker killed mid-line leaves a truncated last line: skip it, keep the rest.
                continue


RESULT_SUFFIXES = (".jsonl", ".jsonl.gz")


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files as given; directories searched (recursively) for ``*.jsonl`` and ``*.jsonl.gz``."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                out += [os.path.join(root, f) for f in sorted(files) if f.endswith(RESULT_SUFFIXES)]
        elif not os.path.exists(p):
            raise FileNotFoundError(f"no results file or directory {p!r}")
        else:
            out.append(p)
    return sorted(dict.fromkeys(out))
