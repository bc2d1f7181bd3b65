"""Runners (one per backend), device detection, isolation and environment capture."""
from .base import (DEFAULT_CPU_RUNNERS, BackendUnsupported, Runner, all_runners, available_runners, detect,
                   get_runner)

__all__ = ["Runner", "BackendUnsupported", "all_runners", "available_runners", "detect", "get_runner",
           "DEFAULT_CPU_RUNNERS"]
