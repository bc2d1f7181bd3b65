"""Rules: state (to be written)."""
