"""kvtable/internals.py: every private Hypothesis and Triton symbol kvtable uses is where the pinned versions keep
it, a moved one is named loudly, and no module reaches into those internals except through it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from kvtable import internals

ROOT = Path(__file__).resolve().parents[2]
PRIVATE_USE = re.compile(r"hypothesis\.internal|_hypothesis_internal|triton\.runtime|triton\._")


def test_every_private_symbol_is_where_the_pinned_versions_keep_it() -> None:
    assert internals.missing() == [], "\n".join(internals.missing())


def test_a_moved_symbol_is_named_with_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(internals.PRIVATE, "ConjectureResult",
                        ("hypothesis.internal.conjecture.data", "ConjectureResultMoved", ()))
    monkeypatch.setitem(internals.PRIVATE, "mangle_type", ("triton.runtime.jit", "mangle_type", ("no_such_member",)))
    problems = internals.missing()
    assert any("hypothesis.internal.conjecture.data.ConjectureResultMoved is gone in hypothesis" in p
               and "hypothesis>=6.170,<7" in p for p in problems), problems
    if importlib.util.find_spec("triton") is not None:
        assert any("triton.runtime.jit.mangle_type.no_such_member is gone in triton" in p for p in problems)
    with pytest.raises(internals.MovedInternal, match="ConjectureResultMoved is gone"):
        internals.private("ConjectureResult")


def test_the_database_key_lands_where_hypothesis_reads_it() -> None:
    def test() -> None: ...
    internals.set_database_key(test, b"kvtable:x")
    assert test._hypothesis_internal_database_key == b"kvtable:x"  # the attribute name Hypothesis 6.170 reads


def test_no_module_reaches_into_hypothesis_or_triton_internals_but_through_kvtable_internals() -> None:
    sources = [p for folder in ("kvtable", "prover", "impl", "bench", "reference", "spec")
               for p in (ROOT / folder).rglob("*.py") if p.name != "internals.py"]
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in sources
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if PRIVATE_USE.search(line.split("#")[0]) and "import" in line]
    assert offenders == []
