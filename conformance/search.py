"""Seed search: one (case, runner) over several seeds, driven by hypothesis.

The base seed runs first (the quick profile runs only it); if it passes, hypothesis draws further
seeds and shrinks a failure to the smallest failing seed it finds. Every seed's inputs are
``case.make_inputs(seed)``, so the record's ``seed`` and ``reproducer`` re-create exactly the inputs
its values come from. Each seed is run by an executor (conformance/isolation.py: ``Executor``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Protocol

from reports.schema import (BACKEND_UNSUPPORTED, BAD, FAIL, GOOD, KNOWN_DIVERGENCE, PASS, PASS_ALLOWANCE,
                            REFERENCE_UNSUPPORTED, Record)

SEED_SPACE = 2 ** 32          # hypothesis draws seeds from (base seed, base seed + SEED_SPACE)
MAX_SEEDS_LISTED = 64         # seeds_tried in a record lists at most this many

# The record that stands for a search without a failure: the most informative one seen
# (a known divergence or an unsupported input says more than a pass), the earliest on ties.
_RANK = {KNOWN_DIVERGENCE: 0, REFERENCE_UNSUPPORTED: 1, BACKEND_UNSUPPORTED: 2, PASS_ALLOWANCE: 3, PASS: 4}


class Executor(Protocol):
    """What runs one seed: ``run(case_id, runner, seed)`` -> its record."""

    def run(self, case_id: str, runner: str, seed: int) -> Record: ...


class _Bad(Exception):
    """A fail/crash/timeout, raised inside the hypothesis property so that hypothesis shrinks it."""

    def __init__(self, rec: Record):
        super().__init__(f"{rec.outcome} at seed {rec.seed}")
        self.rec = rec


def search_seed(case_id: str, base_seed: int) -> int:
    """The hypothesis random seed of a search: depends only on (case id, base seed), so every run,
    every xdist worker and every runner of the case draws the same seeds (the runners then share
    the reference results) -- never on PYTHONHASHSEED, the test function or the worker."""
    h = hashlib.sha256(f"search\0{case_id}\0{base_seed}".encode()).digest()
    return int.from_bytes(h[:8], "little")


def search(executor: Executor, case_id: str, runner: str, base_seed: int = 0, examples: int = 1,
           shrinks: int = 8, budget_s: float | None = None) -> Record:
    """The record of (case, runner) over up to ``examples`` seeds, each run by ``executor``.

    The base seed runs first. If it passes, hypothesis draws ``examples - 1`` further seeds
    (``derandomize``d through :func:`search_seed`, no example database) and, when one fails, shrinks
    it to the smallest failing seed it finds, running at most ``shrinks`` more seeds (a crash or a
    timeout is not shrunk: each try would cost a worker restart or the whole timeout).

    ``budget_s`` caps the further seeds at ``budget_s / cost`` where cost is the base seed's CPU
    seconds (reference + backend + comparison): a heavy case searches fewer seeds. The seeds run
    are then a shorter prefix of the same deterministic sequence.

    Returns that record with ``base_seed``, ``examples`` (seeds run), ``seeds_tried`` (in order),
    ``search_s`` and, for a failure the search found, ``first_failing_seed`` (before shrinking).
    """
    t0 = time.perf_counter()
    tried: dict[int, Record] = {}

    def run(seed: int) -> Record:
        if seed not in tried:
            tried[seed] = executor.run(case_id, runner, seed)
        return tried[seed]

    base = run(base_seed)
    found = None
    more = examples - 1
    if budget_s is not None and more > 0:
        cost = (base.reference_cpu_s or 0.0) + (base.cpu_s or 0.0)
        more = min(more, int(budget_s / cost)) if cost > 0 else more
    if more > 0 and base.outcome in GOOD:
        found = _hypothesis_search(run, tried, case_id, base_seed, more, shrinks)
    if base.outcome in BAD or found is None:
        # the earliest bad record, else the most informative one (dicts keep insertion order)
        rec = base if base.outcome in BAD else min(tried.values(), key=lambda r: _RANK.get(r.outcome, 9))
    else:
        rec = found
    rec = dataclasses.replace(rec, base_seed=base_seed, examples=len(tried),
                              seeds_tried=list(tried)[:MAX_SEEDS_LISTED], search_s=round(time.perf_counter() - t0, 6))
    if found is not None:
        rec.first_failing_seed = next(s for s, r in tried.items() if r.outcome in BAD)
    return rec


def _hypothesis_search(run, tried: dict, case_id: str, base_seed: int, max_examples: int, shrinks: int):
    """The record hypothesis reports (its shrunk failing seed), or None if every seed was good."""
    from hypothesis import HealthCheck, Phase, Verbosity, assume, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    budget = {"left": None}   # seeds still to run while shrinking; None until a failure is found

    @hypothesis_seed(search_seed(case_id, base_seed))
    @settings(database=None, derandomize=False, max_examples=max_examples, deadline=None,
              phases=(Phase.generate, Phase.shrink), report_multiple_bugs=False, print_blob=False,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)
    # Seeds base+1 .. base+SEED_SPACE-1: never the base seed again; shrinking moves toward base+1.
    @given(st.integers(1, SEED_SPACE - 1).map(lambda k: base_seed + k))
    def prop(seed):
        if seed not in tried and budget["left"] is not None:
            # A shrink candidate is a full run of the case: past the budget it is not run, and
            # hypothesis is told it is invalid (not that it passed).
            assume(budget["left"] > 0)
            budget["left"] -= 1
        rec = run(seed)
        if rec.outcome in BAD:
            if budget["left"] is None:
                budget["left"] = shrinks
            if rec.outcome != FAIL:
                budget["left"] = 0
            raise _Bad(rec)

    try:
        prop()
    except _Bad as e:
        return e.rec
    return None
