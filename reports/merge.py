"""Merge any number of JSONL result files (xdist workers, shards, hosts) into one result set."""
from __future__ import annotations

import collections
from typing import Iterable

from .schema import BAD, OUTCOMES, expand_paths, read_jsonl


class Results:
    def __init__(self, records: list[dict], environments: list[dict], sources: list[str]):
        self.records = records
        self.environments = environments
        self.sources = sources

    @property
    def runners(self) -> list[str]:
        order = {"reference": 0}
        return sorted({r["runner"] for r in self.records}, key=lambda n: (order.get(n, 1), n))

    @property
    def families(self) -> list[str]:
        return sorted({r.get("family") or r["case"].split("/", 1)[0] for r in self.records})

    def counts(self, key=lambda r: r["runner"]) -> dict:
        out: dict = collections.defaultdict(lambda: collections.Counter())
        for r in self.records:
            out[key(r)][r["outcome"]] += 1
        return out

    def matrix(self) -> dict:
        """{(family, runner): Counter(outcome)}."""
        return self.counts(key=lambda r: (r.get("family") or r["case"].split("/", 1)[0], r["runner"]))

    def bad(self) -> list[dict]:
        return [r for r in self.records if r["outcome"] in BAD]

    def largest_divergences(self, n: int = 10) -> list[dict]:
        fails = [r for r in self.records if r["outcome"] in ("fail", "known-divergence")]
        return sorted(fails, key=lambda r: -(r.get("max_ulp") or 0))[:n]


def merge(paths: Iterable[str]) -> Results:
    """Read every file (directories are searched for *.jsonl). When the same (case, runner, seed)
    appears more than once (a shard re-run), the most recent record wins."""
    files = expand_paths(paths)
    latest: dict[tuple, dict] = {}
    envs = []
    for path in files:
        for rec in read_jsonl(path):
            if rec.get("type") == "environment":
                envs.append(rec)
            elif rec.get("type") == "result":
                key = (rec["case"], rec["runner"], rec.get("seed"))
                old = latest.get(key)
                if old is None or (rec.get("timestamp") or 0) >= (old.get("timestamp") or 0):
                    latest[key] = rec
    records = sorted(latest.values(), key=lambda r: (r["case"], r["runner"], r.get("seed") or 0))
    return Results(records, envs, files)


def outcome_order() -> tuple[str, ...]:
    return OUTCOMES
