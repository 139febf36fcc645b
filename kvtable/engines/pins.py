"""``python -m kvtable.engines.pins DIST NAME...``: each NAME as installed engine DIST's own metadata pins it.

An engine installed ``--no-deps`` still states what versions of its pure-Python dependencies it was released
with; installing those (and never its torch) keeps the engine's code running on the versions it expects.
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def pinned(distribution: str, names: list[str]) -> list[str]:
    """Each of ``names`` (a bare name, or already a requirement) with the specifier ``distribution`` states."""
    stated = {}
    for line in metadata.requires(distribution) or ():
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            stated[canonicalize_name(requirement.name)] = requirement
    out = []
    for name in names:
        own = Requirement(name)
        theirs = stated.get(canonicalize_name(own.name))
        out.append(str(own) if own.specifier or theirs is None else f"{own.name}{theirs.specifier}")
    return out


if __name__ == "__main__":
    print("\n".join(pinned(sys.argv[1], sys.argv[2:])))
