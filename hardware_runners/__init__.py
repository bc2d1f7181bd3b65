"""Runners: one per backend, each runs a program (``program.Program``) and returns NumPy outputs;
device detection, which compiler lowers a Pallas kernel, environment capture. (Running a case in
an isolated worker process is the suite's: conformance/isolation.py.)"""
from .base import (DEFAULT_CPU_RUNNERS, PLUGIN_ENV, PLUGIN_GROUP, BackendUnsupported, PluginError, Runner,
                   all_runners, available_runners, detect, get_runner)
from .program import KINDS, LAX, PALLAS, Program

__all__ = ["Runner", "BackendUnsupported", "all_runners", "available_runners", "detect", "get_runner",
           "DEFAULT_CPU_RUNNERS", "PLUGIN_GROUP", "PLUGIN_ENV", "PluginError", "Program", "LAX", "PALLAS", "KINDS"]
