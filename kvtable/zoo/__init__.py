"""The bug zoo: known engine bugs as mutants of the torch backend (entries.py), the source mutants of impl/
(mutants.py), and ``kvtable zoo`` (cli.py), which requires the conformance suite to catch them all."""
