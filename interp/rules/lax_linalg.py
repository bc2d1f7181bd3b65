"""Rules: lax_linalg (to be written)."""
