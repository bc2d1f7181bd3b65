"""The Pallas engine of the reference: grid loop and block specs (``grid``), kernel memory with
poisoning and names (``memory``), the DMA / semaphore model with race detection (``dma``)."""
from .grid import CallPlan, KernelRun, current_run  # noqa: F401
from .memory import KernelRef, poison_value  # noqa: F401
