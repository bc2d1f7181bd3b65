"""The conformance suite: cases, compliance checkers, pytest plugin, and the jax-conformance CLI."""
