"""Merge any number of result files (xdist workers, shards, machines) into one result set.

Every record belongs to the **machine** that produced it: the environment record its worker wrote
(versions, devices, drivers, flags, host). Shards of one run, and re-runs on the same machine,
combine (the latest record of a (case, runner, seed) wins); records of different machines never
replace each other. Each (runner, machine) is one **column** of the report, named
``runner@device jaxVERSION`` (``xla:cuda@H100 jax0.11.2``, ``xla:cpu@EPYC jax0.10.2``).
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
from typing import Iterable

from .schema import BAD, KNOWN_DIVERGENCE, FAIL, Record, expand_paths, read_jsonl

# Environment fields that identify a machine (and the software on it). Fields that differ between
# the workers or runs of one machine (run id, worker, device counts) are left out.
IDENTITY_FIELDS = ("jax", "jaxlib", "numpy", "ml_dtypes", "scipy", "plugins", "backend_platform_version",
                   "nvidia_driver", "xla_flags", "python", "host", "machine", "os")
IDENTITY_PREFIXES = ("cpu", "host_cpu", "gpu", "cuda", "cudnn", "tpu", "rocm")   # host CPU model/flags, GPU details
# The device a runner computes on: a hardware runner on its platform's device, the rest on the host CPU.
RUNNER_PLATFORMS = {"pallas:triton": "gpu", "pallas:mosaic-gpu": "gpu", "pallas:mosaic-tpu": "tpu"}
_VENDOR_WORDS = {"nvidia", "amd", "intel", "intel(r)", "tesla", "genuine", "authenticamd", "genuineintel"}


def machine_id(env: dict) -> str:
    """A short stable id of the machine an environment record describes."""
    ident = {k: env.get(k) for k in IDENTITY_FIELDS if env.get(k) is not None}
    ident.update({k: v for k, v in env.items() if k.startswith(IDENTITY_PREFIXES) and k != "cpu_count"})
    ident["device_kinds"] = sorted(k for k in (env.get("devices") or {}) if k != "error")
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:10]


def runner_platform(runner: str) -> str:
    """"gpu", "tpu", another PJRT platform, or "cpu" (the reference and the interpret modes)."""
    if runner.startswith("xla:"):
        platform = runner[4:]
        return "gpu" if platform in ("cuda", "rocm") else platform
    return RUNNER_PLATFORMS.get(runner, "cpu")


def cpu_model(env: dict) -> str | None:
    """The host CPU's model name where the environment records it (a string field ``cpu_model``,
    or a dict ``host_cpu``/``cpu`` with a ``model``)."""
    for key in ("cpu_model", "host_cpu", "cpu"):
        value = env.get(key)
        if isinstance(value, dict):
            value = value.get("model") or value.get("model_name") or value.get("name")
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def short_device(name: str) -> str:
    """A column-sized device name: "NVIDIA H100 80GB HBM3" -> "H100", "AMD EPYC 7B13" -> "EPYC 7B13",
    "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz" -> "Xeon 8481C", "TPU v5 lite" unchanged."""
    if name.upper().startswith("TPU"):
        return name
    name = re.sub(r"\((R|TM|tm|r)\)|\bCPU\b|@.*$|\bProcessor\b|\d+-Core", " ", name)
    words = [w for w in name.split() if w.lower() not in _VENDOR_WORDS]
    if not words:
        return name.strip() or "?"
    if any(c.isdigit() for c in words[0]):
        return words[0]
    with_digit = [w for w in words[1:] if any(c.isdigit() for c in w)]
    return f"{words[0]} {with_digit[0]}" if with_digit else words[0]


def device_name(env: dict, runner: str) -> tuple[str, str]:
    """(short, full) name of the device ``runner`` computed on, from the machine's environment."""
    platform = runner_platform(runner)
    if platform == "cpu":
        full = cpu_model(env)
        if full:
            return short_device(full), full
        host = env.get("host") or "cpu"
        return host, f"host {host} (CPU model not recorded)"
    prefixes = ("gpu:", "cuda:", "rocm:") if platform == "gpu" else (f"{platform}:",)
    kinds = [k.split(":", 1)[1] for k in (env.get("devices") or {}) if k.startswith(prefixes)]
    if not kinds:
        return platform, f"{platform} (no device recorded)"
    return "+".join(short_device(k) for k in kinds), ", ".join(kinds)


@dataclasses.dataclass(frozen=True)
class Column:
    """One runner on one machine."""
    id: str            # unique in a result set, stable across runs: the history's key
    runner: str
    device: str        # short device name
    device_full: str
    jax: str
    machine: str       # machine_id of its environment

    @property
    def label(self) -> str:
        return f"{self.runner}@{self.device}"


@dataclasses.dataclass
class Machine:
    id: str
    environment: dict
    run_ids: list
    workers: list


class Results:
    def __init__(self, records: list[Record], environments: list[dict], sources: list[str],
                 machines: dict[str, Machine] | None = None, columns: dict[str, Column] | None = None):
        self.records = records
        self.environments = environments
        self.sources = sources
        self.machines = machines or {}
        self.columns = columns or {}

    @property
    def runners(self) -> list[str]:
        return sorted({r.runner for r in self.records}, key=_runner_rank)

    @property
    def column_ids(self) -> list[str]:
        """Columns in display order: by runner, then device and JAX version."""
        ids = {r.column for r in self.records}
        return sorted(ids, key=lambda c: (_runner_rank(self.columns[c].runner), self.columns[c].device,
                                          self.columns[c].jax, c) if c in self.columns else ((9, c), "", "", c))

    @property
    def families(self) -> list[str]:
        return sorted({family(r) for r in self.records})

    def counts(self, key=lambda r: r.column) -> dict:
        out: dict = collections.defaultdict(collections.Counter)
        for r in self.records:
            out[key(r)][r.outcome] += 1
        return out

    def matrix(self) -> dict:
        """{(family, column): Counter(outcome)}."""
        return self.counts(key=lambda r: (family(r), r.column))

    def bad(self) -> list[Record]:
        return [r for r in self.records if r.outcome in BAD]

    def largest_divergences(self, n: int = 10) -> list[Record]:
        fails = [r for r in self.records if r.outcome in (FAIL, KNOWN_DIVERGENCE)]
        return sorted(fails, key=lambda r: -(r.max_ulp or r.mismatches or 0))[:n]

    def runs(self) -> list[dict]:
        """Per machine: its run ids, when the run started and ended (from the records' timestamps and
        durations), how long it took and how many records it has."""
        out = []
        for mid, m in self.machines.items():
            recs = [r for r in self.records if r.machine == mid]
            if not recs:
                continue
            ends = [r.timestamp for r in recs if r.timestamp]
            starts = [r.timestamp - (r.total_s or r.duration_s or 0) for r in recs if r.timestamp]
            out.append({"machine": mid, "run_ids": sorted({r.run_id for r in recs if r.run_id}),
                        "start": min(starts) if starts else None, "end": max(ends) if ends else None,
                        "duration_s": (max(ends) - min(starts)) if ends else None, "records": len(recs),
                        "profile": sorted({r.profile for r in recs if r.profile})})
        return sorted(out, key=lambda r: (r["start"] or 0, r["machine"]))


def family(r: Record) -> str:
    return r.family or r.case.split("/", 1)[0]


def _runner_rank(name: str):
    return ({"reference": 0}.get(name, 2 if name.startswith("pallas:") else 1), name)


def merge(paths: Iterable[str]) -> Results:
    """Read every file (directories are searched for *.jsonl and *.jsonl.gz). Each record is given the
    machine of its environment record (matched by run id and worker, else the environment in the
    same file) and its column. When one machine has the same (case, runner, seed) more than once
    (a shard re-run), the most recent record wins; other machines' records are kept apart."""
    files = expand_paths(paths)
    envs: list[dict] = []
    by_worker: dict[tuple, dict] = {}
    pending: list[tuple[Record, dict]] = []     # (record, its file's environments by (run id, worker))
    for path in files:
        file_envs: dict = {}
        file_records = []
        for line in read_jsonl(path):
            if isinstance(line, Record):
                file_records.append(line)
            elif line.get("type") == "environment":
                envs.append(line)
                by_worker[(line.get("run_id"), line.get("worker"))] = line
                file_envs.setdefault((line.get("run_id"), line.get("worker")), line)
        pending += [(rec, file_envs) for rec in file_records]

    machines: dict[str, Machine] = {}
    latest: dict[tuple, Record] = {}
    for rec, file_envs in pending:
        # Its worker's environment in the same file (runs without a run id can share worker names),
        # else in any file (a shard split from its environment), else the file's first environment.
        worker = (rec.run_id, rec.worker)
        env_rec = (file_envs.get(worker) or by_worker.get(worker) or next(iter(file_envs.values()), None) or {})
        env = env_rec.get("environment") or {}
        if not env and rec.jax_version:
            env = {"jax": rec.jax_version}
        mid = machine_id(env)
        m = machines.setdefault(mid, Machine(mid, env, [], []))
        for lst, v in ((m.run_ids, rec.run_id), (m.workers, rec.worker)):
            if v and v not in lst:
                lst.append(v)
        rec.machine = mid
        key = (mid, rec.case, rec.runner, rec.seed)
        old = latest.get(key)
        if old is None or (rec.timestamp or 0) >= (old.timestamp or 0):
            latest[key] = rec
    records = sorted(latest.values(), key=lambda r: (r.case, r.runner, r.machine, r.seed or 0))
    columns = _columns(records, machines)
    return Results(records, envs, files, machines, columns)


def _columns(records: list[Record], machines: dict[str, Machine]) -> dict[str, Column]:
    """Name each (runner, machine) and set every record's ``column``. Two machines whose columns
    would share a name (same device and JAX version) are told apart by host, else by machine id."""
    pairs = sorted({(r.runner, r.machine) for r in records})
    base = {}
    for runner, mid in pairs:
        env = machines[mid].environment
        short, full = device_name(env, runner)
        base[(runner, mid)] = (f"{runner}@{short} jax{env.get('jax') or '?'}", short, full, env.get("jax") or "?")
    clashes = collections.Counter(name for name, *_ in base.values())
    hosts = collections.defaultdict(set)
    for (runner, mid), (name, *_) in base.items():
        hosts[name].add(machines[mid].environment.get("host"))
    columns = {}
    by_pair = {}
    for (runner, mid), (name, short, full, jax) in base.items():
        if clashes[name] > 1:
            host = machines[mid].environment.get("host")
            name += f" on {host}" if len(hosts[name]) == clashes[name] and host else f" #{mid[:6]}"
        columns[name] = Column(name, runner, short, full, jax, mid)
        by_pair[(runner, mid)] = name
    for r in records:
        r.column = by_pair[(r.runner, r.machine)]
    return columns
