"""One example-database entry per (property, backend, profile, level): a run of one backend never deletes
another's failures, and a rerun of a failing backend finds its saved failure in its first examples."""

from __future__ import annotations

from pathlib import Path

import fakeredis
import pytest
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase, InMemoryExampleDatabase
from hypothesis.extra.redis import RedisExampleDatabase

from kvtable.conformance.database import database_prefix
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance

pytestmark = pytest.mark.slow  # fuzz runs against a database, several per test

BROKEN = "runs_backends:RareDecodeBug"
REPLAY = 5
"""A find within this many examples is a replay: seed 0 needs hundreds to find RareDecodeBug from scratch (how many
varies with the modules imported before Hypothesis first draws: it takes its pool of constants from them)."""


def _run(backend: str, database: ExampleDatabase, examples: int = 500, **kwargs) -> tuple[str, int]:
    report = run_conformance(backend, examples=examples, seed=0, properties=select(["decode_locs"]), database=database,
                             shrink=False, **kwargs)
    return report.results[0].status, report.results[0].examples


def _directory(tmp_path: Path) -> ExampleDatabase:
    return DirectoryBasedExampleDatabase(tmp_path / "db")


def _redis(_tmp_path: Path) -> ExampleDatabase:
    return RedisExampleDatabase(fakeredis.FakeRedis())


@pytest.mark.parametrize("make", [_directory, _redis], ids=["directory", "redis"])
def test_torch_then_broken_then_torch_then_broken_finds_it_within_5(make, tmp_path: Path) -> None:
    database = make(tmp_path)
    assert _run("torch", database, 20) == ("passed", 20)  # replays its own entries only: deletes none of BROKEN's
    status, fresh = _run(BROKEN, database)
    assert status == "failed" and fresh > REPLAY
    assert _run("torch", database, 20) == ("passed", 20)
    status, examples = _run(BROKEN, database)
    assert status == "failed" and examples <= REPLAY


def test_profile_and_level_key_their_own_entries() -> None:
    database = InMemoryExampleDatabase()
    status, fresh = _run(BROKEN, database)
    assert status == "failed" and fresh > REPLAY
    status, examples = _run(BROKEN, database, profile="tokenspeed")
    assert status == "failed" and examples > REPLAY  # found afresh: the kvtable profile's entry is not replayed
    saved = [key for key, values in database.data.items() if values]
    for profile in ("kvtable", "tokenspeed"):
        assert any(key.startswith(database_prefix(BROKEN, profile, "correct")) for key in saved), profile
    assert database_prefix("a", "p", "safety") != database_prefix("a", "p", "correct")
