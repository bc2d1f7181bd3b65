"""The results schema: one JSON object per line, append-only, one file per worker.

Line types: ``{"type": "result", ...}`` (one per (case, runner)) and
``{"type": "environment", ...}`` (one per worker: versions, devices, host). Every line carries
``schema`` (the version below); readers accept every version up to theirs.
"""
from __future__ import annotations

import json
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
    return rec


class JsonlWriter:
    """Append-only JSONL; each line is flushed so a crash loses nothing already written."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._f = open(path, "a", encoding="utf-8")

    def write(self, rec: dict) -> None:
        self._f.write(json.dumps(rec, default=_json_default, allow_nan=True) + "\n")
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


def read_jsonl(path: str) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield validate(json.loads(line))
            except json.JSONDecodeError:
                # A worker killed mid-line leaves a truncated last line: skip it, keep the rest.
                continue


def expand_paths(paths: Iterable[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in os.walk(p):
                out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".jsonl")]
        else:
            out.append(p)
    return sorted(dict.fromkeys(out))
