"""Every private API of Hypothesis and Triton that kvtable reaches into, in one place.

kvtable pins both (pyproject.toml: ``hypothesis>=6.170,<7``, ``triton>=3.9,<3.10``), and still only touches
their internals through this module: each symbol is named once in ``PRIVATE``, fetched by ``private(name)``,
and ``missing()`` lists every one an installed version no longer has, so tests/architecture/test_internals.py fails
loudly, naming the moved symbol, on an upgrade that moves it. Nothing here imports Hypothesis or Triton until
a symbol is asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

PRIVATE: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # name: (module, attribute ("": the module itself), attributes kvtable reads or swaps on it; grid_idx is
    # read inside a launch, where set_grid_idx put it)
    "ConjectureResult": ("hypothesis.internal.conjecture.data", "ConjectureResult", ()),
    "hypothesis_providers": ("hypothesis.internal.conjecture.providers", "", ("_get_local_constants", "Constants")),
    "triton_interpreter": ("triton.runtime.interpreter", "", ("_implicit_cvt", "_get_np_dtype")),
    "interpreter_builder": ("triton.runtime.interpreter", "interpreter_builder",
                            ("set_grid_idx", "create_masked_load", "create_masked_store")),
    "TensorHandle": ("triton.runtime.interpreter", "TensorHandle", ()),
    "GridExecutor": ("triton.runtime.interpreter", "GridExecutor", ("__call__",)),
    "KernelInterface": ("triton.runtime.jit", "KernelInterface", ("__getitem__",)),
    "mangle_type": ("triton.runtime.jit", "mangle_type", ()),
}
"""Where each private symbol lives in the pinned versions, and what kvtable uses on it."""

DATABASE_KEY = "_hypothesis_internal_database_key"
"""The attribute Hypothesis reads a test's example-database key from (set on the wrapped test)."""
PACKAGE_OF = {"hypothesis": "hypothesis>=6.170,<7", "triton": "triton>=3.9,<3.10"}


class MovedInternal(ImportError):
    """A private Hypothesis or Triton symbol kvtable uses is not where the pinned versions keep it."""


def private(name: str) -> Any:
    """The private symbol ``name`` of ``PRIVATE``; ``MovedInternal`` naming it and the pin when it moved."""
    module, attr, _ = PRIVATE[name]
    try:
        found = importlib.import_module(module)
        return getattr(found, attr) if attr else found
    except (ImportError, AttributeError) as err:
        raise MovedInternal(_moved(f"{module}.{attr}".rstrip("."), module)) from err


def without_local_constants() -> None:
    """Hypothesis draws, now and then, constants it finds in the source of the modules loaded so far, so which
    tests ran before a derandomized one changes what that one draws. Off (for kvtable's own test session): the
    same test draws the same examples in any order."""
    providers = private("hypothesis_providers")
    empty = providers.Constants()  # no constant of any type (built, not mined: mining reads Hypothesis' storage)
    providers._get_local_constants = lambda: empty


def set_database_key(test: Any, key: bytes) -> None:
    """Key ``test``'s saved examples by ``key`` (Hypothesis keys them by the test's name otherwise)."""
    setattr(test, DATABASE_KEY, key)


def missing() -> list[str]:
    """Every private symbol or attribute kvtable uses that the installed versions lack (an uninstalled
    optional package, triton, is skipped: kvtable runs without it)."""
    problems = []
    for name, (module, attr, members) in PRIVATE.items():
        top = module.partition(".")[0]
        if importlib.util.find_spec(top) is None:
            continue
        if top == "triton":  # interpreter mode is chosen before triton first loads
            importlib.import_module("kvtable.impl.triton_kernels")
        try:
            owner = private(name)
        except MovedInternal as err:
            problems.append(str(err))
            continue
        problems += [_moved(".".join(filter(None, (module, attr, member))), module) for member in members
                     if not hasattr(owner, member)]
    return problems


def _moved(symbol: str, module: str) -> str:
    top = module.partition(".")[0]
    try:
        version = importlib.import_module(top).__version__
    except ImportError:
        version = "not installed"
    return (f"{symbol} is gone in {top} {version}: kvtable.internals names where the pinned versions "
            f"({PACKAGE_OF[top]}) keep it; update it there")
