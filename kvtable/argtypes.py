"""Argument types and up-front checks shared by the subcommands: a bad value is a usage error before any work."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from kvtable.exitcodes import UsageError


def _int_at_least(text: str, low: int) -> int:
    """An integer >= ``low``, or the usage error saying which."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (an example budget, a worker count)."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0 (a seed)."""
    return _int_at_least(text, 0)


def share(text: str) -> float:
    """A share of something, from 0 to 1 (a rate)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not 0 <= value <= 1:  # nan fails both
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text}")
    return value


def memory_size(text: str) -> int:
    """A number of bytes > 0, with an optional K, M or G suffix (binary units: 1G is 2^30 bytes)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    number, unit = (text[:-1], units[text[-1].upper()]) if text[-1:].upper() in units else (text, 1)
    try:
        value = float(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 1G, got {text!r}") from None
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text}")
    return int(value)


def positive_float(text: str) -> float:
    """A number of seconds > 0 (a timeout)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _unwritable(folder: Path) -> str | None:
    """Why no file can be written in ``folder`` (created if needed), or None: a probe file, so root and
    read-only file systems are judged as they are, not by permission bits."""
    if folder.exists() and not folder.is_dir():
        return f"{folder} exists and is not a directory"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return f"{folder} is not writable ({err.strerror or err})"
    return None


def writable_folder(folder: Path, option: str) -> Path:
    """``folder``, created if needed, once a file could be written in it."""
    if reason := _unwritable(folder):
        raise UsageError(f"{option} {folder}: {reason}")
    return folder


def writable_file(path: Path, option: str) -> Path:
    """``path``, once it is not a directory and its folder is writable."""
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory, not a file")
    if reason := _unwritable(path.parent):
        raise UsageError(f"{option} {path}: {reason}")
    return path
