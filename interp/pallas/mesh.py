"""The public base of kernels over a mesh (``mpmd_map``): what every dialect's mesh plan reads
from the equation and the steps they share.

``pl.kernel`` / ``core_map`` over a TPU core mesh (``interp.pallas.tpu.mesh.MeshPlan``) and
``plgpu.kernel`` over a Mosaic GPU mesh (``interp.pallas.mosaic_gpu.launch.GpuMeshPlan``) bind
``mpmd_map``: a kernel body run once per point of a mesh on whole operands. A dialect's plan
subclasses :class:`MeshKernel`, reads what its mesh adds in ``__init__`` and defines
``run(args) -> outputs`` with these steps: :meth:`operand_buffers` (the operands' memory),
:meth:`allocate_scratch` (the body's scratch operands), :meth:`check_outputs_written` and
:meth:`outputs` (the results).
"""
from __future__ import annotations

import numpy as np

from ..evaluator import get_plan, split_jaxpr
from ..refs import Ref
from .grid import kernel_name, operand_names
from .memory import (KernelRef, allocate_scratch, check_outputs_written, fill_uninitialized,
                     logical_value, physical_operand, physical_value, refuse_direct_hbm_access)


class MeshKernel:
    """One ``mpmd_map`` equation's kernel, read once and run per call.

    Read from the equation: ``options``; ``mesh`` (the one mesh); ``kernel_plan`` and
    ``kernel_consts`` (the body); ``name`` (the kernel's); ``names`` (readable names of the body's
    operands: inputs, outputs, then scratch); ``invars`` (the body's); ``num_inputs``;
    ``out_avals``, ``num_outputs`` and ``out_physical`` (each output's (shape, dtype, key impl) as
    held: typed keys as their key data); ``aliases`` (output -> aliased input);
    ``compiler_params``."""

    def __init__(self, eqn):
        p = eqn.params
        self.options = eqn.options
        meshes, jaxprs = p["meshes"], p["jaxprs"]
        if len(meshes) != 1 or p.get("external_meshes"):
            raise eqn.unsupported("mpmd_map with several meshes (MPMD) or external meshes")
        self.mesh = meshes[0]
        kernel_jaxpr, self.kernel_consts = split_jaxpr(jaxprs[0])
        refuse_direct_hbm_access(p, p.get("name") or kernel_name(kernel_jaxpr) or "kernel")
        self.kernel_plan = get_plan(kernel_jaxpr, eqn.options)
        self.name = p.get("name") or kernel_name(kernel_jaxpr) or "kernel"
        self.out_avals = p["out_avals"]
        self.names = operand_names(kernel_jaxpr)
        self.num_inputs = len(eqn.in_avals)
        self.num_outputs = len(self.out_avals)
        self.out_physical = [physical_operand(a, self.names[self.num_inputs + o])
                             for o, a in enumerate(self.out_avals)]
        self.aliases = {o: i for i, o in dict(p.get("input_output_aliases") or {}).items()}
        self.invars = kernel_jaxpr.invars
        self.compiler_params = p.get("compiler_params")

    def operand_buffers(self, args) -> tuple[list, list]:
        """(buffers, written-masks) of the kernel's whole operands: copies of the inputs (the
        kernel may write them; typed keys are held as their key data, as in pallas_call: Mosaic
        physicalizes them the same way), then the outputs (never-written memory, or the aliased
        input's buffer)."""
        opts = self.options
        # A Ref operand (JAX >= 0.11's pl.kernel / pl.core_map over refs the body closes over or
        # takes: "treated as if it is read-from and written-to", helpers.py kernel): the kernel
        # works on that memory itself.
        arrays = [a.array if isinstance(a, Ref) else np.array(physical_value(a), copy=True)
                  for a in args]
        inits = [None] * len(arrays)
        for o, (shape, dtype, _) in enumerate(self.out_physical):
            if o in self.aliases:
                arrays.append(arrays[self.aliases[o]])
                inits.append(None)
            else:
                arrays.append(fill_uninitialized(shape, dtype, opts.uninitialized))
                inits.append(np.zeros(shape, bool) if opts.uninitialized == "raise" else None)
        return arrays, inits

    def allocate_scratch(self, aval, name, run) -> KernelRef:
        """A scratch operand of the body (``aval``), belonging to ``run``."""
        return allocate_scratch(aval, name, run, self.options)

    @staticmethod
    def check_outputs_written(run, refs, inits) -> None:
        """uninitialized='raise': every element of the output buffers ``refs`` (with their
        written-masks ``inits``) was written by the kernel (``run`` names it)."""
        check_outputs_written(run, refs, inits)

    def outputs(self, arrays) -> list:
        """The results: the output buffers (after the inputs' in ``arrays``) as logical values."""
        return [logical_value(impl, a)
                for (_, _, impl), a in zip(self.out_physical, arrays[self.num_inputs:])]
