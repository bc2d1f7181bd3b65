"""The results schema: one JSON object per line, append-only, one file per worker.

Line types: ``{"type": "result", ...}`` (one per (case, runner), a :class:`Record`) and
``{"type": "environment", ...}`` (one per worker: versions, devices, host; :func:`environment_line`).
Every line carries ``schema`` (the version below); readers accept every version up to theirs.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import time
from typing import Iterable, Iterator

SCHEMA_VERSION = 1

# The outcomes of a result (docs/DESIGN.md), the one definition the suite and the reports use.
PASS, PASS_ALLOWANCE, FAIL = "pass", "pass-with-allowance", "fail"
CRASH, TIMEOUT = "crash", "timeout"
BACKEND_UNSUPPORTED, REFERENCE_UNSUPPORTED, KNOWN_DIVERGENCE = (
    "backend-unsupported", "reference-unsupported", "known-divergence")
OUTCOMES = (PASS, PASS_ALLOWANCE, FAIL, CRASH, TIMEOUT, BACKEND_UNSUPPORTED, REFERENCE_UNSUPPORTED,
            KNOWN_DIVERGENCE)
GOOD = (PASS, PASS_ALLOWANCE)
BAD = (FAIL, CRASH, TIMEOUT)
UNSUPPORTED = (BACKEND_UNSUPPORTED, REFERENCE_UNSUPPORTED)
# The four counts a nightly reader follows per column (the history's trend): outcome -> series.
SERIES = {PASS: "pass", PASS_ALLOWANCE: "allowance", KNOWN_DIVERGENCE: "known",
          FAIL: "fail", CRASH: "fail", TIMEOUT: "fail"}
# Numeric fields that can be infinite (an inf/NaN output against a finite reference): strict JSON has
# no Infinity/NaN, so they are written as the strings below and read back as floats.
NONFINITE_FIELDS = ("max_ulp", "max_abs_err")
NONFINITE_STRINGS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _when_set(default=None):
    """A field written only when it has a value (older records and other paths lack it)."""
    return dataclasses.field(default=default, metadata={"when_set": True})


@dataclasses.dataclass(slots=True, kw_only=True)
class Record:
    """One result: one (case, runner, seed) on one machine.

    The fields are fixed: building or assigning a field that is not declared here raises (add it
    here, with its meaning, before any writer sets it). The first group is the contract of issue 5,
    written in every record (None where not applicable); the second is written when set. Nested
    values (``known_divergence``, ``first_mismatch``, ...) are plain JSON objects.
    """
    # -- always written ------------------------------------------------------------------------
    case: str
    family: str | None = None             # the case id's first part
    runner: str
    outcome: str | None = None            # one of OUTCOMES once judged
    allowance: str | None = None          # the allowance (or '+'-joined combination) that explains it
    known_divergence: dict | None = None  # {"id", "link", "summary"} of the matching spec/divergences.py entry
    max_ulp: float | None = None          # over the outputs; inf: NaN against a number
    max_abs_err: float | None = None
    mismatches: int | None = 0            # elements that do not comply
    first_mismatch: dict | None = None    # {"output", "index", "reference", "backend"}
    first_divergent_eqn: dict | None = None   # {"index", "primitive", "eqn", "mode", "max_ulp", "first_mismatch"}, or {"index": None, "note"}, or {"error"}
    duration_s: float | None = None       # the backend run (the reference's, for the reference runner)
    reproducer: str | None = None         # the command that re-runs exactly this (case, runner, seed)
    seed: int | None = None               # the inputs are case.make_inputs(seed)
    detail: str | None = None             # what happened, in words
    output: str | None = None             # the tail of a crash's traceback or of a dead worker's output
    modes: list | None = None             # the compliance mode of each output, described
    reference_duration_s: float | None = None
    jax_version: str | None = None
    run_id: str | None = None
    worker: str | None = None             # the pytest-xdist worker that wrote it
    timestamp: float | None = dataclasses.field(default_factory=time.time)
    # -- written when set (in this order) -----------------------------------------------------
    device: dict | None = _when_set()     # {"platform", "id", "kind", ...} the backend ran on
    platform: str | None = _when_set()    # the platform lax.platform_dependent followed
    rechecked: bool | None = _when_set()  # judged from saved outputs (`jax-conformance recheck`)
    reference_cpu_s: float | None = _when_set()
    failure: dict | None = _when_set()    # what the backend raised: {"stage", "type", "raised_in", "message", "refused_by"}
    crashed: str | None = _when_set()     # "backend" or "reference": which side of a crash
    raw_outcome: str | None = _when_set()     # the backend's own outcome (a crash or timeout) a known divergence explains
    total_s: float | None = _when_set()   # the whole (case, runner, seed) in its worker
    cpu_s: float | None = _when_set()     # CPU seconds of the backend run and the comparison
    base_seed: int | None = _when_set()   # the seed search (conformance/search.py): where it started,
    examples: int | None = _when_set()    # how many seeds it ran,
    seeds_tried: list | None = _when_set()    # which (at most MAX_SEEDS_LISTED),
    search_s: float | None = _when_set()  # how long it took,
    first_failing_seed: int | None = _when_set()  # and the failing seed it found before shrinking
    profile: str | None = _when_set()     # the case profile of the run
    machine: str | None = _when_set()     # set by reports.merge: the machine of the record's environment
    column: str | None = _when_set()      # set by reports.merge: runner@device jaxVERSION

    def to_json(self) -> dict:
        """The record as one line of a results file holds it (``dumps`` makes the text)."""
        out = {"schema": SCHEMA_VERSION, "type": "result"}
        for f in _FIELDS:
            value = getattr(self, f.name)
            if value is not None or not f.metadata.get("when_set"):
                out[f.name] = value
        return out

    @classmethod
    def from_json(cls, line: dict) -> Record:
        """The record of a results line of any schema version up to this reader's: fields a line
        lacks are None; a field this reader does not know, a missing case/runner/outcome or an
        unknown outcome raise ValueError."""
        _check_version(line)
        unknown = sorted(set(line) - _NAMES - {"schema", "type"})
        if unknown:
            raise ValueError(f"result record with fields this reader does not know {unknown}: {line}")
        missing = [k for k in ("case", "runner", "outcome") if line.get(k) is None]
        if missing:
            raise ValueError(f"result record without {missing}: {line}")
        if line["outcome"] not in OUTCOMES:
            raise ValueError(f"unknown outcome {line['outcome']!r}")
        values = {name: line.get(name) for name in _NAMES}
        for k in NONFINITE_FIELDS:
            if isinstance(values[k], str) and values[k] in NONFINITE_STRINGS:
                values[k] = NONFINITE_STRINGS[values[k]]
        return cls(**values)


_FIELDS = dataclasses.fields(Record)
_NAMES = frozenset(f.name for f in _FIELDS)
# Fields of a result record (the contract of issue 5): all present, None when not applicable.
RESULT_FIELDS = tuple(f.name for f in _FIELDS if not f.metadata.get("when_set"))


def environment_line(*, worker: str, profile: str | None, run_id: str | None, environment: dict) -> dict:
    """The line a worker writes first: what its records ran on (hardware_runners/environment.py)."""
    return {"schema": SCHEMA_VERSION, "type": "environment", "worker": worker, "profile": profile,
            "run_id": run_id, "environment": environment}


def _check_version(line: dict) -> None:
    if line.get("schema", 0) > SCHEMA_VERSION:
        raise ValueError(f"results schema {line.get('schema')} is newer than this reader ({SCHEMA_VERSION})")


def validate(line: dict) -> Record | dict:
    """A line read from a results file: a :class:`Record` for a result, the line itself otherwise
    (an environment)."""
    if line.get("type") == "result":
        return Record.from_json(line)
    _check_version(line)
    return line


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
    if isinstance(x, Record):
        return strict_json(x.to_json())
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

    def write(self, line: Record | dict) -> None:
        """A :class:`Record`, or an :func:`environment_line`."""
        self._f.write(dumps(line) + "\n")
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


def read_jsonl(path: str) -> Iterator[Record | dict]:
    """The lines of a results file (``.jsonl`` or ``.jsonl.gz``), or the environments and results of
    a report's ``results.json`` (``.json`` / ``.json.gz``: a merged report can be merged again):
    a :class:`Record` per result, a dict per environment."""
    if path.endswith((".json", ".json.gz")):
        with _open_text(path) as f:
            doc = json.load(f)
        for line in doc.get("environments", []) + doc.get("results", []):
            yield validate(line)
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
