"""Blocks and warps per SM a launch configuration allows on a device: the occupancy calculator's
arithmetic (CUDA's cuda_occupancy.h), from limits read off the device.

Four limits cap the resident blocks per SM; the smallest wins:
- warps: the SM's warp slots over the block's warps;
- blocks: the SM's block slots;
- registers: each warp's registers rounded up to the allocation unit, the SM's register file split
  evenly across its sub-partitions (a warp's registers live in one), and the warps that fit
  grouped into whole blocks;
- shared memory: static + dynamic + the per-block reserve, rounded up to the allocation unit,
  against the SM's shared memory at its largest carveout (the driver picks the carveout; with no
  preference set it may choose the largest, so this is the most the kernel can get).
A block that exceeds a per-block limit (threads, registers, shared memory) cannot launch: 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from qualify.results.model import DeviceLimits

# Architecture constants that no device attribute reports (cuda_occupancy.h, compute capability
# 7.0 to 9.0): registers are allocated per warp in units of 256, shared memory in units of 128
# bytes, and an SM's register file is split across 4 sub-partitions.
REGISTER_UNIT = 256
SHARED_UNIT = 128
SUB_PARTITIONS = 4


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    limiter: str  # "warps", "blocks", "registers", "shared memory", or what the block exceeds


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(
    limits: DeviceLimits, threads_per_block: int, registers_per_thread: int, static_shared: int, dynamic_shared: int
) -> Occupancy:
    warps_per_block = -(-threads_per_block // limits.warp_size)
    regs_per_warp = _round_up(registers_per_thread * limits.warp_size, limits.register_unit)
    shared = static_shared + dynamic_shared
    shared_per_block = _round_up(shared + limits.reserved_shared_per_block, limits.shared_unit)
    if threads_per_block < 1 or threads_per_block > limits.max_threads_per_block:
        return Occupancy(0, 0, "threads per block")
    if regs_per_warp * warps_per_block > limits.registers_per_block:
        return Occupancy(0, 0, "registers per block")
    if shared > limits.shared_per_block_optin:
        return Occupancy(0, 0, "shared memory per block")
    caps = {
        "warps": (limits.max_threads_per_sm // limits.warp_size) // warps_per_block,
        "blocks": limits.max_blocks_per_sm,
        "registers": (
            (limits.registers_per_sm // limits.sub_partitions // regs_per_warp)
            * limits.sub_partitions
            // warps_per_block
            if regs_per_warp
            else limits.max_blocks_per_sm
        ),
        "shared memory": limits.shared_per_sm // shared_per_block,
    }
    limiter = min(caps, key=lambda k: caps[k])  # ties go to the first named, in the order above
    blocks = caps[limiter]
    return Occupancy(blocks, blocks * warps_per_block, limiter)
