"""``trace record`` in a worker process: a backend or engine that crashes or hangs is a verdict at the step, not a
lost run.

The worker (from the conformance suite's forkserver context: never forked from a parent that touched CUDA)
loads the backend and runs the serving-loop simulator (``RecordJob``), or runs an engine integration's own
``record`` (``EngineJob``: ``trace record --engine``), whose ``Recorder`` hands its header to the parent
(``recorder.sink``); each step recorded is sent to the parent, which writes the trace, and each backend call is
announced before it is made. When the worker dies (a segfault, an abort) or goes silent for ``timeout`` seconds,
the parent holds every step recorded before the call that took it down: the trace is kept, not closed (cut,
judged to its last whole step), and the verdict names the step and the call.
"""

from __future__ import annotations

import importlib
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from kvtable import interrupts
from kvtable.contract import GroupSpec
from kvtable.exitcodes import UsageError
from kvtable.trace.recorder import Recorder
from kvtable.trace.store import MemoryWriter, TraceWriter

CRASH = "CRASH"
TIMEOUT = "TIMEOUT"
ERROR = "ERROR"
ENGINE_LOAD_S = 600.0
"""How long an engine's worker may stay silent before its first step's header (importing and configuring vLLM
or SGLang on a busy 2-core machine takes minutes); ``--timeout`` holds from then on."""


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

    @property
    def what(self) -> str:
        return "backend"


@dataclass(frozen=True)
class EngineJob:
    """An engine integration's own run (picklable): ``module.record(out, steps=, seed=, fault=)``."""

    name: str
    module: str
    """The integration module (``kvtable.engines.vllm``), imported in the worker."""
    out: str
    steps: int
    seed: int
    fault: str | None

    @property
    def what(self) -> str:
        return f"engine {self.name}"


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
    summary: Any = None
    """An engine run's ``RunSummary``, when it ended whole."""
    skipped: str = ""
    """Why an engine run was skipped (the engine is not installed in the worker's environment)."""

    def stopped(self, out: object) -> str:
        """The verdict line of a run the backend or engine stopped, naming the step and the call."""
        call = f" in {self.calling}" if self.calling else ""
        return (f"{self.verdict} at step {self.steps}{call}: {self.why}; the {self.steps} steps before it are kept, "
                f"the trace cut there (kvtable trace check {out})")


class _PipeWriter(MemoryWriter):
    """The worker's side of the trace: each step's line and arrays go to the parent, which writes them."""

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self.conn = conn

    def add(self, line: dict[str, Any], arrays: Mapping[str, np.ndarray | None],
            tables: Mapping[str, np.ndarray] | None = None) -> None:
        self.conn.send(("step", line, arrays, tables))


def _serve(conn: Connection, job: RecordJob | EngineJob, groups: tuple[GroupSpec, ...]) -> None:
    """The worker: load the backend, then simulate ``job.steps`` iterations, announcing each backend call (or run
    the engine's own ``record``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    if isinstance(job, EngineJob):
        _serve_engine(conn, job)
        return
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
        conn.send(("error", f"the simulator's call raised {type(err).__name__}: {err}"))
        return
    conn.send(("done",))


def _serve_engine(conn: Connection, job: EngineJob) -> None:
    """The worker of an engine run: its ``Recorder`` sends the header (then ``ready``) and every step here."""
    from kvtable.engines import EngineUnavailable
    from kvtable.trace import recorder

    def sink(header: dict[str, Any], steps_per_chunk: int, fsync: bool) -> _PipeWriter:
        conn.send(("header", header, steps_per_chunk, fsync))
        conn.send(("ready",))
        return _PipeWriter(conn)

    try:
        module = importlib.import_module(job.module)
    except Exception as err:
        conn.send(("fatal", f"{job.what}: {type(err).__name__}: {err}"))
        return
    recorder.sink = sink
    try:
        summary = module.record(job.out, steps=job.steps, seed=job.seed, fault=job.fault)
    except EngineUnavailable as err:
        conn.send(("skipped", str(err)))
        return
    except Exception as err:
        conn.send(("error", f"the engine's run raised {type(err).__name__}: {err}"))
        return
    conn.send(("done", summary))


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


Opener = Callable[[dict[str, Any], int, bool], TraceWriter]
"""Opens the trace of an engine run from its worker's header (the header, steps per chunk, fsync)."""


def record_isolated(job: RecordJob | EngineJob, writer: TraceWriter | MemoryWriter | Opener,
                    groups: tuple[GroupSpec, ...], timeout: float) -> Outcome:
    """Run ``job`` in a worker, writing its steps through ``writer`` (or, an engine run, the one ``writer`` opens
    from the header the worker sends): closed when the run ends whole; left cut when the backend or engine
    stopped it or on Ctrl-C, which is re-raised once the trace is flushed."""
    from kvtable.conformance.isolation import worker_context

    context = worker_context()
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(child, job, groups), daemon=True, name="kvtable-record")
    process.start()
    child.close()
    trace = _Trace(None, writer) if callable(writer) else _Trace(writer)
    outcome = Outcome()
    try:
        with interrupts.deferred():  # Ctrl-C is taken between messages, never inside a write of the trace
            _listen(parent, process, trace, outcome, timeout, job.what)
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        parent.close()
        if trace.writer is not None:
            if outcome.verdict is None and not outcome.skipped and not interrupts.pending():
                trace.writer.close()
            else:
                trace.writer.flush()
    return outcome


@dataclass
class _Trace:
    """The parent's side of the trace: its writer, or (an engine run, until its header comes) how to open it."""

    writer: TraceWriter | MemoryWriter | None
    opener: Opener | None = None


def _listen(conn: Connection, process: Any, trace: _Trace, outcome: Outcome, timeout: float, what: str) -> None:
    """Write what the worker sends until it is done, dies or goes silent (then ``outcome.verdict`` says which);
    an engine's worker may load for up to ``ENGINE_LOAD_S`` before its first sign of being ready."""
    from kvtable.conformance.isolation import exit_reason

    heard, ready = time.monotonic(), False
    loading = max(timeout, ENGINE_LOAD_S) if trace.opener is not None else timeout
    while True:
        interrupts.check()
        message = _receive(conn)
        if message is not None:
            heard = time.monotonic()
            if message[0] == "ready":
                ready = True
            elif _handle(message, trace, outcome):
                return
            continue
        if conn.closed or not process.is_alive():  # the worker died: its last words were read
            process.join(timeout=5)
            why = exit_reason(process.exitcode)
            if not ready:
                raise UsageError(f"{what}: {why.replace('the worker process', 'its worker')} while loading")
            outcome.verdict, outcome.why = CRASH, f"the {what} {why}"
            return
        if time.monotonic() - heard > (timeout if ready else loading):
            if not ready:
                raise UsageError(f"{what}: loading it gave no sign of life for {loading:g} s (killed)")
            outcome.verdict, outcome.why = TIMEOUT, f"the {what} gave no sign of life for {timeout:g} s (killed)"
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


def _handle(message: tuple[Any, ...], trace: _Trace, outcome: Outcome) -> bool:
    """Take one message from the worker; True when the run is over (done, skipped, or the run raised)."""
    kind = message[0]
    if kind == "header":
        _, header, steps_per_chunk, fsync = message
        assert trace.opener is not None and trace.writer is None, "a header from a run whose trace is open"
        trace.writer = trace.opener(header, steps_per_chunk, fsync)
    elif kind == "step":
        _, line, arrays, tables = message
        assert trace.writer is not None, "a step before the run's header"
        trace.writer.add(line, arrays, tables)
        outcome.steps += 1
        outcome.injected += line.get("injected") is not None
        outcome.largest_slot = _largest(arrays, outcome.largest_slot)
        outcome.calling = ""
    elif kind == "calling":
        outcome.calling = message[1]
    elif kind == "fatal":
        raise UsageError(message[1])
    elif kind == "error":
        outcome.verdict, outcome.why = ERROR, message[1]
    elif kind == "skipped":
        outcome.skipped = message[1]
    elif kind == "done" and len(message) > 1:
        outcome.summary = message[1]
    return kind in ("done", "error", "skipped")
