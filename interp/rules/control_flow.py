"""Rules: control_flow (to be written)."""
