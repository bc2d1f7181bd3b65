"""Rules: pallas (to be written)."""
