"""The conformance suite's example budget: the ``kvtable-conformance`` hypothesis profile, 25 per property with
``--slow`` (CI) and 5 in the fast tier, so a plain ``pytest`` still runs every property once through.

The profiles are registered, not loaded, so other tests keep their own settings; ``--hypothesis-profile``
picks another registered profile's ``max_examples`` for these tests. ``kvtable conform`` and
``kvtable fuzz`` take the large counts.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

PROFILE = "kvtable-conformance"
FAST_PROFILE = "kvtable-conformance-fast"
settings.register_profile(PROFILE, max_examples=25, deadline=None)
settings.register_profile(FAST_PROFILE, max_examples=5, deadline=None)


@pytest.fixture(scope="session")
def conformance_examples(request: pytest.FixtureRequest) -> int:
    """Examples per property: the chosen hypothesis profile's ``max_examples`` (by tier when none is chosen)."""
    default = PROFILE if request.config.getoption("--slow") else FAST_PROFILE
    name = request.config.getoption("hypothesis_profile", default=None) or default
    return settings.get_profile(name).max_examples
