"""Backends under test, and ``load`` to pick one by name, the way array-api-tests picks an array module.

A backend is named by ``"pkg.mod:factory"`` (a class or function returning a ``Backend``; it is called
with ``debug=`` when a debug-mode instance is wanted), ``"pkg.mod:object"`` (an instance), or one of the
built-in names ``reference``, ``torch`` and ``triton``. With no name, ``$KVTABLE_BACKEND`` decides
(default ``torch``). The ``kvtable conform/fuzz --backend`` options and the pytest option
``--kvtable-backend`` all go through here.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from typing import Any

from kvtable.backends.protocol import Backend, GraphRunner

__all__ = [
    "BUILTIN", "ENV_VAR", "Backend", "BackendUnavailable", "GraphRunner", "debug_twin", "load", "resolve",
    "spec_of",
]

ENV_VAR = "KVTABLE_BACKEND"
DEFAULT = "torch"
BUILTIN = {
    "reference": "kvtable.backends.reference_backend:ReferenceBackend",
    "torch": "kvtable.backends.torch_backend:TorchBackend",
    "triton": "kvtable.backends.triton_backend:TritonBackend",
}

Factory = Callable[..., Backend]


class BackendUnavailable(RuntimeError):
    """The named backend cannot run here (its optional dependency is missing): skip it, do not pass it."""


class BackendNotFound(ImportError):
    """The backend name does not resolve: a malformed spec, a module that does not import, no such object."""


def default_spec() -> str:
    return os.environ.get(ENV_VAR) or DEFAULT


def resolve(spec: str | None = None) -> Factory | Backend:
    """The object a backend name points at: a factory (class or function) or a ready instance."""
    spec = spec or default_spec()
    target = BUILTIN.get(spec, spec)
    if spec == "triton":
        try:
            importlib.import_module("triton")
        except ImportError as err:
            raise BackendUnavailable(f"backend 'triton' skipped: triton is not importable ({err})") from err
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BackendNotFound(f"backend {spec!r}: expected 'pkg.mod:factory', 'pkg.mod:object' or one of "
                              f"{sorted(BUILTIN)}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise BackendNotFound(f"backend {spec!r}: cannot import {module_name!r}: {err}") from err
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise BackendNotFound(f"backend {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    return obj


def load(spec: str | None = None, *, debug: bool | None = None) -> Backend:
    """The backend ``spec`` names (see the module docstring); ``debug`` is passed to a factory.

    Raises ``BackendUnavailable`` for a built-in whose dependency is missing, ``BackendNotFound`` for a
    name that does not resolve, ``TypeError`` for an object that is no Backend.
    """
    obj = resolve(spec)
    if inspect.isclass(obj) or (callable(obj) and not isinstance(obj, Backend)):
        backend = obj() if debug is None else obj(debug=debug)
    elif debug is not None and getattr(obj, "debug", debug) != debug:
        backend = debug_twin(obj, debug=debug)
    else:
        backend = obj
    if not isinstance(backend, Backend):
        raise TypeError(f"backend {spec or default_spec()!r} gave {type(backend).__name__}, which does not "
                        "implement kvtable.backends.protocol.Backend")
    return backend


def debug_twin(backend: Backend, *, debug: bool = True) -> Backend:
    """The same backend class rebuilt with ``debug=``: constructor arguments are read off the instance.

    Works for classes whose constructor parameters are stored under the same attribute names (as
    ``TorchBackend(device, debug, kernels)`` does); anything else must be given as a factory.
    """
    if getattr(backend, "debug", None) is debug:
        return backend
    cls = type(backend)
    params = inspect.signature(cls).parameters
    if "debug" not in params:
        raise TypeError(f"{cls.__qualname__} takes no 'debug' argument; pass a factory that does")
    kwargs = {name: getattr(backend, name) for name in params
              if name != "debug" and hasattr(backend, name)
              and params[name].kind in (params[name].POSITIONAL_OR_KEYWORD, params[name].KEYWORD_ONLY)}
    return cls(**kwargs, debug=debug)


def spec_of(backend: Backend) -> str:
    """A name ``load`` resolves to this backend's class (for replayable counterexamples)."""
    cls = type(backend)
    for name, target in BUILTIN.items():
        if target == f"{cls.__module__}:{cls.__qualname__}":
            return name
    return f"{cls.__module__}:{cls.__qualname__}"
