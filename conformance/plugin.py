"""The pytest plugin: cases x runners as test items.

    pytest -n auto --dist loadgroup --pyargs conformance --runners xla:cpu,pallas:interpret \
        --profile quick --results-dir results/

Options besides the three above carry a ``case-`` prefix (``--case-seed``, ``--case-seeds``,
``--case-examples``, ``--case-shrinks``, ``--case-timeout``, ``--case-isolation``, ``--case-filter``):
an installed pytest11 plugin shares pytest's option namespace with every other plugin.

Inputs: an item runs its case with the base seed (``--case-seed``); in the nightly profile (or with
``--case-examples N``) hypothesis then draws further seeds, deterministically per case id and base
seed, and shrinks a failure to the smallest failing seed it finds (conformance/search.py).
The item's record is that of the reported seed, so its reproducer re-creates the failing inputs.

Every item writes one results record (reports/schema.py) to ``<results-dir>/results-<worker>.jsonl``
and maps its outcome to pytest's: pass and pass-with-allowance pass, known-divergence is an
xfail naming the upstream issue, backend-/reference-unsupported are skips with the reason, fail /
crash / timeout fail with the reproducer command.

``--pallas-reference`` (with ``--pallas-reference-option NAME=VALUE``, repeatable) is the other
use of the plugin: any test suite, run with it, has every Pallas kernel it lowers evaluated by
the reference (``interp.pallas_mode``, docs/pallas-mode.md), the rest of each program on XLA.

Errors of the harness itself (a collection error, a setup or teardown error, an item that raised
instead of recording, a case worker or pytest-xdist worker that did not start, an internal error)
are not results: the main pytest process lists them at the end of the run, writes them to
``<results-dir>/harness-errors.json`` and never exits 0 with them. Before collection imports JAX,
every pytest process of the suite sets its environment for the devices (conformance/process_env.py).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import pytest

DEFAULT_TIMEOUT_S = 120.0
# Seeds per (case, runner): the quick profile runs the base seed only; nightly searches more.
PROFILE_EXAMPLES = {"quick": 1, "nightly": 4}
DEFAULT_SHRINKS = 8
# CPU seconds per item for the seeds after the base seed (estimated from the base seed's cost):
# the nightly profile's time target (docs/conformance.md) comes from the few heavy cases.
DEFAULT_SEARCH_BUDGET_S = 2.0


_SAME = object()      # Option.cli_default: the same default on both sides


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of both the pytest plugin and ``jax-conformance run`` (which passes it on to
    pytest): one spelling per side, one help text, one default."""
    pytest: str                      # the plugin's spelling
    cli: str                         # jax-conformance run's spelling
    help: str
    type: Callable | None = None
    default: Any = None
    choices: tuple | None = None
    cli_default: Any = _SAME         # run's own default, where it differs (then cli_help says how)
    cli_help: str = ""

    @property
    def dest(self) -> str:
        return self.cli.lstrip("-").replace("-", "_")

    def kwargs(self, cli: bool) -> dict:
        kw: dict = {"default": self.default if not cli or self.cli_default is _SAME else self.cli_default,
                    "help": self.help + (self.cli_help if cli else "")}
        if self.type is not None:
            kw["type"] = self.type
        if self.choices is not None:
            kw["choices"] = self.choices
        return kw


# The options both sides take, in the order --help lists them.
OPTIONS = (
    Option("--runners", "--runners", "comma-separated runners (default: every runner this machine can run)"),
    Option("--profile", "--profile", "case profile", default="quick", choices=("quick", "nightly")),
    Option("--case-seed", "--seed", "first input seed (cases are deterministic per id and seed)", int, 0),
    Option("--case-seeds", "--seeds", "items per (case, runner) with consecutive base seeds (seed, seed+1, ...); "
           "each searches from its own", int, 1),
    Option("--case-examples", "--examples", "seeds run per (case, runner): the base seed, then seeds hypothesis "
           f"draws (default per profile: {PROFILE_EXAMPLES}; a case's own `examples` caps the default)", int),
    Option("--case-shrinks", "--shrinks", "at most this many extra seeds run while hypothesis shrinks a failure",
           int, DEFAULT_SHRINKS),
    Option("--case-search-budget", "--search-budget", "CPU seconds per (case, runner) for the seeds after the "
           "base seed, estimated from the base seed's cost (heavy cases search fewer seeds); 0: no limit",
           float, DEFAULT_SEARCH_BUDGET_S),
    Option("--case-timeout", "--timeout", "seconds per (case, runner)", float, DEFAULT_TIMEOUT_S,
           cli_default=None, cli_help=" (default: 60 quick, 300 nightly)"),
    Option("--case-filter", "--cases", "only case ids containing one of these comma-separated strings"),
)


def add_run_options(parser) -> None:
    """The shared options on an argparse parser (``jax-conformance run``)."""
    for o in OPTIONS:
        parser.add_argument(o.cli, dest=o.dest, **o.kwargs(cli=True))


def forward_args(args) -> list[str]:
    """``jax-conformance run``'s parsed shared options as the plugin's command-line arguments."""
    out = []
    for o in OPTIONS:
        value = getattr(args, o.dest)
        if value is not None:
            out += [o.pytest, str(value)]
    return out


def pytest_addoption(parser):
    g = parser.getgroup("jax-conformance")
    for o in OPTIONS:
        g.addoption(o.pytest, **o.kwargs(cli=False))
    g.addoption("--results-dir", default=None, help="write one JSONL results file per worker here")
    g.addoption("--case-save-outputs", default=None, metavar="DIR",
                help="keep every backend output in DIR (conformance/outputs.py; `jax-conformance recheck DIR`)")
    g.addoption("--case-isolation", default="subprocess", choices=("subprocess", "none"),
                help="run cases in an isolated worker process (crash/hang safe) or in pytest's own")
    g.addoption("--no-first-divergence", action="store_true",
                help="do not localise failures to the first divergent equation")
    g.addoption("--pallas-reference", action="store_true",
                help="run every Pallas kernel the tests lower in the reference (interp.pallas_mode)")
    g.addoption("--pallas-reference-option", action="append", default=[], metavar="NAME=VALUE",
                help="a reference option for --pallas-reference (uninitialized=raise, "
                     "detect_races=true, grid_order=shuffled, seed=3, ...); repeatable")


def pallas_reference_options(pairs) -> dict:
    """``--pallas-reference-option`` values as interp.Options keywords, typed by the field."""
    import dataclasses
    from interp.options import Options
    types = {f.name: type(f.default) for f in dataclasses.fields(Options)
             if type(f.default) in (bool, int, str)}
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in types:
            raise pytest.UsageError(f"--pallas-reference-option {pair!r}: expected NAME=VALUE with "
                                    f"NAME one of {sorted(types)}")
        kind = types[name]
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise pytest.UsageError(f"--pallas-reference-option {pair!r}: true or false")
            out[name] = text.lower() in ("true", "1")
        else:
            out[name] = kind(text)
    return out


def pytest_configure(config):
    if config.getoption("--pallas-reference", False):
        import interp
        config._pallas_reference = interp.pallas_mode(
            **pallas_reference_options(config.getoption("--pallas-reference-option"))).enable()
    elif config.getoption("--pallas-reference-option", None):
        raise pytest.UsageError("--pallas-reference-option needs --pallas-reference")


def pytest_unconfigure(config):
    if getattr(config, "_pallas_reference", None) is not None:
        config._pallas_reference.disable()


def selected_runners(config) -> list[str]:
    from hardware_runners import available_runners
    names = config.getoption("--runners")
    if names:
        return [n.strip() for n in names.split(",") if n.strip()]
    return available_runners()


def examples_for(case, explicit: int | None, default: int) -> int:
    """Seeds per item: an explicit --case-examples applies to every case; otherwise the profile's
    default, capped by the case's own ``examples`` (heavy cases ask for fewer)."""
    if explicit is not None:
        return max(1, explicit)
    return max(1, min(default, case.examples)) if case.examples is not None else default


def suite_items(profile: str, case_filter: str | None, runners: list[str], first_seed: int, nseeds: int,
                explicit_examples: int | None) -> list[tuple[str, tuple]]:
    """The suite's items, ``(item id, (case id, runner, seed, examples))``, case-major (the runners
    of one case share its reference result in one worker): pytest's items, and the units of
    ``jax-conformance run --cluster``."""
    from conformance.cases import all_cases
    from hardware_runners import get_runner
    cases = all_cases(profile)
    if case_filter:
        keys = [k.strip() for k in case_filter.split(",") if k.strip()]
        cases = {cid: c for cid, c in cases.items() if any(k in cid for k in keys)}
    items = []
    nseeds = max(1, nseeds)
    seeds = list(range(first_seed, first_seed + nseeds))
    default = PROFILE_EXAMPLES[profile]
    for runner in runners:
        try:
            kinds = get_runner(runner).kinds
        except KeyError:
            kinds = ()   # unknown runner: every case records why
        for cid, case in cases.items():
            if kinds and case.kind not in kinds:
                continue
            examples = examples_for(case, explicit_examples, default)
            for seed in seeds:
                pid = f"{cid}@{runner}" if nseeds == 1 else f"{cid}@{runner}#seed{seed}"
                items.append((pid, (cid, runner, seed, examples)))
    items.sort(key=lambda p: (p[1][0], p[1][2], p[1][1] != "reference"))
    return items


def pytest_generate_tests(metafunc):
    if "conformance_item" not in metafunc.fixturenames:
        return
    from conformance import process_env
    process_env.apply()        # before the runner detection below starts JAX in this process
    config = metafunc.config
    items = suite_items(config.getoption("--profile"), config.getoption("--case-filter"), selected_runners(config),
                        config.getoption("--case-seed"), config.getoption("--case-seeds"),
                        config.getoption("--case-examples"))
    metafunc.parametrize("conformance_item", [pytest.param(item, id=pid, marks=pytest.mark.xdist_group(item[0]))
                                              for pid, item in items])


class _Session:
    def __init__(self, config):
        from conformance.isolation import Executor
        from reports.schema import JsonlWriter, environment_line
        self.config = config
        self.writer = None
        self.outputs = None
        odir = config.getoption("--case-save-outputs")
        if odir:
            from conformance.outputs import Writer
            self.outputs = Writer(odir, f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}")
        self.executor = Executor(isolated=config.getoption("--case-isolation") != "none",
                                 timeout=config.getoption("--case-timeout"),
                                 first_divergence=not config.getoption("--no-first-divergence"), outputs=self.outputs)
        rdir = config.getoption("--results-dir")
        if rdir:
            wid = os.environ.get("PYTEST_XDIST_WORKER", "main")
            self.writer = JsonlWriter(os.path.join(rdir, f"results-{wid}-{os.getpid()}.jsonl"))
            from hardware_runners.environment import environment
            from conformance import process_env
            env = dict(environment(), process_env={"set": dict(process_env.APPLIED),
                                                   "too_late": dict(process_env.LATE)})
            self.writer.write(environment_line(worker=wid, profile=config.getoption("--profile"),
                                               run_id=os.environ.get("JAX_CONFORMANCE_RUN_ID"), environment=env))

    def search(self, case_id: str, runner: str, seed: int, examples: int):
        """The item's record (conformance/search.py), written to the results file."""
        from conformance.search import search
        budget = self.config.getoption("--case-search-budget")
        rec = search(self.executor, case_id, runner, seed, examples, self.config.getoption("--case-shrinks"),
                     budget_s=budget if budget > 0 else None)
        rec.run_id = os.environ.get("JAX_CONFORMANCE_RUN_ID")
        rec.profile = self.config.getoption("--profile")
        if self.writer:
            self.writer.write(rec)
        return rec

    def close(self):
        if self.outputs is not None:
            self.outputs.close()
        self.executor.close()
        if self.writer:
            self.writer.close()


@pytest.fixture(scope="session")
def conformance_session(request):
    s = _Session(request.config)
    yield s
    s.close()


OUTCOME_PROPERTY = "conformance_outcome"   # an item's user property: it recorded a result


def check_item(session: _Session, item, record_property=None) -> None:
    from reports.schema import GOOD, KNOWN_DIVERGENCE, UNSUPPORTED
    case_id, runner, seed, examples = item
    rec = session.search(case_id, runner, seed, examples)
    outcome = rec.outcome
    if record_property is not None:
        record_property(OUTCOME_PROPERTY, outcome)
    if outcome in GOOD:
        return
    if outcome == KNOWN_DIVERGENCE:
        kd = rec.known_divergence or {}
        pytest.xfail(f"known divergence {kd.get('id')}: {kd.get('link')}")
    if outcome in UNSUPPORTED:
        pytest.skip(f"{outcome}: {(rec.detail or '')[:300]}")
    from reports.render import failure_text
    pytest.fail(f"{outcome}: {case_id} on {runner}\n" + failure_text(rec, output_chars=3000), pytrace=False)


# --------------------------------------------------------------------------------------------
# Errors of the harness: gathered in the main pytest process (pytest-xdist sends it the workers'
# reports), listed at the end, written beside the results, and never an exit status of 0.
# --------------------------------------------------------------------------------------------
HARNESS_ERRORS_FILE = "harness-errors.json"
_harness_errors: list[dict] = []
_results_seen = [0]
_suite_involved = [False]    # this pytest run collects the conformance suite (else: not our errors)


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _harness_error(where: str, text: str) -> None:
    _harness_errors.append({"where": where, "error": text[-6000:]})


def pytest_collectreport(report):
    if "conformance" in report.nodeid:
        _suite_involved[0] = True
    if report.failed:
        _harness_error(f"collecting {report.nodeid or 'the suite'}", report.longreprtext or "collection failed")


def pytest_runtest_logreport(report):
    recorded = any(k == OUTCOME_PROPERTY for k, _ in getattr(report, "user_properties", ()))
    if "test_conformance[" in report.nodeid:
        _suite_involved[0] = True
    if report.when == "call" and recorded:
        _results_seen[0] += 1
    elif report.failed and "test_conformance[" in report.nodeid:
        # a conformance item that failed without recording (its harness raised), or its
        # setup/teardown failed; a worker that crashed under an item is reported here too
        _harness_error(f"{report.when} of {report.nodeid}", report.longreprtext or "failed")


def pytest_internalerror(excrepr, excinfo):
    _harness_error("pytest internal error", str(excrepr))


@pytest.hookimpl(optionalhook=True)      # a pytest-xdist hook: absent under -p no:xdist
def pytest_testnodedown(node, error):
    if error:
        _harness_error(f"pytest-xdist worker {getattr(getattr(node, 'gateway', None), 'id', node)} went down",
                       str(error))


def _report_harness_errors(config) -> bool:
    return not _is_xdist_worker(config) and _suite_involved[0] and bool(_harness_errors)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not _report_harness_errors(config):
        return
    rdir = config.getoption("--results-dir", None)
    if rdir:
        import json
        os.makedirs(rdir, exist_ok=True)
        with open(os.path.join(rdir, HARNESS_ERRORS_FILE), "w") as f:
            json.dump({"errors": _harness_errors, "results": _results_seen[0]}, f, indent=1)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _report_harness_errors(config):
        return
    tr = terminalreporter
    tr.section(f"jax-conformance: {len(_harness_errors)} harness errors (not results; "
               f"{_results_seen[0]} results recorded)", sep="=", red=True, bold=True)
    for e in _harness_errors:
        tr.write_line(f"--- {e['where']}")
        tr.write_line(e["error"][-3000:])
