"""Rules: lax_conversions (to be written)."""
