"""kvtable: a formally specified reference model and differential tester for per-group paged KV tables."""

from kvtable.errors import ContractViolation, StaleGraphState, Unsupported

__version__ = "0.1.0"
__all__ = ["ContractViolation", "StaleGraphState", "Unsupported", "__version__"]
