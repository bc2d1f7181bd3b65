"""The spec as indexed data (spec/base.py): one entry per registered rule, labelled statements,
and each statement a rule enforces found by its id in the rule's error and in a test's name.

- The spec's families are interp's rule families (spec.families() is derived from the modules
  present, interp.rules.FAMILIES is the import order: compared here, written once each).
- Every registered rule (every name interp.registry registers, on the installed JAX) has one
  entry, in the spec module of the rule's family, or is another JAX spelling of one (spec
  ALIASES, served by the same rule); every entry and alias names a registered rule.
- Statement ids: one text per id; an id the spec text refers to exists.
- Every id the reference cites (in the message of an error of interp/: the raise that enforces
  the statement) exists, is written out in spec/ (so grep finds it) and is carried by the name of a
  test (``pad/c3`` -> ``test_pad_c3_...``).
"""
from __future__ import annotations

import ast
import inspect
import pathlib
import re

import pytest

import interp
import spec
from interp.registry import EXTENDED_RULES, RULES

ROOT = pathlib.Path(__file__).resolve().parent.parent
# An id as text may write it: "<primitive>/c<n>" or "<scope>/<kebab-name>" (spec/base.py).
NUMBERED_ID = re.compile(r"(?<![\w/.-])[a-z_][a-z0-9_-]*/c[1-9][0-9]*(?![\w-])")


def _statements() -> dict[str, dict[str, str]]:
    """{id: {entry primitive: statement}} over every entry."""
    out: dict[str, dict[str, str]] = {}
    for name, entry in spec.semantics().items():
        for sid, text in entry.edge_cases.items():
            out.setdefault(sid, {})[name] = text
    return out


def _error_messages(path: pathlib.Path):
    """The string constants of a module's errors: of its raise statements and of the calls that
    build an error (``eqn.unsupported(...)``, ``...Error(...)``, possibly returned by a helper)."""
    for node in ast.walk(ast.parse(path.read_text())):
        callee = node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            else getattr(node.func, "id", "") if isinstance(node, ast.Call) else ""
        if isinstance(node, ast.Raise) or callee == "unsupported" or callee.endswith("Error"):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    yield sub.value


def _cited_by_the_reference() -> dict[str, set[str]]:
    """{id: files of interp/ whose errors cite it}: known ids, and anything shaped like a numbered
    one (a typo must not pass as prose)."""
    known = set(_statements())
    pattern = re.compile("|".join(sorted((re.escape(i) for i in known), key=len, reverse=True))
                         + "|" + NUMBERED_ID.pattern)
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / "interp").rglob("*.py")):
        for text in _error_messages(path):
            for m in pattern.finditer(text):
                out.setdefault(m.group(0), set()).add(str(path.relative_to(ROOT)))
    return out


def _test_names() -> set[str]:
    names = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                names.add(node.name)
    return names


def test_the_spec_families_are_the_rule_families():
    assert sorted(spec.families()) == sorted(interp.rules.FAMILIES)


def test_every_registered_rule_has_one_entry_and_every_entry_names_a_rule():
    entries, aliases = spec.semantics(), spec.aliases()
    registered = set(RULES) | set(EXTENDED_RULES)
    assert not set(entries) & set(aliases), "a name is an entry and an alias"
    assert sorted(registered - set(entries) - set(aliases)) == [], "rules without a spec entry"
    assert sorted(set(entries) - registered) == [], "spec entries that name no registered rule"
    assert sorted(set(aliases) - registered) == [], "aliases that name no registered rule"
    for name, target in aliases.items():
        assert target in entries, (name, target)
        assert RULES[name] is RULES[target], f"{name} is no other spelling of {target}: another rule"


def test_each_entry_is_in_the_spec_module_of_its_rules_family():
    import importlib
    family_of = {name: family for family in spec.families()
                 for name in importlib.import_module(f"spec.{family}").SEMANTICS}
    for family in spec.families():
        family_of.update(dict.fromkeys(getattr(importlib.import_module(f"spec.{family}"), "ALIASES", {}),
                                       family))
    module = {name: inspect.unwrap(rule).__module__ for name, rule in RULES.items()}
    wrong = {name: (family_of[name], module[name]) for name in RULES
             if module[name] != f"interp.rules.{family_of[name]}"}
    assert wrong == {}, "spec entry in another family than its rule (spec family, rule module)"


def test_statement_ids_are_well_formed_and_one_text_each():
    for sid, texts in _statements().items():
        assert len(set(texts.values())) == 1, f"{sid} stands for several statements: {sorted(texts)}"


def test_ids_the_spec_refers_to_exist():
    known = set(_statements())
    scopes = {sid.split("/")[0] for sid in known if not re.fullmatch(r"c[0-9]+", sid.split("/")[1])}
    shared = re.compile(rf"(?<![\w/.-])(?:{'|'.join(sorted(scopes))})/[a-z0-9]+(?:-[a-z0-9]+)*(?![\w-])")
    texts = [t for entry in spec.semantics().values()
             for t in (entry.summary, entry.notes, *entry.edge_cases.values())]
    dangling = {m.group(0) for t in texts for p in (NUMBERED_ID, shared) for m in p.finditer(t)} - known
    assert dangling == set()


def test_every_id_the_reference_cites_is_in_the_spec_and_in_a_test_name():
    known, cited, tests = set(_statements()), _cited_by_the_reference(), _test_names()
    spec_text = "\n".join(p.read_text() for p in (ROOT / "spec").glob("*.py"))
    assert {i: f for i, f in cited.items() if i not in known} == {}, "cited ids the spec does not have"
    assert sorted(i for i in cited if f'"{i}"' not in spec_text) == [], \
        "ids not written out in spec/ (grep would not find the statement)"
    untested = {}
    for sid in cited:
        label = re.sub(r"[/-]", "_", sid)
        if not any(re.search(rf"(?:^|_){re.escape(label)}(?:_|$)", name) for name in tests):
            untested[sid] = sorted(cited[sid])
    assert untested == {}, "ids cited by the reference that no test carries in its name"


@pytest.mark.parametrize("name", ["pjit", "checkpoint", "mutable_array"])
def test_an_alias_resolves_to_its_entry_in_the_compliance_modes(name):
    import numpy as np

    from spec import compliance
    target = spec.aliases()[name]
    assert (compliance.mode_for_primitive(name, np.float32)
            == compliance.mode_for_primitive(target, np.float32))
