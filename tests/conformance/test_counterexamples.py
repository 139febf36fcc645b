"""Self-checking counterexamples: a failure's snippet exits 1 while the backend still fails and 0 once it is fixed,
and a call on a captured buffer view replays on that view, not on a copy."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = TESTS / "support"


@functools.cache
def _snippet(backend: str, prop: str, examples: int) -> str:
    report = run_conformance(f"runs_backends:{backend}", examples=examples, seed=0, properties=select([prop]),
                             shrink=False)  # the first failing example, as found: quicker, and replays the same
    assert report.results[0].status == "failed", report.results[0]
    return report.results[0].counterexample


def _exit_status(snippet: str) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", snippet], cwd=TESTS.parent, env=env, capture_output=True,
                          timeout=300).returncode


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "prop", "examples"), [("DecodeOnePageOn", "decode_locs", 20),
                                                           ("ReanchorOneRowOn", "graph/protocol", 400)])
def test_the_snippet_exits_1_while_it_fails_and_0_once_fixed(backend: str, prop: str, examples: int) -> None:
    snippet = _snippet(backend, prop, examples)
    assert "sys.exit(reproduce(" in snippet
    assert _exit_status(snippet) == 1
    assert _exit_status(snippet.replace(f"'runs_backends:{backend}'", "'torch'")) == 0


def test_a_call_on_a_captured_view_replays_on_the_view() -> None:
    snippet = _snippet("ReanchorOneRowOn", "graph/protocol", 400)
    assert "out = backend.reanchor_locs(view, " in snippet  # the view itself, not torch.tensor(...) of its values
    namespace: dict = {}
    exec(compile(snippet.split("# FAILED:")[0], "<counterexample>", "exec"), namespace)  # our own rendering
    # the failing call's recorded result (a wrong location or a write off its page, whichever the search met
    # first), again on the view
    got = re.findall(r"^\s*out = backend\.reanchor_locs\(view, .*\n\s*#\s+-> (\[[-\d, ]*\])", snippet, flags=re.M)
    assert got and namespace["out"].tolist() == eval(got[-1])
