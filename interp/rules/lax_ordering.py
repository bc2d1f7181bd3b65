"""Rules: lax_ordering (to be written)."""
