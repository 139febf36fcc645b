"""Bindings: how a Triton kernel's arguments map onto the contract, and the queries asked of a run."""
