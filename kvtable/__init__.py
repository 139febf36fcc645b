"""kvtable: a formally specified reference model and differential tester for per-group paged KV tables."""

from pathlib import Path as _Path

_ROOT = _Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "impl" / "__init__.py").is_file():
    # A source checkout, imported from its root (where this folder shadows any installed kvtable): the root
    # folders spec/, prover/, reference/, impl/ and bench/ are the subpackages kvtable.spec, ... as installed.
    __path__.append(str(_ROOT))  # noqa: F821 (the package's own search path)

from kvtable.errors import ContractViolation, StaleGraphState, Unsupported  # noqa: E402

__version__ = "0.1.0"
__all__ = ["ContractViolation", "StaleGraphState", "Unsupported", "__version__"]
