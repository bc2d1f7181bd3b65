"""Program fuzzing: random well-typed JAX programs, judged exactly against the reference, shrunk."""

from .campaign import CampaignError, run_campaign  # noqa: E402,F401
