"""``python -m kvtable.conformance.properties``: which backend operations unlock which properties (``*``: any
one of the operations so marked is enough)."""

from kvtable.conformance.properties import PROPERTIES
from kvtable.conformance.properties.applies import unlocks

for operation, names in unlocks(PROPERTIES).items():
    print(f"{operation} ({len(names)}): {', '.join(names)}")
