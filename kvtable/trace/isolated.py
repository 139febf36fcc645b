"""``trace record`` in a worker process: a backend that crashes or hangs is a verdict at the step, not a lost run.

The worker (from the conformance suite's forkserver context: never forked from a parent that touched CUDA)
loads the backend and runs the serving-loop simulator; each step it records is sent to the parent, which
writes the trace, and each backend call is announced before it is made. When the worker dies (a segfault, an
abort) or goes silent for ``timeout`` seconds, the parent holds every step recorded before the call that took
it down: the trace is kept, not closed (cut, judged to its last whole step), and the verdict names the step
and the call.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from kvtable import interrupts
from kvtable.contract import GroupSpec
from kvtable.exitcodes import UsageError
from kvtable.trace.recorder import Recorder
from kvtable.trace.store import MemoryWriter

CRASH = "CRASH"
TIMEOUT = "TIMEOUT"
ERROR = "ERROR"


@dataclass(frozen=True)
class RecordJob:
    """What the worker simulates (picklable)."""

    backend: str
    debug: bool
    route: str
    profile: str
    steps: int
    seed: int
    faults: float
    page_size: int
    pool_pages: int


@dataclass
class Outcome:
    """How the recording ended: the steps written, the largest slot chosen, and the verdict if the backend
    stopped the run (``CRASH``, ``TIMEOUT``, or ``ERROR``: the simulator's call raised outside a watched call)."""

    steps: int = 0
    injected: int = 0
    largest_slot: int | None = None
    verdict: str | None = None
    why: str = ""
    calling: str = ""


class _PipeWriter(MemoryWriter):
    """The worker's side of the trace: each step's line and arrays go to the parent, which writes them."""

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self.conn = conn

    def add(self, line: dict[str, Any], arrays: Mapping[str, np.ndarray | None],
            tables: Mapping[str, np.ndarray] | None = None) -> None:
        self.conn.send(("step", line, arrays, tables))


def _serve(conn: Connection, job: RecordJob, groups: tuple[GroupSpec, ...]) -> None:
    """The worker: load the backend, then simulate ``job.steps`` iterations, announcing each backend call."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    from kvtable.backends import load
    from kvtable.trace import watching

    try:
        backend = load(job.backend, debug=True if job.debug else None)
    except Exception as err:
        conn.send(("fatal", str(err).strip("'\"")))
        return
    conn.send(("ready",))
    watching.announce = lambda call: conn.send(("calling", call))
    recorder = Recorder(None, profile=job.profile, groups=groups)
    recorder.writer = _PipeWriter(conn)
    try:
        _simulate(backend, recorder, job, groups)
    except Exception as err:
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("done",))


def _simulate(backend: Any, recorder: Recorder, job: RecordJob, groups: tuple[GroupSpec, ...]) -> None:
    from kvtable.trace.allocation import AllocSimulator
    from kvtable.trace.simulate import SimConfig, simulate

    if job.route == "locations":
        simulate(backend, recorder, job.steps, seed=job.seed, config=SimConfig(groups=groups, faults=job.faults),
                 profile=job.profile)
        return
    sim = AllocSimulator(backend, recorder, seed=job.seed, page_size=job.page_size, pool_pages=job.pool_pages,
                         faults=job.faults)
    for _ in range(job.steps):
        sim.step()


def _largest(arrays: dict[str, np.ndarray | None], now: int | None) -> int | None:
    """The largest slot among a step's chosen or computed locations, and ``now``."""
    for name, value in arrays.items():
        if value is not None and value.size and (name == "locs" or name.endswith("/locs")):
            top = int(np.asarray(value).max())
            now = top if now is None else max(now, top)
    return now


def record_isolated(job: RecordJob, recorder: Recorder, groups: tuple[GroupSpec, ...], timeout: float) -> Outcome:
    """Run ``job`` in a worker, writing its steps through ``recorder`` (closed when the run ends whole; left cut
    when the backend stopped it or on Ctrl-C, which is re-raised once the trace is flushed)."""
    from kvtable.conformance.isolation import worker_context

    context = worker_context()
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(child, job, groups), daemon=True, name="kvtable-record")
    process.start()
    child.close()
    outcome = Outcome()
    try:
        with interrupts.deferred():  # Ctrl-C is taken between messages, never inside a write of the trace
            _listen(parent, process, recorder, outcome, timeout)
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        parent.close()
        if outcome.verdict is None and not interrupts.pending():
            recorder.close()
        else:
            recorder.writer.flush()
    return outcome


def _listen(conn: Connection, process: Any, recorder: Recorder, outcome: Outcome, timeout: float) -> None:
    """Write what the worker sends until it is done, dies or goes silent (then ``outcome.verdict`` says which)."""
    from kvtable.conformance.isolation import exit_reason

    heard, ready = time.monotonic(), False
    while True:
        interrupts.check()
        message = _receive(conn)
        if message is not None:
            heard = time.monotonic()
            if message[0] == "ready":
                ready = True
            elif _handle(message, recorder, outcome):
                return
            continue
        if conn.closed or not process.is_alive():  # the worker died: its last words were read
            process.join(timeout=5)
            why = exit_reason(process.exitcode)
            if not ready:
                raise UsageError(f"backend: {why.replace('the worker process', 'its worker')} while loading")
            outcome.verdict, outcome.why = CRASH, f"the backend {why}"
            return
        if time.monotonic() - heard > timeout:
            if not ready:
                raise UsageError(f"backend: loading it gave no sign of life for {timeout:g} s (killed)")
            outcome.verdict, outcome.why = TIMEOUT, f"the backend gave no sign of life for {timeout:g} s (killed)"
            return


def _receive(conn: Connection) -> tuple[Any, ...] | None:
    """The worker's next message within a second, or None (the pipe closed: the worker is gone)."""
    if conn.closed or not conn.poll(1.0):
        return None
    try:
        message: tuple[Any, ...] = conn.recv()
        return message
    except (EOFError, ConnectionResetError):
        conn.close()
        return None


def _handle(message: tuple[Any, ...], recorder: Recorder, outcome: Outcome) -> bool:
    """Take one message from the worker; True when the run is over (done, or the simulator raised)."""
    kind = message[0]
    if kind == "step":
        _, line, arrays, tables = message
        recorder.writer.add(line, arrays, tables)
        outcome.steps += 1
        outcome.injected += line.get("injected") is not None
        outcome.largest_slot = _largest(arrays, outcome.largest_slot)
        outcome.calling = ""
    elif kind == "calling":
        outcome.calling = message[1]
    elif kind == "fatal":
        raise UsageError(message[1])
    elif kind == "error":
        outcome.verdict, outcome.why = ERROR, f"the simulator's call raised {message[1]}"
    return kind in ("done", "error")
