"""A fuzz campaign: programs generated and judged on the runners, findings written as they happen,
each new bucket shrunk (and its XLA pass looked for), a summary at the end.

``run_campaign(...)`` is the Python API (``jax-conformance fuzz`` is its command line). Work goes
through an executor (conformance/fuzz/executor.py: local processes by default); the campaign
itself only generates unit descriptions, files results and decides what to shrink, so it runs the
same whatever executes the units.
"""
from __future__ import annotations

import dataclasses
import os
import time
import uuid

from . import families as F
from .generate import GENERATOR_VERSION
from .store import Store
from .work import PROGRAM, SHRINK, Unit

BAD = ("fail", "crash", "timeout")


class CampaignError(ValueError):
    """Bad input to a campaign (unknown runner, family or option): the message names the choices."""


@dataclasses.dataclass
class Plan:
    runners: tuple[str, ...]
    families: tuple[str, ...]
    seed: int = 0
    programs: int | None = None
    time_s: float | None = None
    workers: int = 1
    shrink: bool = True
    shrink_budget_s: float = 60.0
    bisect_budget_s: float = 90.0
    timeout_s: float = 300.0
    platform: str = "cpu"
    cluster: str | None = None      # a Ray cluster's address (conformance/cluster.py); None: local processes


def check_plan(plan: Plan) -> None:
    """Every runner known, available here and able to run every family's kind of program; every
    family implemented; a limit given."""
    from hardware_runners import all_runners
    known = {r.name: r for r in all_runners()}
    if not plan.runners:
        raise CampaignError(f"no runners given; known: {', '.join(known)}")
    for name in plan.runners:
        if name == "reference":
            raise CampaignError("the reference is what runners are judged against, not a runner to fuzz; "
                                f"choose from: {', '.join(n for n in known if n != 'reference')}")
        if name not in known:
            raise CampaignError(f"unknown runner {name!r}; known: {', '.join(known)}")
        ok, why = known[name].available()
        if not ok and not plan.cluster:     # on a cluster, the nodes with the device run it
            raise CampaignError(f"runner {name} is not available here: {why}")
    if not plan.families:
        raise CampaignError(f"no families given; implemented: {', '.join(F.FAMILIES)}")
    for fam in plan.families:
        try:
            family = F.get(fam)
        except F.UnknownFamily as e:
            raise CampaignError(str(e)) from None
        for name in plan.runners:
            kinds = getattr(known[name], "kinds", ())
            if family.kind not in kinds:
                fitting = [f.name for f in F.FAMILIES.values() if f.kind in kinds]
                raise CampaignError(f"runner {name} runs {'/'.join(kinds)} programs; family {fam} makes "
                                    f"{family.kind} programs (families for {name}: {', '.join(fitting)})")
    if plan.programs is None and plan.time_s is None:
        raise CampaignError("give --programs N or --time SECONDS")
    if plan.workers < 1:
        raise CampaignError("--workers must be at least 1")
    if plan.cluster:
        from conformance.cluster import ray_missing
        if ray_missing():
            raise CampaignError(ray_missing())


def _environment() -> dict:
    import platform as pf

    import numpy
    out = {"host": pf.node(), "python": pf.python_version(), "numpy": numpy.__version__,
           "generator_version": GENERATOR_VERSION}
    try:
        import jax
        import jaxlib
        out.update(jax=jax.__version__, jaxlib=jaxlib.__version__)
    except ImportError:
        pass
    return out


class Campaign:
    def __init__(self, plan: Plan, out: str, executor=None, log=print, resume: bool = False):
        self.plan, self.out, self.log = plan, out, log
        self.store = Store(out)
        self.executor = executor
        self.done: set[int] = set()
        self.buckets: dict[str, dict] = {}        # bucket -> {runner, occurrences, first, shrinking}
        self.counts: dict[str, dict] = {r: {"programs": 0, "passes": 0, "findings": 0} for r in plan.runners}
        self.elapsed_before = 0.0
        self.id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
        self.started = time.time()
        if resume:
            self._load_progress()

    # -- resume ---------------------------------------------------------------------------------
    def _load_progress(self) -> None:
        info = Store.read_campaign(self.out)
        self.id = info["campaign_id"]
        self.elapsed_before = float(info.get("elapsed_s") or 0.0)
        for line in Store.read_lines(os.path.join(self.out, "programs.jsonl")):
            self.done.add(line["index"])
            self._count(line)
        for bucket, doc in self.store.read_findings().items():
            self.buckets[bucket] = {"runner": doc["record"].get("runner"), "occurrences": 0,
                                    "shrunk": "reduced" in doc}
        for line in Store.read_lines(os.path.join(self.out, "findings.jsonl")):
            b = self.buckets.setdefault(line["bucket"], {"runner": line.get("runner"), "occurrences": 0, "shrunk": False})
            b["occurrences"] += 1

    def _count(self, line: dict) -> None:
        for runner, outcome in line.get("outcomes", {}).items():
            c = self.counts.setdefault(runner, {"programs": 0, "passes": 0, "findings": 0})
            c["programs"] += 1
            c["passes"] += outcome in ("pass", "pass-with-allowance")
            c["findings"] += bool(line.get("buckets", {}).get(runner))

    # -- the loop -----------------------------------------------------------------------------
    def _info(self, status: str) -> dict:
        p = self.plan
        return {"campaign_id": self.id, "status": status, "started": self.started,
                "elapsed_s": round(self.elapsed_before + time.time() - self.started, 3),
                "runners": list(p.runners), "families": list(p.families), "seed": p.seed, "programs": p.programs,
                "time_s": p.time_s, "workers": p.workers, "shrink": p.shrink, "shrink_budget_s": p.shrink_budget_s,
                "bisect_budget_s": p.bisect_budget_s, "timeout_s": p.timeout_s, "platform": p.platform,
                "cluster": p.cluster,
                "environment": _environment()}

    def _units(self):
        i = 0
        while True:
            if i not in self.done:
                fam = self.plan.families[i % len(self.plan.families)]
                yield Unit(PROGRAM, fam, self.plan.seed, i, tuple(self.plan.runners), platform=self.plan.platform)
            i += 1

    def _enough(self, submitted: int) -> bool:
        p = self.plan
        if p.programs is not None and len(self.done) + submitted >= p.programs:
            return True
        return p.time_s is not None and self.elapsed_before + time.time() - self.started >= p.time_s

    def run(self) -> dict:
        from .executor import LocalProcesses, RayCluster
        p = self.plan
        self.store.write_campaign(self._info("running"))
        if self.executor is None:
            self.executor = (RayCluster(p.cluster, p.timeout_s) if p.cluster else
                             LocalProcesses(p.workers, p.timeout_s, host_devices=F.host_devices(p.families)))
        window = 2 * self.executor.slots
        units = self._units()
        in_flight = 0
        status = "finished"
        t_last = time.time()
        try:
            while True:
                while in_flight < window and not self._enough(in_flight):
                    self.executor.submit(next(units))
                    in_flight += 1
                if in_flight == 0 and self.executor.pending() == 0:
                    break
                for unit, result in self.executor.results(timeout=0.5):
                    if unit.kind == PROGRAM:
                        in_flight -= 1
                        self._program_done(unit, result)
                    else:
                        self._shrink_done(unit, result)
                if time.time() - t_last > 10:
                    self.store.write_campaign(self._info("running"))
                    t_last = time.time()
        except KeyboardInterrupt:
            status = "interrupted"
            self.log("interrupted: what finished is in the campaign directory; --resume continues")
        finally:
            self.executor.close()
            self.store.write_campaign(self._info(status))
        self.store.close()
        return self._summary(status)

    # -- results ------------------------------------------------------------------------------
    def _records(self, unit: Unit, result: dict) -> list[dict]:
        if "records" in result:
            return result["records"]
        # the worker died (crash), hung (timeout) or the harness failed: one record per runner
        how = result.get("isolation") or "crash"
        detail = result.get("harness_error") or (result.get("output") or "")[:2000]
        kind = "harness" if "harness_error" in result else "worker"
        return [{"runner": r, "outcome": how if kind == "worker" else "crash", "detail": detail,
                 "bucket": f"{how}:{kind}:{'+'.join(unit.runners)}:{r}" if kind == "worker" else
                 f"harness:{(result.get('harness_error') or '').split(':')[0]}:{r}"}
                for r in unit.runners]

    def _program_done(self, unit: Unit, result: dict) -> None:
        records = self._records(unit, result)
        line = {"index": unit.index, "family": unit.family, "key": unit.key,
                "outcomes": {r["runner"]: r["outcome"] for r in records},
                "buckets": {r["runner"]: r["bucket"] for r in records if r.get("bucket")},
                "allowances": {r["runner"]: r["allowance"] for r in records if r.get("allowance")},
                "n_ops": result.get("n_ops"), "seconds": result.get("seconds")}
        self.store.programs.write(line)
        self.done.add(unit.index)
        self._count(line)
        for rec in records:
            if rec.get("bucket"):
                self._finding(unit, result, rec)

    def _finding(self, unit: Unit, result: dict, rec: dict) -> None:
        bucket = rec["bucket"]
        where = rec.get("first_divergent_eqn") or {}
        self.store.findings.write({"bucket": bucket, "runner": rec["runner"], "key": unit.key, "index": unit.index,
                                   "outcome": rec["outcome"], "detail": str(rec.get("detail"))[:500],
                                   "first_divergent_eqn": {k: where.get(k) for k in ("primitive", "eqn", "dtype",
                                                                                     "symptom", "mode")}})
        b = self.buckets.get(bucket)
        if b is None:
            b = self.buckets[bucket] = {"runner": rec["runner"], "occurrences": 0, "shrunk": False}
            if "program" not in result:          # a dead worker: the program is regenerated here
                result = dict(result, **_regenerate(unit))
            self.store.save_finding(bucket, result, rec)
            self.log(f"new finding {bucket} (program {unit.key})")
            if self.plan.shrink and "records" in result and rec.get("outputs"):
                self.executor.submit(Unit(SHRINK, unit.family, unit.seed, unit.index, (rec["runner"],),
                                          program=result["program"], inputs=result["inputs"], bucket=bucket,
                                          budget_s=self.plan.shrink_budget_s,
                                          bisect_budget_s=self.plan.bisect_budget_s, platform=unit.platform),
                                     priority=True)
        b["occurrences"] += 1

    def _shrink_done(self, unit: Unit, result: dict) -> None:
        if result.get("reproduced"):
            self.store.save_reduced(unit.bucket, result)
            self.buckets[unit.bucket]["shrunk"] = True
            passes = (result.get("passes") or {}).get("responsible")
            self.log(f"shrunk {unit.bucket}: {result['before']['ops']} -> {result['after']['ops']} ops, "
                     f"{result['before']['elements']} -> {result['after']['elements']} elements in "
                     f"{result['shrink_s']:.0f} s" + (f"; XLA pass: {', '.join(passes)}" if passes else ""))
        else:
            why = (result.get("harness_error") or result.get("isolation")
                   or "the finding did not reproduce when judged again")
            self.store.update_finding(unit.bucket, {"shrink_failed": str(why)[:1000]})
            self.log(f"could not shrink {unit.bucket}: {str(why)[:200]}")

    # -- the end ------------------------------------------------------------------------------
    def _summary(self, status: str) -> dict:
        elapsed = self.elapsed_before + time.time() - self.started
        programs = len(self.done)
        summary = {"campaign_id": self.id, "status": status, "programs": programs, "seconds": round(elapsed, 1),
                   "programs_per_s": round(programs / elapsed, 3) if elapsed else None,
                   "counts": self.counts, "buckets": self.buckets, "out": self.out}
        for runner, c in self.counts.items():
            c["buckets"] = sum(1 for b in self.buckets.values() if b["runner"] == runner)
            c["seconds"] = round(elapsed, 1)
        return summary


def _regenerate(unit: Unit) -> dict:
    from . import ir, values
    from .generate import generate
    from .work import pack
    program, choices = generate(unit.family, unit.seed, unit.index)
    return {"program": ir.dumps(program), "inputs": pack(values.make_inputs(program, unit.key)), "choices": choices}


def run_campaign(runners=("xla:cpu",), families=("lax",), *, seed: int = 0, programs: int | None = None,
                 time_s: float | None = None, out: str | None = None, history: str | None = None,
                 resume: str | None = None, workers: int = 1, shrink: bool = True, shrink_budget_s: float = 60.0,
                 bisect_budget_s: float = 90.0, timeout_s: float = 300.0, cluster: str | None = None, executor=None,
                 log=print) -> dict:
    """Run a campaign (or continue one: ``resume`` is its directory, whose campaign.json gives the
    runners, families, seed and limits) and return its summary. Findings are written under ``out``
    as they happen; ``history`` is an SQLite file that keeps per-runner counts and buckets over
    campaigns (the summary then lists the buckets no earlier campaign had). ``cluster``: run the
    units on the Ray cluster at that address (``auto``, ``ray://HOST:PORT``) instead of ``workers``
    local processes; the findings are the same."""
    if resume:
        info = Store.read_campaign(resume)
        plan = Plan(tuple(info["runners"]), tuple(info["families"]), info["seed"], info["programs"], info["time_s"],
                    workers, info.get("shrink", True), info.get("shrink_budget_s", 60.0),
                    info.get("bisect_budget_s", 90.0), info.get("timeout_s", 300.0), info.get("platform", "cpu"),
                    cluster)
        out = resume
    else:
        plan = Plan(tuple(runners), tuple(families), seed, programs, time_s, workers, shrink, shrink_budget_s,
                    bisect_budget_s, timeout_s, cluster=cluster)
        out = out or f"fuzz-{time.strftime('%Y%m%dT%H%M%S')}"
    check_plan(plan)
    if not resume and os.path.exists(os.path.join(out, "campaign.json")):
        raise CampaignError(f"{out} holds a campaign already: continue it with --resume {out}, or choose another --out")
    campaign = Campaign(plan, out, executor, log, resume=bool(resume))
    summary = campaign.run()
    info = Store.read_campaign(out)
    if history:
        from .history import record_campaign
        summary["history"] = record_campaign(history, summary["campaign_id"], info, summary["counts"],
                                             summary["buckets"])
    from .report import write_summary
    summary["files"] = write_summary(campaign.store, summary, info)
    return summary
