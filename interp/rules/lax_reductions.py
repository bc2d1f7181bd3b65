"""Rules: lax_reductions (to be written)."""
