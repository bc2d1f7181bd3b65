"""Program fuzzing: random well-typed JAX programs, judged exactly against the reference, shrunk."""
