"""Rules: lax_indexing (to be written)."""
