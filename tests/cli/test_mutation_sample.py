"""The mutation-testing sample (mutation/sample.py) is reproducible, and its survivors' table agrees with README."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("mutation_sample", Path(__file__).parents[2] / "mutation" / "sample.py")
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


SURVIVORS = Path(__file__).parents[2] / "mutation" / "survivors-6062f4c.md"
README_COUNTS = {  # verdict prefix in the survivors' table -> the phrase README's "Mutation testing" gives its count in
    "equivalent (annotation)": (20, "20 type annotations"),
    "equivalent (prose)": (6, "6 changes\n  to an error's prose only"),
    "equivalent (argued)": (20, "20 argued one by\n  one"),
    "not reachable on a CPU": (5, "**5 are not reachable on a CPU**"),
    "killed since by": (11, "**11 are killed since**"),
    "line no longer exists": (1, "**1 no longer exists**"),
}


def test_the_survivor_table_lists_63_verdicts_with_the_counts_readme_gives() -> None:
    rows = [line for line in SURVIVORS.read_text().splitlines() if line.startswith("| impl/")]
    verdicts = [row.rsplit(" | ", 1)[1] for row in rows]
    counts = {prefix: sum(v.startswith(prefix) for v in verdicts) for prefix in README_COUNTS}
    assert len(rows) == 63 and sum(counts.values()) == 63
    assert counts == {prefix: n for prefix, (n, _) in README_COUNTS.items()}
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "63 survived" in readme and "**46 are equivalent**" in readme and "mutation/survivors-6062f4c.md" in readme
    assert all(phrase in readme for _, phrase in README_COUNTS.values())
    assert len({tuple(row.split(" | ")[:2]) for row in rows}) == 63  # one row per mutant: site, operator and occurrence
