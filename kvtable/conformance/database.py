"""Example databases for runs: ``open_database`` (a directory, ``redis://``, or none) checked before any work,
and ``KeyedDatabase``, one entry per (property, backend, profile, level) whose failures are usage errors.

Hypothesis keys a test's saved examples by the test alone; kvtable runs the same property against many
backends, so a passing run of one backend would delete the failures another saved. ``KeyedDatabase``
prefixes every key with the run's backend, profile and level, so each keeps its own failures in one
shared database (a directory, or Redis for many machines). A database that fails while a run uses it
raises ``DatabaseFailed`` (a ``UsageError``: exit 2), never a verdict on the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from kvtable.conformance.options import database_target
from kvtable.exitcodes import UsageError

if TYPE_CHECKING:
    from hypothesis.database import ListenerEventT

__all__ = ["DatabaseFailed", "KeyedDatabase", "database_prefix", "open_database"]

T = TypeVar("T")


class DatabaseFailed(UsageError):
    """The example database failed while a run used it (a server that went away, a disk that filled)."""


def open_database(spec: str | Path | ExampleDatabase | None) -> ExampleDatabase | None:
    """An example database from a directory, a ``redis://host:port`` URL, ``"none"`` or None, checked now:
    a malformed URL, an unreachable server or a folder that cannot be written is a ``UsageError``."""
    if isinstance(spec, ExampleDatabase):
        return spec
    target = database_target(spec)
    if target is None:
        return None
    return DirectoryBasedExampleDatabase(target) if isinstance(target, Path) else _redis(target)


def _redis(url: str) -> ExampleDatabase:
    """hypothesis' ``RedisExampleDatabase`` on ``url`` (a server ``database_target`` found answering)."""
    import redis
    from hypothesis.extra.redis import RedisExampleDatabase

    return RedisExampleDatabase(redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30))


def database_prefix(backend: str, profile: str, level: str) -> bytes:
    """The key prefix of one (backend, profile, level): the property's own key follows it."""
    return f"kvtable[{backend}|{profile}|{level}]:".encode()


class KeyedDatabase(ExampleDatabase):
    """``inner`` seen through a key prefix; any error of ``inner`` is raised as ``DatabaseFailed``."""

    def __init__(self, inner: ExampleDatabase, prefix: bytes) -> None:
        super().__init__()
        self.inner = inner
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"KeyedDatabase({self.inner!r}, {self.prefix!r})"

    def __eq__(self, other: object) -> bool:
        """The same store under the same prefix: two clients of one Redis server are one database (HypoFuzz
        refuses a test whose database differs from the default, and Redis clients never compare equal)."""
        return isinstance(other, KeyedDatabase) and self.prefix == other.prefix and (
            self.inner == other.inner or (_is_redis(self.inner) and _named(self.inner) == _named(other.inner)))

    def __hash__(self) -> int:
        return hash((KeyedDatabase, self.prefix))

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return list(self._guard(lambda: list(self.inner.fetch(self.prefix + key))))

    def save(self, key: bytes, value: bytes) -> None:
        self._guard(lambda: self.inner.save(self.prefix + key, value))

    def delete(self, key: bytes, value: bytes) -> None:
        self._guard(lambda: self.inner.delete(self.prefix + key, value))

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._guard(lambda: self.inner.move(self.prefix + src, self.prefix + dest, value))

    def _start_listening(self) -> None:
        self.inner.add_listener(self._forward)

    def _stop_listening(self) -> None:
        self.inner.remove_listener(self._forward)

    def _forward(self, event: ListenerEventT) -> None:
        """Pass on the inner database's changes under this prefix, with the prefix taken off (HypoFuzz listens)."""
        kind, (key, value) = event
        if not key.startswith(self.prefix):
            return
        if kind == "save" and value is not None:
            self._broadcast_change(("save", (key[len(self.prefix):], value)))
        else:
            self._broadcast_change(("delete", (key[len(self.prefix):], value)))

    def _guard(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except Exception as err:
            why = " ".join(f"{type(err).__name__}: {err}".split())  # one line, whatever the client's message
            raise DatabaseFailed(f"example database {_named(self.inner)} failed: {why}") from err


def _is_redis(database: ExampleDatabase) -> bool:
    return getattr(database, "redis", None) is not None


def _named(database: ExampleDatabase) -> str:
    """A database in a few words: its folder, its Redis server's URL, or its class (never a client's long repr)."""
    if isinstance(database, DirectoryBasedExampleDatabase):
        return str(database.path)
    if (client := getattr(database, "redis", None)) is not None:
        where = client.connection_pool.connection_kwargs
        return f"redis://{where.get('host')}:{where.get('port')}/{where.get('db', 0)}"
    return type(database).__name__
