"""Benchmarks (not timed tests): `python -m bench` runs every module here and prints its table."""
