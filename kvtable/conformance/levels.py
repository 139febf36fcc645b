"""Verdict tiers and the levels that judge them (no heavy imports: the CLI parses ``--level`` with these)."""

from __future__ import annotations

SAFETY = "safety"
CORRECTNESS = "correctness"
STRICTNESS = "strictness"
TIERS = (SAFETY, CORRECTNESS, STRICTNESS)
"""Verdict tiers, weakest promise first: never write outside the allowed slots; exact values on valid
input; refusals that name the clause and the offending entry."""
LATENT = "latent"
"""A safety failure reachable only past a stated size (a pool of 2^31 slots, positions past the maximum context):
reported and counted apart, failing a run only with ``--latent``."""
LATENT_SUFFIX = "+latent"
"""A level with this suffix (``--latent``) also fails on latent failures."""


class _Levels(dict):
    """The levels by name; ``NAME+latent`` is level NAME with the latent tier too (not listed, but looked up)."""

    def __missing__(self, key: str) -> tuple[str, ...]:
        if isinstance(key, str) and key.endswith(LATENT_SUFFIX) and key.removesuffix(LATENT_SUFFIX) in self:
            return (*self[key.removesuffix(LATENT_SUFFIX)], LATENT)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or (isinstance(key, str) and key.endswith(LATENT_SUFFIX)
                                             and super().__contains__(key.removesuffix(LATENT_SUFFIX)))


LEVELS = _Levels({"safety": (SAFETY,), "correct": (SAFETY, CORRECTNESS), "strict": TIERS})
"""What each ``--level`` judges: the tiers whose failures fail the run."""


def with_latent(level: str, latent: bool) -> str:
    """``level``, or ``level+latent`` when latent failures fail the run too (``--latent``)."""
    return f"{level.removesuffix(LATENT_SUFFIX)}{LATENT_SUFFIX}" if latent else level
DEFAULT_LEVEL = "correct"
