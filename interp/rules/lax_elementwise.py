"""Rules: lax_elementwise (to be written)."""
