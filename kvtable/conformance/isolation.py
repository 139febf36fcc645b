"""Properties in worker processes: a crash or a hang is a verdict for that property, and the run goes on.

A backend's kernel can take its process down: a segfault in a Triton kernel, a CUDA device-side assert
(the illegal memory access this suite hunts), which poisons every later CUDA call of the process, or
a hang. ``run_isolated`` runs each property in a worker process (multiprocessing's ``forkserver``
context: workers are forked from a server that imported kvtable but never touched CUDA; fork from
the parent, which may have, is unsafe with torch). The worker streams each backend call to the parent
before making it, so when the worker dies the parent still holds the example being run: the property
gets a ``crash`` verdict (a ``timeout`` one when no word came for ``timeout`` seconds) with that
example as its counterexample, and a fresh worker takes the next property. ``workers`` > 1 spreads the
properties over that many processes by the same mechanism. Each call also carries the worker's resident
memory: a backend whose memory grows past ``max_memory_growth`` bytes across a property's examples is a
``memory`` verdict naming the call, and the worker is replaced (a leak is not left to take the machine down).

The example database stays in the parent: workers reach it through the pipe (``_PipeDatabase``), so
any database (a directory, Redis, an in-memory one in tests) works with any number of workers, and a
database failure is raised in the parent as the usage error it is.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from hypothesis.database import ExampleDatabase

from kvtable import interrupts
from kvtable.conformance.budget import Budget
from kvtable.conformance.checks import Transcript
from kvtable.conformance.context import make_context
from kvtable.conformance.core import Context
from kvtable.conformance.counterexample import counterexample_text
from kvtable.conformance.database import DatabaseFailed
from kvtable.conformance.execute import run_property
from kvtable.conformance.levels import SAFETY
from kvtable.conformance.memory import MEMORY, Growth, resident_bytes
from kvtable.conformance.options import DEFAULT_MAX_MEMORY_GROWTH, DEFAULT_TIMEOUT_S
from kvtable.conformance.preflight import check_backend
from kvtable.conformance.properties import BY_NAME, Property
from kvtable.conformance.result import PropertyResult
from kvtable.conformance.sanitize import sanitizing
from kvtable.exitcodes import UsageError
from kvtable.spec.clauses import clause_label

__all__ = ["CRASH", "MEMORY", "TIMEOUT", "WorkerSetup", "process_pool", "run_isolated", "start_server"]

CRASH = "crash"
TIMEOUT = "timeout"
POISONED = ("CUDA error", "device-side assert", "illegal memory access")
"""An error naming one of these left the worker's CUDA context unusable: a crash, and a fresh worker."""
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload([__name__])


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker builds its property context from (picklable: sent to each new worker)."""

    backend: Any
    """A ``load`` name, a factory or an instance, as ``make_context`` takes it."""
    profile: str
    seed: int
    shrink: bool
    database: bool
    """Whether the parent holds an example database the worker reaches through the pipe."""
    level: str = "correct"
    """The verdict level (``levels.LEVELS``) each property is judged at."""
    sanitize: bool = False
    """``--sanitize``: the worker bounds-checks every Triton interpreter launch (``sanitize.sanitizing``)."""


# -- the worker ---------------------------------------------------------------------------------


class _StreamingTranscript(Transcript):
    """A transcript that sends each example's start and each call to the parent as it happens."""

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self.conn = conn

    def reset(self) -> None:
        super().reset()
        self.conn.send(("example",))

    def note(self, line: str) -> None:
        super().note(line)
        self.conn.send(("note", line))

    def calling(self, statement: str) -> None:
        self.conn.send(("calling", statement, resident_bytes()))


class _PipeDatabase(ExampleDatabase):
    """The parent's example database, reached through the worker's pipe."""

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self.conn = conn

    def _ask(self, op: str, *args: bytes) -> Any:
        self.conn.send(("db", op, args))
        ok, value = self.conn.recv()
        if not ok:
            raise DatabaseFailed(value)
        return value

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self._ask("fetch", key)

    def save(self, key: bytes, value: bytes) -> None:
        self._ask("save", key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self._ask("delete", key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._ask("move", src, dest, value)


def _serve(conn: Connection, setup: WorkerSetup) -> None:
    """A worker: build the context once, then run each property name the parent sends until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    try:
        # a backend named by a string is first touched here, never in the parent, and loaded once
        loaded = check_backend(setup.backend) if isinstance(setup.backend, str) else None
        ctx, spec = make_context(setup.backend, setup.profile, _StreamingTranscript(conn), loaded)
    except UsageError as err:
        conn.send(("fatal", str(err)))
        return
    except Exception as err:
        conn.send(("fatal", f"backend {setup.backend!r} cannot be loaded: {type(err).__name__}: {err}"))
        return
    with sanitizing() if setup.sanitize else nullcontext():
        _run_jobs(conn, setup, ctx, spec)


def _run_jobs(conn: Connection, setup: WorkerSetup, ctx: Context, spec: str) -> None:
    """Run each property name the parent sends until None."""
    database = _PipeDatabase(conn) if setup.database else None
    conn.send(("ready", spec))
    while (job := conn.recv()) is not None:
        name, examples, seconds = job
        try:
            result = run_property(BY_NAME[name], ctx, examples=examples, seed=setup.seed, spec=spec,
                                  database=database, shrink=setup.shrink, level=setup.level, seconds=seconds)
        except UsageError as err:
            conn.send(("fatal", str(err)))
            return
        conn.send(("result", result))


# -- the parent ---------------------------------------------------------------------------------


@dataclass
class _Job:
    prop: Property
    examples: int
    started: float = 0.0


@dataclass
class _Worker:
    """One worker process and what the parent knows of the property it is running."""

    process: Any
    conn: Connection
    spec: str = ""
    job: _Job | None = None
    lines: list[str] = field(default_factory=list)
    calling: str = ""
    examples: int = 0
    heard: float = field(default_factory=time.monotonic)
    growth: Growth = field(default_factory=Growth)
    """The worker's resident memory across this property's calls."""

    @property
    def ready(self) -> bool:
        return bool(self.spec)

    def assign(self, job: _Job, budget: Budget | None) -> None:
        self.job, self.lines, self.calling, self.examples, self.growth = job, [], "", 0, Growth()
        self.heard, job.started = time.monotonic(), time.perf_counter()
        self.conn.send((job.prop.name, job.examples, None if budget is None else budget.share(job.prop.name)))

    def stop(self, kill: bool = False) -> None:
        if not kill and self.process.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.process.join(timeout=2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _start(setup: WorkerSetup) -> _Worker:
    parent, child = _CONTEXT.Pipe()
    process = _CONTEXT.Process(target=_serve, args=(child, setup), daemon=True, name="kvtable-worker")
    process.start()
    child.close()
    return _Worker(process, parent)


def _lost(worker: _Worker, status: str, why: str, spec: str) -> PropertyResult:
    """The verdict for a property whose worker died or went silent: the example it was running."""
    job = worker.job
    assert job is not None
    lines = worker.lines + ([worker.calling, f"#   {why}"] if worker.calling else [f"# {why}"])
    call = worker.calling.partition(" = ")[2] or worker.calling
    message = (f"the backend {why} during example {max(worker.examples, 1)}"
               + (f", in {call.partition('(')[0]}(...)" if call else ""))
    return PropertyResult(job.prop.name, clause_label(job.prop.clause), status, worker.examples,
                          time.perf_counter() - job.started, job.prop.debug, message,
                          counterexample_text(spec, "\n".join(lines), f"{status.upper()}: {message}"),
                          clause_label(job.prop.clause), SAFETY)  # a crash or a hang is never safe


def _named(setup: WorkerSetup) -> str:
    """The backend as the user named it (a spec string), or its factory's name."""
    backend = setup.backend
    return repr(backend) if isinstance(backend, str) else repr(getattr(backend, "__qualname__", type(backend).__name__))


def exit_reason(exitcode: int | None) -> str:
    """How a worker process ended, in words (the signal that killed it, or its exit status)."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed the worker process ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"killed the worker process (signal {-exitcode})"
    return f"ended the worker process (exit status {exitcode})"


class _Pool:
    """Workers, their jobs and the parent's side of the pipe protocol."""

    def __init__(self, setup: WorkerSetup, size: int, timeout: float, database: ExampleDatabase | None,
                 max_memory_growth: int = DEFAULT_MAX_MEMORY_GROWTH, budget: Budget | None = None) -> None:
        self.setup, self.timeout, self.database, self.budget = setup, timeout, database, budget
        self.max_memory_growth = max_memory_growth
        self.workers = [_start(setup) for _ in range(size)]

    def run(self, jobs: deque[_Job]) -> Iterator[PropertyResult]:
        while jobs or any(w.job for w in self.workers):
            interrupts.check()
            for worker in self.workers:
                if worker.ready and worker.job is None and jobs:
                    worker.assign(jobs.popleft(), self.budget)
            wait([w.conn for w in self.workers] + [w.process.sentinel for w in self.workers], timeout=1.0)
            for i, worker in enumerate(self.workers):
                result = self._drain(worker)
                if not worker.ready and time.monotonic() - worker.heard > self.timeout:
                    worker.stop(kill=True)
                    raise UsageError(f"backend {_named(self.setup)}: loading it gave no sign of life for "
                                     f"{self.timeout:g} s (killed)")
                if result is None and worker.job and time.monotonic() - worker.heard > self.timeout:
                    worker.stop(kill=True)
                    result = _lost(worker, TIMEOUT, f"gave no sign of life for {self.timeout:g} s (killed)",
                                   worker.spec)
                if result is None:
                    continue
                worker.job = None
                if worker.conn.closed or result.status in (CRASH, MEMORY):
                    worker.stop(kill=True)
                    self.workers[i] = _start(self.setup)
                yield result

    def _drain(self, worker: _Worker) -> PropertyResult | None:
        """Read what ``worker`` sent; its result, or a crash verdict if it died while running a property."""
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                worker.heard = time.monotonic()
                result = self._handle(worker, message)
                if result is not None:
                    return result
        except (EOFError, ConnectionResetError):
            pass
        if worker.process.is_alive():
            return None
        worker.process.join()
        why = exit_reason(worker.process.exitcode)
        if worker.job is None:
            raise UsageError(f"backend {_named(self.setup)}: {why.replace('the worker process', 'its worker')} "
                             "while loading")
        worker.conn.close()
        return _lost(worker, CRASH, why, worker.spec)

    def _handle(self, worker: _Worker, message: tuple[Any, ...]) -> PropertyResult | None:
        kind = message[0]
        if kind == "note":
            worker.lines.append(message[1])
            worker.calling = ""
        elif kind == "calling":
            worker.calling = message[1]
            return self._watch_memory(worker, message[1], message[2])
        elif kind == "example":
            worker.lines, worker.calling = [], ""
            worker.examples += 1
        elif kind == "db":
            worker.conn.send(self._database(message[1], message[2]))
        elif kind == "ready":
            worker.spec = message[1]
        elif kind == "fatal":
            raise UsageError(message[1])
        elif kind == "result":
            result: PropertyResult = message[1]
            if not result.passed and any(mark in result.message for mark in POISONED):
                result.status, result.tier = CRASH, SAFETY  # the CUDA context is gone: a fresh worker runs the rest
            return result
        return None

    def _watch_memory(self, worker: _Worker, statement: str, resident: int) -> PropertyResult | None:
        """A ``memory`` verdict once the worker's resident memory grew past the bound since the property began,
        naming the operation whose calls gained the most."""
        grown = worker.growth.calling(statement, resident)
        if grown <= self.max_memory_growth or worker.job is None:
            return None
        return _lost(worker, MEMORY, worker.growth.why(grown, self.max_memory_growth, "killed"), worker.spec)

    def _database(self, op: str, args: tuple[bytes, ...]) -> tuple[bool, Any]:
        try:
            value = getattr(self.database, op)(*args)
            return True, list(value) if op == "fetch" else None
        except DatabaseFailed as err:
            return False, str(err)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop(kill=worker.job is not None)


def run_isolated(setup: WorkerSetup, properties: Sequence[Property], examples: Callable[[Property], int], *,
                 workers: int = 1, timeout: float = DEFAULT_TIMEOUT_S, database: ExampleDatabase | None = None,
                 max_memory_growth: int = DEFAULT_MAX_MEMORY_GROWTH, budget: Budget | None = None
                 ) -> Iterator[PropertyResult]:
    """Run ``properties`` in ``workers`` worker processes, yielding each result as it finishes (in any order);
    each property's share of a ``budget`` is fixed as a worker takes it.

    Raises ``UsageError`` when no worker can start or the database fails. The workers are stopped when
    the iteration ends, early too (Ctrl-C in the caller: the results yielded so far are kept).
    """
    unregistered = [p.name for p in properties if BY_NAME.get(p.name) is not p]
    if unregistered:
        raise ValueError(f"only registered properties run in worker processes, not {unregistered}")
    jobs = deque(_Job(p, examples(p)) for p in properties)
    pool = _Pool(setup, max(1, min(workers, len(jobs))), timeout, database, max_memory_growth, budget)
    try:
        yield from pool.run(jobs)
    finally:
        pool.close()


def worker_context() -> Any:
    """The forkserver context workers come from (jobs that are not properties: traces checked in parallel)."""
    return _CONTEXT


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes from the same forkserver context, for jobs that are not properties
    (the zoo spreads its entries over it)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=_CONTEXT)


def start_server() -> None:
    """Start the forkserver now and wait until it has imported kvtable (once per process, like an import), so
    a timed run does not pay for it."""
    process = _CONTEXT.Process(target=int, name="kvtable-warm-up")
    process.start()
    process.join()
