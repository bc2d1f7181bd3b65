"""One cluster of a Mosaic GPU kernel as it runs: the blocks' allocations (and their
counterparts in the other blocks), what is in flight, and the check every access of its
warpgroups goes through."""
from __future__ import annotations

from ..grid import maybe_current_run
from . import tcgen05, tma, wgmma
from .races import Footprint, check_shared
from .warpgroup import WarpgroupRun


class ClusterState:
    """What the warpgroups of one cluster share: collective allocations, the asynchronous
    operations in flight, the warpgroups' SMEM writes, and the mesh geometry axis_index reads
    (``KernelRun.mesh`` of its warpgroups)."""
    __slots__ = ("point", "axes", "sizes", "thread_name", "tma", "writes", "concurrent",
                 "tensor_core", "tmem_loads", "launch", "runs", "unfinished", "plan",
                 "allocations", "allocation_of", "prototypes", "generic", "tma_sources",
                 "tmem_stores")

    def __init__(self, plan, point):
        self.point = point
        self.axes, self.sizes = plan.axes, plan.sizes
        self.thread_name = plan.thread_name
        self.tma = []       # in-flight TMA writes to SMEM: (Footprint, barrier, phase)
        self.tma_sources = []   # in-flight TMA reads of GMEM: (Footprint, barrier, phase)
        self.writes = []    # warpgroups' SMEM writes: (Footprint, writer run, writer epoch)
        self.generic = []   # plain SMEM writes: (Footprint, writer, epoch, {fencing thread id:
        #                     (thread, its epoch at the fence)}) (tma.generic_write)
        self.concurrent = plan.num_threads * len(plan.blocks) > 1   # several threads access SMEM
        self.tensor_core = []   # tcgen05 operations in flight (TensorCoreOp)
        self.tmem_loads = []    # async_load_tmem records: [Footprint, reader run, retire epoch]
        self.tmem_stores = []   # async_store_tmem records: [Footprint, storer, commit epoch]
        self.launch = None          # the Launch this cluster belongs to
        self.runs = {}              # (block, warpgroup) -> (run, refs), until it starts
        self.unfinished = 0         # warpgroups not finished
        self.plan = plan
        self.allocations = {}   # allocation key -> {block: [refs]} (scratch, collective scoped)
        self.allocation_of = {}   # id(ref) -> (allocation key, position)
        self.prototypes = {}      # allocation key -> what its refs are made from

    @property
    def globals(self) -> dict:
        """get_global buffers (interp/rules/pallas.py get_global): Mosaic GPU reserves them over
        every axis of the kernel (lowering.py _get_global_lowering_rule: collective_axes = all
        axis names), one per launch shared by its clusters."""
        return self.launch.globals

    # -- clusters: the same allocation in another block of the cluster ---------------------------
    def block_allocation(self, key, block, prototypes, run) -> list:
        """The refs of allocation ``key`` in ``block`` (made from ``prototypes`` the first time,
        by whichever block of the cluster asks first)."""
        per_block = self.allocations.setdefault(key, {})
        self.prototypes[key] = prototypes
        refs = per_block.get(block)
        if refs is None:
            refs = per_block[block] = [p.fresh(run) for p in prototypes]
            for i, r in enumerate(refs):
                self.allocation_of[id(r)] = (key, i)
        return refs

    def register_block_allocation(self, key, block, refs) -> None:
        self.allocations.setdefault(key, {})[block] = refs
        for i, r in enumerate(refs):
            self.allocation_of[id(r)] = (key, i)

    def peer(self, ref, block):
        """``ref`` (a kernel scratch buffer or a block-wide run_scoped allocation) as allocated
        in ``block`` of this cluster, or None for memory with no counterpart there."""
        found = self.allocation_of.get(id(ref))
        if found is None:
            return None
        key, i = found
        refs = self.allocations[key].get(block)
        if refs is None:   # the block has not reached the run_scoped yet: allocate it now
            refs = self.block_allocation(key, block, self.prototypes[key], maybe_current_run())
        return refs[i]

    def group(self, block, axes) -> list:
        """The blocks of this cluster that differ from ``block`` only along the cluster axes
        ``axes`` (composite axes flattened), in row-major order: a collective's participants."""
        names = list(self.plan.cluster_names)
        flat = set()
        for a in axes:
            flat |= set(a) if isinstance(a, tuple) else {a}
        free = [names.index(a) for a in flat if a in names]
        return [b for b in self.plan.blocks
                if all(b[d] == block[d] for d in range(len(block)) if d not in free)]

    def barrier_group(self, block, axes) -> list:
        """The blocks an arrival on a plgpu.ClusterBarrier over ``axes`` reaches, ``block``
        included: those differing from it along one entry of ``axes`` only (an axis, or a tuple
        of axes taken together), in row-major order. Mosaic GPU ORs one collective mask per
        entry and expects sum(sizes) - len(entries) + 1 arrivals per arriving thread
        (mosaic/gpu/utils.py CollectiveBarrierRef.initialize): blocks differing along two
        entries are not synchronized by it (barrier_arrive/c1)."""
        members = {tuple(block)}
        for entry in axes:
            members.update(self.group(block, (entry,)))
        return [b for b in self.plan.blocks if b in members]

    def check_access(self, ref, index, kind: str) -> None:
        """The access hook of kernel refs (KernelRef._before_access): a warpgroup's access
        checked against the asynchronous operations in flight (each kind's rule is in its
        module: ``tma``, ``tcgen05``, ``wgmma``), other warpgroups' SMEM writes and other
        clusters' GMEM accesses (``races``)."""
        run = maybe_current_run()
        if not isinstance(run, WarpgroupRun):
            return
        smem, gmem = "smem" in ref.kind, "gmem" in ref.kind
        # SMEM, and GMEM the blocks and threads of the cluster share (check_shared)
        shared = self.concurrent and (smem or gmem)
        between = self.launch.between_clusters if gmem else None   # GMEM other clusters share
        proxy = run.async_proxy
        if not self.tma and not run.wgmma and not self.launch.storing and not shared and \
                between is None and \
                not (self.tma_sources and kind != "read") and \
                not self.tensor_core and not self.tmem_stores and not run.cp_async and \
                not (smem and (kind != "read" or (proxy and self.generic))):
            return
        region = Footprint(ref, index)
        if smem:   # the async proxy's view (tma.generic_write, tma.check_proxy)
            if proxy:
                tma.check_proxy(self, run, region)
            elif kind != "read":
                tma.generic_write(self, run, region)
        tma.check_cp_async(run, region, kind)
        if self.tensor_core or self.tmem_stores:
            tcgen05.check_access(self, run, region, kind)
        tma.check_copies(self, run, region, kind)
        if self.tma_sources and kind != "read":
            tma.check_sources(self, run, region, kind)
        if shared:
            check_shared(self, run, region, kind)
        if between is not None:
            between.check(run, region, kind, proxy == tma.REDUCTION)
        if self.launch.storing:
            tma.check_stores(run, region, kind)
        wgmma.check_access(run, ref, region, kind)
