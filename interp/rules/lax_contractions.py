"""Rules: lax_contractions (to be written)."""
