"""Rule families. Importing this package registers every rule (one module per family)."""
import importlib

FAMILIES = (
    "lax_elementwise", "lax_special", "lax_conversions", "lax_structure", "lax_indexing",
    "lax_reductions", "lax_ordering", "lax_contractions", "lax_linalg",
    "control_flow", "state", "random", "spmd", "pallas", "pallas_tpu", "pallas_triton", "pallas_mosaic_gpu", "fusion",
)

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
