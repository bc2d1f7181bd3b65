"""Rules: random (to be written)."""
