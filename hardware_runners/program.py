"""What a runner is given: a program, and what a runner needs to know about it.

Runners sit below the suite: they know programs, not conformance cases (``Case.as_program()``
describes a case this way; anything else that runs JAX programs on backends can too).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

# Kinds of program (a runner declares which kinds it can execute).
LAX = "lax"          # plain JAX program: runs under jit on an XLA platform
PALLAS = "pallas"    # a Pallas kernel: ``build(interpret)`` gives the program for one Pallas mode
KINDS = (LAX, PALLAS)


@dataclasses.dataclass(frozen=True)
class Program:
    build: Callable[[Any], Callable]   # a Pallas mode's ``interpret`` argument (None for LAX) -> the JAX function
    reference: Callable[[], Callable]  # -> the JAX function the reference runs (a shipped kernel's
                                       # claimed function, or the kernel traced for any target)
    kind: str = LAX
    pallas_targets: tuple[str, ...] = ()   # the Pallas lowerings a kernel is written for: "generic",
                                           # "tpu", "triton", "mosaic-gpu"
    needs: frozenset = frozenset()     # runner features: "devices:N", "hardware-prng", "remote-dma"
    not_applicable: str = ""           # why the installed JAX cannot express it: every runner refuses it
                                       # with this reason

    @property
    def devices(self) -> int:
        """The devices the program runs on ("devices:N" in ``needs``; 1 without)."""
        return max([int(n.split(":", 1)[1]) for n in self.needs if n.startswith("devices:")] or [1])
