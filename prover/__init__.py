"""The prover: z3 obligations of spec/SPEC.md, the symbolic executor of Triton kernels, bindings."""
