"""pytest plugin: the `--kvtable-backend` option that points the conformance suite at a backend."""
