"""XLA's windows (ReduceWindow, SelectAndScatter, ConvGeneralDilated): one flat operand index per
(output position, window element), -1 for padding and base-dilation holes. Shared by the
reduction and contraction families (a convolution's windows are reduce_window's)."""
from __future__ import annotations

import numpy as np


def window_indices(shape, window_dimensions, window_strides, padding,
                   base_dilation=None, window_dilation=None) -> np.ndarray:
    """Flat indices into an array of ``shape`` for every window element, shape
    ``out_shape + (prod(window_dimensions),)``; -1 where the window element lies in the padding
    or in a base-dilation hole (XLA ReduceWindow semantics; negative padding crops)."""
    nd = len(shape)
    base_dilation = base_dilation or (1,) * nd
    window_dilation = window_dilation or (1,) * nd
    per_dim = []
    for n, w, s, (lo, hi), bd, wd in zip(shape, window_dimensions, window_strides, padding,
                                         base_dilation, window_dilation):
        dilated = (n - 1) * bd + 1 if n else 0
        extent = (w - 1) * wd + 1
        out = max(0, (lo + dilated + hi - extent) // s + 1) if lo + dilated + hi >= extent else 0
        c = np.arange(out)[:, None] * s + np.arange(w)[None, :] * wd - lo
        valid = (c >= 0) & (c < dilated) & (c % bd == 0)
        per_dim.append((np.where(valid, c // bd, -1), out, w))
    out_shape = tuple(o for _, o, _ in per_dim)
    wins = tuple(w for _, _, w in per_dim)
    flat = np.zeros(out_shape + wins, np.int64)
    valid = np.ones(out_shape + wins, bool)
    stride = 1
    for d in reversed(range(nd)):
        idx = per_dim[d][0]
        bshape = [1] * (2 * nd)
        bshape[d], bshape[nd + d] = idx.shape
        idx = idx.reshape(bshape)
        flat = flat + np.where(idx >= 0, idx, 0) * stride
        valid = valid & (idx >= 0)
        stride *= shape[d]
    # (the window size spelled out: -1 cannot be inferred when the output is empty)
    return np.where(valid, flat, -1).reshape(out_shape + (int(np.prod(wins, dtype=np.int64)),))


def windows(x: np.ndarray, pad_value, *window) -> np.ndarray:
    """The windows of ``x`` (``window``: window_indices' arguments after the shape), padding and
    base-dilation holes holding ``pad_value``."""
    idx = window_indices(x.shape, *window)
    vals = np.ravel(x)[np.where(idx >= 0, idx, 0)] if x.size else np.zeros(idx.shape, x.dtype)
    return np.where(idx >= 0, vals, np.asarray(pad_value, x.dtype)).astype(x.dtype)
