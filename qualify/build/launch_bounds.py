"""A kernel's launch bounds as compiled, read from its CUBIN.

`__launch_bounds__(N)` becomes PTX `.maxntid N, 1, 1`, and ptxas writes it into the kernel's
`.nv.info.<lowered name>` section as EIATTR_MAX_THREADS (three u32: x, y, z); `.reqntid` becomes
EIATTR_REQNTID. The driver refuses a launch whose block has more threads than the product of
`maxntid` (or another shape than `reqntid`), so `plan check` compares each case's block with
them, per architecture (a source may declare other bounds under `__CUDA_ARCH__`).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from qualify.build.elf import ElfProblem, parse
from qualify.build.params import _records

EIATTR_MAX_THREADS = 0x05
EIATTR_REQNTID = 0x10


@dataclass(frozen=True)
class LaunchBounds:
    max_threads: tuple[int, int, int] | None  # .maxntid, None when the kernel declares none
    required: tuple[int, int, int] | None  # .reqntid

    @property
    def max_per_block(self) -> int | None:
        return math.prod(self.max_threads) if self.max_threads else None


def launch_bounds(cubin: bytes, lowered_name: str) -> LaunchBounds:
    """The compiled bounds of `lowered_name` (ElfProblem if its .nv.info section is unreadable)."""
    elf = parse(cubin)
    section = elf.section(f".nv.info.{lowered_name}")
    if section is None:
        raise ElfProblem(f"the CUBIN has no .nv.info section for {lowered_name}")
    found: dict[int, tuple[int, int, int]] = {}
    for attr, value in _records(elf.contents(section)):
        if attr in (EIATTR_MAX_THREADS, EIATTR_REQNTID):
            if len(value) < 12:
                raise ElfProblem(f"attribute {attr:#x} holds {len(value)} bytes, not three u32")
            found[attr] = struct.unpack_from("<III", value)
    return LaunchBounds(found.get(EIATTR_MAX_THREADS), found.get(EIATTR_REQNTID))
