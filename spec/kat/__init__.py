"""Known-answer vectors for the PRNG (data files read by spec.random and the tests)."""
