#!/usr/bin/env python3
"""Compile every protocol's kernels for the architectures it declares, with the installed NVRTC.

CPU CI runs this once per CUDA generation (a venv with `.[cu13]`, another with `.[cu12]`), so a
kernel or a header that one generation's NVRTC cannot compile is found before a GPU runner of that
generation meets it. It is `qualify plan check` for every protocol (the lock verified, both arms
compiled for every declared architecture, the launches checked against the compiled parameters),
with the generation asserted first: a venv that resolved the wrong extra fails instead of
compiling with the other generation and passing.

    python tools/compile_protocols.py                    # the installed generation
    python tools/compile_protocols.py --generation 12    # refuse unless NVRTC is CUDA 12

One line per protocol; the exit code is the most severe protocol's (qualify's codes: 4 a build
failed, 5 the wrong or a missing generation).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--generation", type=int, choices=(12, 13), help="the CUDA major the installed NVRTC must be (exit 5 otherwise)"
    )
    parser.add_argument("--protocols", type=Path, default=ROOT / "protocols", help="folder of protocol folders")
    args = parser.parse_args(argv)

    from qualify import generation
    from qualify.build.nvrtc import nvrtc_version, toolkit_include_dir
    from qualify.commands.check import check_plan
    from qualify.errors import ExitCode, QualifyError

    try:
        nvrtc = generation.CudaVersion.parse(nvrtc_version())
        headers = generation.header_version(toolkit_include_dir())
    except QualifyError as exc:
        print(f"compile_protocols: {exc.one_line()}", file=sys.stderr)
        return int(exc.exit_code)
    if args.generation is not None and nvrtc.major != args.generation:
        want = generation.GENERATIONS[args.generation]
        print(
            f"compile_protocols: NVRTC {nvrtc} is installed, generation {args.generation} was asked for: {want.pip}",
            file=sys.stderr,
        )
        return int(ExitCode.DEVICE)
    print(f"NVRTC {nvrtc}, headers {headers} in {toolkit_include_dir()}")

    plans = sorted(args.protocols.glob("*/plan.json"))
    if not plans:
        print(f"compile_protocols: no */plan.json under {args.protocols}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    worst = ExitCode.QUALIFIED
    for plan in plans:
        name = plan.parent.name
        started = time.monotonic()
        try:
            checked = check_plan(plan)
        except QualifyError as exc:
            print(f"FAIL  {name}: {exc.one_line()}")
            worst = max(worst, exc.exit_code, key=_severity)
            continue
        took = time.monotonic() - started
        if not checked.compiled:
            print(f"ok    {name}: library arms (built with nvcc): nothing for NVRTC ({took:.1f} s)")
            continue
        sides = sorted({side for side, _ in checked.compiled})
        status = "ok  " if checked.ok else "FAIL"
        fits = "every launch fits" if checked.ok else "a launch does not fit its architecture"
        print(
            f"{status}  {name}: {' and '.join(sides)} for {', '.join(checked.archs)}: {len(checked.compiled)} "
            f"CUBINs, {fits} ({took:.1f} s)"
        )
        if not checked.ok:
            worst = max(worst, ExitCode.BUILD, key=_severity)
    return int(worst)


def _severity(code) -> int:
    """Environment before build before anything else, as `qualify doctor` orders its failures."""
    order = {5: 3, 4: 2}
    return order.get(int(code), 1 if int(code) else 0)


if __name__ == "__main__":
    sys.exit(main())
