"""Rules: fusion (to be written)."""
