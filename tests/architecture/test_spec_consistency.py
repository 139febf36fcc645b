"""One clause, one name: SPEC.md, the clause registry and the reference agree, and so do README and CI."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from kvtable import ContractViolation
from kvtable.conformance.properties import PROPERTIES
from kvtable.prover.obligations.registry import OBLIGATIONS
from kvtable.spec.clauses import CLAUSES, clause_label

ROOT = Path(__file__).resolve().parents[2]
SPEC = (ROOT / "spec" / "SPEC.md").read_text()
HEADINGS = re.findall(r"^### ([A-Z]\d+ [a-z0-9-]+)$", SPEC, flags=re.M)


def _resolve(dotted: str) -> object:
    module_name, _, attr_path = dotted.partition(".")
    target: object = importlib.import_module(f"kvtable.reference.{module_name}")
    for attr in attr_path.split("."):
        target = getattr(target, attr)
    return target


def test_every_clause_has_a_spec_heading_and_no_heading_is_unregistered() -> None:
    assert HEADINGS == [c.label for c in CLAUSES]


def _carried_by(clause, what: str) -> str:
    """The clause's ``- **Reference** ...`` (or Proved by / Tested by) line in SPEC.md, or ''."""
    section = SPEC.split(f"### {clause.label}\n", 1)[1].split("\n### ", 1)[0]
    return next((line for line in section.splitlines() if line.startswith(f"- **{what}**")), "")


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.label)
def test_clause_reference_function_exists_and_is_named_in_spec(clause) -> None:
    assert callable(_resolve(clause.reference))
    named = re.findall(r"`([a-z_]+\.[A-Za-z0-9_.]+)`", _carried_by(clause, "Reference"))
    assert clause.reference in named
    for dotted in named:
        assert callable(_resolve(dotted)), dotted


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.label)
def test_spec_lists_exactly_the_clause_obligations(clause) -> None:
    listed = re.findall(r"`([^`]+)`", _carried_by(clause, "Proved by"))
    assert listed == [o.name for o in OBLIGATIONS if o.clause == clause.id]


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.label)
def test_spec_lists_exactly_the_clause_properties(clause) -> None:
    line = _carried_by(clause, "Tested by")
    assert line, f"{clause.label} names no test"
    properties = line.split("properties ", 1)[1].split(";")[0] if "properties " in line else ""
    assert re.findall(r"`([^`]+)`", properties) == [p.name for p in PROPERTIES if p.clause == clause.id]


def test_violations_render_the_clause_label_and_location() -> None:
    err = ContractViolation("T2", "dummy row holds 5", group="full", row=2, col=0)
    assert str(err) == "[T2 dummy-row] group 'full' row 2 col 0: dummy row holds 5"
    assert (err.clause_id, err.clause) == ("T2", "T2 dummy-row")
    assert isinstance(err, ValueError)


def test_unknown_clause_ids_are_refused() -> None:
    with pytest.raises(KeyError, match="no clause 'T99'"):
        clause_label("T99")


def test_ci_runs_the_readme_test_command_with_every_tier() -> None:
    ci_command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    readme = (ROOT / "README.md").read_text()
    assert f"\n{ci_command}\n" in readme
    assert ci_command.endswith(" -m pytest --slow -n 2")


def test_every_obligation_name_spec_lists_is_written_literally_in_its_family_module() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "prover" / "obligations").glob("*.py"))
    listed = re.findall(r"^- \*\*Proved by\*\* (.*)$", SPEC, flags=re.M)
    names = [name for line in listed for name in re.findall(r"`([^`]+)`", line)]
    assert len(names) == len(OBLIGATIONS)
    assert [name for name in names if f'"{name}"' not in source] == []


def test_the_repository_cites_no_document_outside_itself() -> None:
    files = [p for p in ROOT.rglob("*") if p.suffix in (".py", ".md", ".toml") and ".venv" not in p.parts
             and "build" not in p.parts and not any(part.endswith(".egg-info") for part in p.parts)]
    ours = {p.name for p in files}
    cited = {(p.relative_to(ROOT).as_posix(), doc) for p in files
             for doc in re.findall(r"[A-Za-z0-9_-]+\.md\b", p.read_text(errors="replace"))}
    assert sorted((where, doc) for where, doc in cited if doc not in ours) == []
    absolute = sorted(p.relative_to(ROOT).as_posix() for p in files
                      if re.search(r"(?<![\w.])/(work|home|tmp|mnt)/", p.read_text(errors="replace")))
    assert absolute == []


def _resolve_impl(dotted: str) -> object:
    """``impl.module.attr[.attr]`` under ``kvtable``: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module("kvtable." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            target = getattr(target, attr)
        return target
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.label)
def test_every_clause_names_the_impl_code_that_carries_it_and_that_code_exists(clause) -> None:
    named = re.findall(r"`(impl\.[A-Za-z0-9_.]+)`", _carried_by(clause, "Implemented by"))
    assert named, f"{clause.label} has no Implemented by line"
    assert [dotted for dotted in named if not callable(_resolve_impl(dotted))] == []


def test_every_property_name_spec_lists_is_written_literally_in_the_conformance_code() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "kvtable" / "conformance").rglob("*.py"))
    listed = [name for clause in CLAUSES
              for name in re.findall(r"`([^`]+)`", _carried_by(clause, "Tested by").split("properties ", 1)[-1]
                                     .split(";")[0]) if "properties " in _carried_by(clause, "Tested by")]
    assert sorted(listed) == sorted(p.name for p in PROPERTIES)
    assert [name for name in listed if f'"{name}"' not in source] == []
