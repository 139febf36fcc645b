"""A failure's counterexample as a pasteable snippet: the recorded calls, the verdict, the lines that re-judge it.

The snippet's last lines call ``kvtable.conformance.reproduce.reproduce`` on Hypothesis' ``@reproduce_failure``
blob of the example (``blob_of``): they exit 1 while the backend still breaks the clause, 0 once fixed.
"""

from __future__ import annotations

import re

from kvtable.conformance.core import Context

__all__ = ["Blob", "blob_of", "counterexample", "counterexample_text", "verdict_lines"]

Blob = tuple[str, bytes]
"""Hypothesis' version and the choice sequence of one example, as ``@reproduce_failure`` takes them."""
_BLOB = re.compile(r"@reproduce_failure\('([^']+)', (b'[A-Za-z0-9+/=]*')\)")


def blob_of(err: BaseException) -> Blob | None:
    """The reproduce-failure blob Hypothesis attached to a failure's notes (``print_blob``), if any."""
    for note in getattr(err, "__notes__", ()):
        if found := _BLOB.search(note):
            return found[1], found[2][2:-1].encode()
    return None


def verdict_lines(prop: str, spec: str, profile: str, level: str, blob: Blob) -> str:
    """The snippet's last lines: re-judge the example, exit 1 while it still fails."""
    return ("import sys\nfrom kvtable.conformance.reproduce import reproduce\n"
            f"sys.exit(reproduce({prop!r}, {spec!r}, profile={profile!r}, level={level!r}, blob={blob!r}))")


def counterexample(ctx: Context, spec: str, err: BaseException, prop: str, level: str) -> str:
    """The snippet of the example ``ctx``'s transcript holds, which failed with ``err``."""
    blob = blob_of(err)
    check = verdict_lines(prop, spec, ctx.profile.name, level, blob) if blob is not None else ""
    return counterexample_text(spec, ctx.transcript.text(), f"FAILED: {err}", check)


def counterexample_text(spec: str, transcript: str, verdict: str, check: str = "") -> str:
    """A replayable snippet: the imports and backends, the recorded calls (a call that raises ends them, as a
    crash would), the verdict as a comment, then ``check``: lines that re-judge the example and exit 1 while
    it still fails (0 once fixed)."""
    comment = "\n".join(f"# {line}" for line in verdict.splitlines())
    calls = "\n".join(f"    {line}" for line in _guarded(transcript.splitlines() or ["pass"]))
    body = (f"try:\n{calls}\nexcept Exception as err:  # the verdict below decides whether this is the failure\n"
            "    print(f'the calls stopped at {type(err).__name__}: {err}')")
    return "\n".join(part for part in (_header(spec, "debug_backend" in transcript), body, comment, check) if part)


def _header(spec: str, debug: bool) -> str:
    lines = ["import torch", "from kvtable.backends import load",
             "from kvtable.backends.protocol import AllocState, SwaPool",
             "from kvtable.reference import Batch, GroupSpec",
             f"backend = load({spec!r}, debug=False)"]
    if debug:
        lines.append(f"debug_backend = load({spec!r}, debug=True)")
    return "\n".join(lines)


def _guarded(lines: list[str]) -> list[str]:
    """The transcript's lines, each call that raised when recorded in its own ``try`` (a refusal goes on)."""
    out: list[str] = []
    for line, after in zip(lines, [*lines[1:], ""], strict=True):
        if after.startswith("#   raised ") and not line.startswith("#"):
            out += ["try:", f"    {line}", "except Exception as err:",
                    "    print(f'raised {type(err).__name__}: {err}')"]
        else:
            out.append(line)
    return out
