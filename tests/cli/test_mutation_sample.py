"""The mutation sample (mutation/sample.py) is reproducible; its survivors agree with mutation/README.md."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

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


MUTATION = Path(__file__).parents[2] / "mutation"
SURVIVORS = MUTATION / "survivors-9b9cf58.md"
COUNTED_AS = {  # verdict prefix in the survivors' table -> where mutation/README.md gives that verdict's count
    "equivalent (annotation)": r"(\d+) type annotations?",
    "equivalent (prose)": r"(\d+) changes? to an error's prose",
    "equivalent (argued)": r"(\d+) argued one by one",
    "killed since by": r"\*\*(\d+) (?:is|are) killed since\*\*",
    "not reached by the suite": r"\*\*(\d+) (?:is|are) not reached by the suite\*\*",
    "real gap, open": r"\*\*(\d+) (?:is a real gap|are real gaps), open\*\*",
}


def _stated(text: str, pattern: str) -> int:
    """The one count ``pattern`` finds in ``text`` (line breaks read as spaces)."""
    [count] = re.findall(pattern, " ".join(text.split()))
    return int(count)


@pytest.mark.parametrize("package", ["impl", "reference"])
def test_the_survivor_table_has_the_counts_the_mutation_readme_gives(package: str) -> None:
    rows = [line for line in SURVIVORS.read_text().splitlines() if line.startswith(f"| {package}/")]
    verdicts = [row.rsplit(" | ", 1)[1] for row in rows]
    counts = {prefix: sum(v.startswith(prefix) for v in verdicts) for prefix in COUNTED_AS}
    readme = (MUTATION / "README.md").read_text()
    [line] = [line for line in readme.splitlines() if line.startswith(f"- **{package}/**")]
    assert counts == {prefix: _stated(line, pattern) for prefix, pattern in COUNTED_AS.items()}
    assert len(rows) == sum(counts.values()) == _stated(line, r"(\d+) survived\*\*")
    equivalent = sum(n for prefix, n in counts.items() if prefix.startswith("equivalent"))
    assert _stated(line, r"\*\*(\d+) (?:is|are) equivalent\*\*") == equivalent
    mutants, killed = _stated(line, r"(\d+) mutants"), _stated(line, r"\*\*(\d+) killed,")
    assert mutants == killed + len(rows)
    closed, judged = killed + counts["killed since by"], mutants - equivalent
    assert _stated(line, r"\*\*(\d+) of the \d+ non-equivalent") == closed
    assert _stated(line, r"of the (\d+) non-equivalent") == judged
    assert f"{100 * closed / judged:.1f}%" in line
    assert "mutation/survivors-9b9cf58.md" in readme
    assert len({tuple(row.split(" | ")[:2]) for row in rows}) == len(rows)  # one row per mutant
