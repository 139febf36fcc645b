"""The symbolic executor: runs a Triton kernel's own source over z3 values, and replays counterexamples."""
