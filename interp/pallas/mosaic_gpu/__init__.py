"""The Pallas Mosaic GPU engine (``plgpu``), on the dialect-free core (``interp.pallas``)."""
