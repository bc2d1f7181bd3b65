"""Rules: lax_special (to be written)."""
