"""The one module through which the fuzzer uses the suite's machinery (cases, runners, the judge,
the results schema): when those move, only this file changes.

The fuzzer keeps its records as plain dicts (they carry fields of its own: the bucket, the
operations explained one by one, arrays on their way to the campaign); :func:`compare` runs the
suite's judgement on a typed ``reports.schema.Record`` and copies what it set back, and
:func:`results_record` makes a schema record for the reports.
"""
from __future__ import annotations

import dataclasses
import time

from conformance.case import LAX, PALLAS, Case, jaxpr_primitives, max_abs, random_array  # noqa: F401
from conformance.classify import classify_failure, short_traceback  # noqa: F401
from conformance.judge import compare as _compare
from reports.schema import (BACKEND_UNSUPPORTED, BAD, CRASH, FAIL, GOOD, KNOWN_DIVERGENCE, PASS,  # noqa: F401
                            PASS_ALLOWANCE, REFERENCE_UNSUPPORTED, TIMEOUT, JsonlWriter, Record, dumps,
                            environment_line)

_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(Record))


def new_record(**fields) -> dict:
    """A fuzzer record: a dict with the schema's contract fields (None until set)."""
    rec = {"case": None, "runner": None, "outcome": None, "allowance": None, "known_divergence": None,
           "max_ulp": None, "max_abs_err": None, "mismatches": 0, "first_mismatch": None,
           "first_divergent_eqn": None, "detail": None, "modes": None, "seed": None, "timestamp": time.time()}
    rec.update(fields)
    return rec


def compare(case: Case, runner: str, inputs, ref, outs, rec: dict, *, first_divergence: bool = False) -> None:
    """conformance.judge.compare on ``rec`` (a dict): outcome, modes, measurements, allowance,
    known divergence."""
    typed = Record(case=rec.get("case") or case.id, runner=runner)
    _compare(case, runner, inputs, ref, outs, typed, first_divergence=first_divergence)
    for f in dataclasses.fields(Record):
        value = getattr(typed, f.name)
        if value is not None and f.name not in ("case", "runner", "timestamp"):
            rec[f.name] = value


def run(runner, case: Case, inputs) -> list:
    """The runner's outputs for a case's program (runners are given programs, not cases)."""
    return runner.run(case.as_program(), inputs)


def results_record(**fields) -> dict:
    """A results-schema line (reports/schema.py Record) from the fields it declares."""
    return Record(**{k: v for k, v in fields.items() if k in _RECORD_FIELDS}).to_json()
