"""Input integrity: a backend call must leave the caller's tables, lengths and mirrors as it got them.

``Inputs.take`` copies every tensor and list of lengths a call is given (inside mappings, lists and tuples
too), except its output buffers (parameters named ``out`` or ``dst``) and anything sharing their storage or
``exempt``'s (a graph runner's own buffers, which replay refills by design); ``Inputs.changed`` compares them
after the call and names the first input that changed and its first changed element.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["InputChanged", "Inputs"]

OUTPUT_NAMES = frozenset({"out", "dst"})
"""Parameters a call writes by contract (the kernels' outputs, ``expand_table(out=...)``, the replay fill)."""


@dataclass(eq=False)
class InputChanged(Exception):
    """A backend call wrote into an input it was given: which call, which input, where and what."""

    call: str
    name: str
    where: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return (f"{self.call} changed the caller's {self.name}: {self.where} was {self.before}, now {self.after} "
                "(a backend must leave its inputs as it got them)")


def _named(value: Any, name: str) -> Iterable[tuple[str, Any]]:
    """The tensors and lists of ints in ``value``, each with the expression naming it."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _named(item, f"{name}[{key!r}]")
    elif isinstance(value, list) and all(isinstance(v, int) for v in value):
        yield name, value
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _named(item, f"{name}[{i}]")


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _arguments(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name (``arg0``, ``arg1``, ... where the signature cannot be read)."""
    try:
        return dict(signature_of(fn).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}


_SIGNATURES: dict[tuple[Any, bool], inspect.Signature] = {}
SIGNATURES_KEPT = 1024


def signature_of(fn: Callable[..., Any]) -> inspect.Signature:
    """``inspect.signature(fn)``, read once per function: reading it cost more than many of the calls it names the
    arguments of. A bound method is new at every attribute access, so it is kept by its function (every method
    bound to that function has the one signature)."""
    func = getattr(fn, "__func__", None)
    key = (func, True) if func is not None and getattr(fn, "__self__", None) is not None else (fn, False)
    try:
        found = _SIGNATURES.get(key)
    except TypeError:  # an unhashable callable: read every time
        return inspect.signature(fn)
    if found is None:
        if len(_SIGNATURES) >= SIGNATURES_KEPT:
            _SIGNATURES.clear()
        found = _SIGNATURES[key] = inspect.signature(fn)
    return found


class Inputs:
    """Copies of a call's inputs, taken before it runs."""

    def __init__(self, call: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 exempt: Iterable[torch.Tensor] = ()) -> None:
        self.call = call
        arguments = _arguments(fn, args, kwargs)
        outputs = [t for name in OUTPUT_NAMES & arguments.keys() for _, t in _named(arguments[name], name)
                   if isinstance(t, torch.Tensor)]
        skip = {_storage(t) for t in [*outputs, *exempt] if not t.is_meta}
        self.copies = [(name, value, list(value) if isinstance(value, list) else value.clone())
                       for key, arg in arguments.items() if key not in OUTPUT_NAMES
                       for name, value in _named(arg, key)
                       if isinstance(value, list) or not (value.is_meta or _storage(value) in skip)]

    def changed(self) -> InputChanged | None:
        """The first input that is no longer as it was, or None."""
        for name, now, before in self.copies:
            if isinstance(now, list) or isinstance(before, list):  # both or neither: ``before`` copies ``now``
                if now != before:
                    where = next((f"entry {i}" for i, (a, b) in enumerate(zip(before, now)) if a != b),  # noqa: B905
                                 "its length")
                    return InputChanged(self.call, name, where, before, now)
                continue
            if now.shape != before.shape or now.dtype != before.dtype:
                return InputChanged(self.call, name, "its shape and dtype", (list(before.shape), before.dtype),
                                    (list(now.shape), now.dtype))
            if not torch.equal(now, before):
                at = tuple((now != before).nonzero()[0].tolist())
                return InputChanged(self.call, name, f"element {list(at)}", before[at].item(), now[at].item())
        return None
