"""The z3 obligations, one module per part of the contract; registry.OBLIGATIONS lists them all."""
