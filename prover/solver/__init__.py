"""z3 plumbing: bit-vector encodings of the formulas, preconditions, int blasting, discharge."""
