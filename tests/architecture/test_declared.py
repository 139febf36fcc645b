"""The names the CLI reads from source (``kvtable.declared``) are exactly the registries' names."""

from __future__ import annotations

from kvtable.conformance.properties import PROPERTIES
from kvtable.declared import declared
from kvtable.zoo.entries import ENTRIES


def test_the_property_names_read_from_source_are_the_registrys() -> None:
    assert sorted(declared("kvtable.conformance.properties", "Property", 2)) == sorted(
        (p.name, p.clause) for p in PROPERTIES)


def test_the_zoo_entry_names_read_from_source_are_the_registrys() -> None:
    assert sorted(declared("kvtable.zoo", "Entry")) == sorted((e.name,) for e in ENTRIES)
