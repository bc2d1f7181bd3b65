"""Helpers for families of small programs: (name, fn, input shapes) x dtypes."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..case import Case, dtype_id, random_array
from ._elementwise import X64


def program_cases(family: str, name: str, fn: Callable, shapes, dtypes, *, primitives, profile="quick",
                  nightly_dtypes=(), modes=None, dot_bound=None, specials=0.25, int_inputs: dict | None = None,
                  positive=False, **kw):
    """One case per dtype: ``fn`` applied to random arrays of ``shapes`` (specials mixed in).

    ``int_inputs``: {argument position: (low, high, shape)} for index arguments (int32).
    """
    for dtype in tuple(dtypes) + tuple(nightly_dtypes):
        prof = "nightly" if dtype in nightly_dtypes else profile

        def inputs(rng, dtype=dtype):
            out = []
            n = len(shapes) + len(int_inputs or {})
            it = iter(shapes)
            for i in range(n):
                if int_inputs and i in int_inputs:
                    lo, hi, shp = int_inputs[i]
                    out.append(rng.integers(lo, hi, size=shp, endpoint=True).astype(np.int32))
                else:
                    out.append(random_array(rng, dtype, next(it), specials=specials, positive=positive))
            return out
        yield Case(id=f"{family}/{name}/{dtype_id(dtype)}", fn=fn, inputs=inputs, x64=dtype in X64,
                   primitives=tuple(primitives), profile=prof, modes=modes, dot_bound=dot_bound, **kw)
