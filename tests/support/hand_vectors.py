"""The hand-derived batch of the foundation issue, shared by the unit tests (page size 2, two groups)."""

from kvtable.reference import GroupSpec

SLIDING = [[0, 5, 7, -1], [0, 6, -1, -1]]
FULL = [[1, 2, 3, -1], [4, 8, -1, -1]]
SPECS = (
    GroupSpec("sliding_attention", "sliding", 2, window=2),
    GroupSpec("full_attention", "full", 2),
    GroupSpec("mamba", "state", 1),
)
