"""Backends under test, and ``load`` to pick one by name, the way array-api-tests picks an array module.

A backend is named by ``"pkg.mod:factory"`` (a class or function returning a ``Backend``; it is called
with ``debug=`` when a debug-mode instance is wanted), ``"pkg.mod:object"`` (an instance),
``"path/to/file.py:factory"`` (a Python file, loaded as a module with its folder on ``sys.path`` for its
sibling modules: no package or install needed), or one of the built-in names ``reference``, ``torch`` and
``triton``. A module that is not on ``sys.path`` is
also looked up in the current directory (so ``examples.vllm_style:backend`` works from a clone's root,
as with ``python -m``). With no name, ``$KVTABLE_BACKEND`` decides (default ``torch``). The ``kvtable
conform/fuzz --backend`` options and the pytest option ``--kvtable-backend`` all go through here.

A backend may be partial: any object with at least one protocol operation loads
(``missing_methods(backend)`` lists the rest); an object with none is a one-line ``NotABackend`` error.
A factory without a ``debug`` parameter makes a backend with no debug mode: asking for one raises
``NoDebugMode``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from kvtable.backends.protocol import (
    OPERATIONS,
    Backend,
    GraphRunner,
    is_backend,
    missing_operations,
    present_operations,
)

__all__ = [
    "BUILTIN", "ENV_VAR", "OPERATIONS", "Backend", "BackendNotFound", "BackendUnavailable", "GraphRunner",
    "NoDebugMode", "NotABackend", "check_spec", "debug_twin", "is_backend", "load", "missing_methods",
    "present_methods", "resolve", "spec_of",
]

ENV_VAR = "KVTABLE_BACKEND"
DEFAULT = "torch"
BUILTIN = {
    "reference": "kvtable.backends.reference_backend:ReferenceBackend",
    "torch": "kvtable.backends.torch_backend:TorchBackend",
    "torch-stacked": "kvtable.backends.torch_backend:TorchStackedBackend",
    "triton": "kvtable.backends.triton_backend:TritonBackend",
}

Factory = Callable[..., Backend]


class BackendUnavailable(RuntimeError):
    """The named backend cannot run here (its optional dependency is missing): skip it, do not pass it."""


class BackendNotFound(ImportError):
    """The backend name does not resolve: a malformed spec, a module that does not import, no such object."""


class NotABackend(BackendNotFound, TypeError):
    """The name resolves, but to an object with none of the protocol's operations."""


class NoDebugMode(TypeError):
    """A debug-mode instance was asked of a backend whose factory takes no ``debug`` argument."""


present_methods = present_operations
missing_methods = missing_operations

_FILE_MODULES: dict[str, str] = {}
"""Module name -> the file path it was loaded from with the ``path.py:factory`` form (for ``spec_of``)."""


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
    module_name, attr = _parts(spec, target)
    if module_name.endswith(".py"):
        module = _import_file(spec, module_name)
    else:
        module = _import_module(spec, module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise BackendNotFound(f"backend {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    return obj


def _parts(spec: str, target: str) -> tuple[str, str]:
    """``target``'s module (or file) and attribute; a malformed name is ``BackendNotFound``."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise BackendNotFound(f"backend {spec!r}: expected 'pkg.mod:factory', 'pkg.mod:object', "
                              f"'path/to/file.py:factory' or one of {sorted(BUILTIN)}")
    return module_name, attr


def check_spec(spec: str | None = None) -> None:
    """What a backend name shows without importing anything: its form, and that its file or top-level package
    exists (``BackendNotFound`` otherwise). Checked before any heavy import, so a typo costs no start-up."""
    spec = spec or default_spec()
    if spec in BUILTIN:
        return
    module_name, _ = _parts(spec, spec)
    if module_name.endswith(".py"):
        if not Path(module_name).is_file():
            raise BackendNotFound(f"backend {spec!r}: no such file {module_name!r} (relative to {os.getcwd()})")
        return
    top = module_name.split(".")[0]
    if importlib.util.find_spec(top) is None and not (Path(top).is_dir() or Path(f"{top}.py").is_file()):
        raise BackendNotFound(f"backend {spec!r}: cannot import {module_name!r}: No module named {top!r}")


def _import_module(spec: str, module_name: str) -> ModuleType:
    """``module_name`` from ``sys.path``, else from the current directory (as ``python -m`` would find it)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        here = os.getcwd()
        top = module_name.split(".")[0]
        if err.name is None or err.name.split(".")[0] != top or here in sys.path or not (
                Path(here, top).is_dir() or Path(here, f"{top}.py").is_file()):
            raise BackendNotFound(f"backend {spec!r}: cannot import {module_name!r}: {err}") from err
        sys.path.append(here)
        return _import_module(spec, module_name)
    except ImportError as err:
        raise BackendNotFound(f"backend {spec!r}: cannot import {module_name!r}: {err}") from err


def _import_file(spec: str, path: str) -> ModuleType:
    """A Python file loaded as a module named after its resolved path (loaded once per path)."""
    file = Path(path).resolve()
    if not file.is_file():
        raise BackendNotFound(f"backend {spec!r}: no such file {path!r} (relative to {os.getcwd()})")
    name = "kvtable_backend_file_" + "".join(c if c.isalnum() else "_" for c in str(file))
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, file)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before exec: dataclasses and pickling look the module up by name
    if str(file.parent) not in sys.path:  # its sibling modules import, as under ``python file.py``
        sys.path.append(str(file.parent))
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise BackendNotFound(f"backend {spec!r}: {path} failed to import: {type(err).__name__}: {err}") from err
    _FILE_MODULES[name] = str(file)
    return module


def _takes_debug(factory: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return True
    return "debug" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def load(spec: str | None = None, *, debug: bool | None = None) -> Backend:
    """The backend ``spec`` names (see the module docstring); ``debug`` is passed to a factory.

    Raises ``BackendUnavailable`` for a built-in whose dependency is missing, ``BackendNotFound`` for a
    name that does not resolve, ``NotABackend`` for an object with no protocol operation at all, and
    ``NoDebugMode`` for ``debug=True`` on a backend without a debug mode.
    """
    name = spec or default_spec()
    obj: Any = resolve(spec)  # a factory (class or function) or a ready instance: told apart here
    if inspect.isclass(obj) or (callable(obj) and not is_backend(obj)):
        if debug is None or (not debug and not _takes_debug(obj)):
            backend = obj()
        elif not _takes_debug(obj):
            raise NoDebugMode(f"backend {name!r}: {getattr(obj, '__qualname__', obj)!r} takes no 'debug' "
                              "argument, so it has no debug mode")
        else:
            backend = obj(debug=debug)
    elif debug is not None and getattr(obj, "debug", debug) != debug:
        backend = debug_twin(obj, debug=debug)
    else:
        backend = obj
    if not is_backend(backend):
        raise NotABackend(f"backend {name!r} gave {type(backend).__name__}, which has none of the operations "
                          f"of kvtable.backends.protocol.Backend ({', '.join(OPERATIONS)})")
    return backend


def debug_twin(backend: Backend, *, debug: bool = True) -> Backend:
    """The same backend class rebuilt with ``debug=``: constructor arguments are read off the instance.

    Works for classes whose constructor parameters are stored under the same attribute names (as
    ``TorchBackend(device, debug, kernels)`` does); anything else must be given as a factory.
    """
    if getattr(backend, "debug", None) is debug:
        return backend
    cls: Any = type(backend)  # a class with a debug= constructor argument (checked here): the protocol has none
    params = inspect.signature(cls).parameters
    if "debug" not in params:
        raise NoDebugMode(f"{cls.__qualname__} takes no 'debug' argument, so it has no debug mode; pass a "
                          "factory that does")
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
    module = _FILE_MODULES.get(cls.__module__, cls.__module__)
    return f"{module}:{cls.__qualname__}"
