"""Rules: lax_structure (to be written)."""
