"""Progress on stderr, only where a person watches: a rich progress bar on a terminal, nothing in a log file.

A log (stderr redirected to a file or a pipe) gets no progress at all, so it holds no carriage returns;
``--no-progress`` turns the bar off on a terminal too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["progress_bar", "wants_progress"]


def wants_progress(no_progress: bool) -> bool:
    """Whether to show progress: stderr is a terminal and ``--no-progress`` was not given."""
    return not no_progress and sys.stderr.isatty()


@contextmanager
def progress_bar(enabled: bool, description: str) -> Iterator[Callable[[int, int, Any], None] | None]:
    """A ``progress(done, total, result)`` callback drawing a rich bar on stderr while the block runs, or None
    when progress is off (``result.label`` and ``result.property`` name the last step finished)."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[last]}"))
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=None, last="")

        def advance(done: int, total: int, result: Any) -> None:
            bar.update(task, completed=done, total=total, last=f"{result.label} {result.property}")

        yield advance
