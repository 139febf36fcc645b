"""Verdict tiers and the levels that judge them (no heavy imports: the CLI parses ``--level`` with these)."""

from __future__ import annotations

SAFETY = "safety"
CORRECTNESS = "correctness"
STRICTNESS = "strictness"
TIERS = (SAFETY, CORRECTNESS, STRICTNESS)
"""Verdict tiers, weakest promise first: never write outside the allowed slots; exact values on valid
input; refusals that name the clause and the offending entry."""
LEVELS = {"safety": (SAFETY,), "correct": (SAFETY, CORRECTNESS), "strict": TIERS}
"""What each ``--level`` judges: the tiers whose failures fail the run."""
DEFAULT_LEVEL = "correct"
