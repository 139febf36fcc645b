"""The conformance suite's example budget: the ``kvtable-conformance`` hypothesis profile (25 per property).

The profile is registered, not loaded, so other tests keep their own settings; ``--hypothesis-profile``
picks another registered profile's ``max_examples`` for these tests. ``kvtable conform`` and
``kvtable fuzz`` take the large counts.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

PROFILE = "kvtable-conformance"
settings.register_profile(PROFILE, max_examples=25, deadline=None)


@pytest.fixture(scope="session")
def conformance_examples(request: pytest.FixtureRequest) -> int:
    """Examples per property: the chosen hypothesis profile's ``max_examples``."""
    name = request.config.getoption("hypothesis_profile", default=None) or PROFILE
    return settings.get_profile(name).max_examples
