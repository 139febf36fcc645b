"""The mutation-testing sample (mutation/sample.py) is reproducible: the same keys, size and seed, the same mutants."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("mutation_sample", Path(__file__).parents[1] / "mutation" / "sample.py")
assert SPEC is not None and SPEC.loader is not None
sample = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(sample)


def test_the_sample_depends_on_the_keys_and_seed_not_their_order() -> None:
    keys = [("impl/locs.py", "core/NumberReplacer", i) for i in range(50)]
    first = sample.sampled(keys, 7, seed=0)
    assert len(first) == 7 and first <= set(keys)
    assert sample.sampled(reversed(keys), 7, seed=0) == first
    assert sample.sampled(keys, 7, seed=1) != first
    assert sample.sampled(keys[:5], 7, seed=0) == set(keys[:5])


def test_a_site_is_module_operator_and_occurrence() -> None:
    class Mutation:
        module_path = Path("impl/graph.py")
        operator_name = "core/ReplaceBinaryOperator_Add_Sub"
        occurrence = 3

    assert sample.site([Mutation()]) == (("impl/graph.py", "core/ReplaceBinaryOperator_Add_Sub", 3),)
