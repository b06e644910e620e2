"""A child worker: run one arm's cases once each, in a process of its own.

A faulting kernel poisons the CUDA context of its whole process, and a hung one never returns.
So before the parent times anything, each arm runs here, case by case, exactly as the engine
builds it (and compute-sanitizer runs it here too). One JSON line per event on stdout:

    {"event": "start", "case": "T=640"}
    {"event": "buffers", "case": "T=640", "side": "base", "buffers": [{"name", "role", "ptr", "nbytes", "guard"}]}
    {"event": "done", "case": "T=640"}
    {"event": "fault", "case": "T=640", "code": 700, "message": "..."}   (then the process exits)
    {"event": "fault", "case": "T=640", "code": "overrun", "message": "... past the end of ..."}   (likewise)
    {"event": "error", "case": ..., "message": ...}

    python -m qualify.run.worker PLAN --side candidate --case T=640 [--case ...] [--library X.so]
"""

from __future__ import annotations

import argparse
import json
import sys

from qualify.errors import QualifyError
from qualify.plan.load import load_plan
from qualify.plan.model import ARM_SIDES, LibraryArm, PythonArm
from qualify.run import bounds, golden_stage, python_arm
from qualify.run.arms import compile_and_load
from qualify.run.device import CudaDevice, KernelFault
from qualify.run.device_protocol import Device
from qualify.run.library import EntryPointFailed, load_library
from qualify.run.stages.case_setup import InputPrefetch


def emit(**event) -> None:
    print(json.dumps(event), flush=True)


def _load_arm(loaded, side: str, dev: Device, case_ids, by_id, library: str | None):
    """The arm's kernel (compiled for this device), its library entry point or its Python callable."""
    arm = loaded.plan.arm(side)
    if isinstance(arm, LibraryArm):
        path = loaded.library(side, {side: library} if library else None)
        if path is None:
            raise QualifyError(f"the {side} arm names no library: pass --library")
        return load_library(side, path, arm, f"arms.{side}.library")
    if isinstance(arm, PythonArm):  # imported here, in the worker: compute-sanitizer sees its kernels
        return python_arm.load(loaded, side, dev.python_runtime())
    return compile_and_load(dev, loaded, side, [by_id[c] for c in case_ids])[1]


def run_cases(plan_path: str, case_ids: list[str], side: str, ordinal: int = 0, library: str | None = None) -> int:
    loaded = load_plan(plan_path)
    golden = golden_stage.open_golden(loaded)  # golden inputs (a mask) come from it
    by_id = {c.id: c for c in loaded.cases}
    unknown = [c for c in case_ids if c not in by_id]
    if unknown:
        raise QualifyError(f"no case {unknown[0]!r} in the plan")
    current = None
    # every case's inputs generated ahead in the background while the arm builds and runs: the
    # worker's wall is then its slowest input, not the sum (the preflight is on a trial's path)
    prefetch = InputPrefetch(loaded.plan, golden, [by_id[c] for c in case_ids], sides=(side,), hashed=False)
    try:
        prefetch.start(by_id[case_ids[0]])
        with CudaDevice(ordinal) as dev:
            kernel = _load_arm(loaded, side, dev, case_ids, by_id, library)
            for cid in case_ids:
                current = cid
                emit(event="start", case=cid)
                arm = by_id[cid].arms[side]
                # outputs and scratch (the workload's and the arm's own) each with a guard after it
                buffers = bounds.allocate(dev, arm)
                # before the launch: a sanitizer's faulting address is named by the buffer it lies near
                emit(event="buffers", case=cid, side=side, buffers=bounds.layout(dev, arm, buffers))
                inputs = prefetch.take(by_id[cid]).inputs[side]
                overruns = bounds.run_guarded(dev, side, kernel, cid, arm, inputs, buffers)
                bounds.free(dev, buffers)  # the context is intact: memcheck's leak check stays quiet
                if overruns:  # the arm wrote past a buffer: as wrong as a fault, and the case goes
                    emit(event="fault", case=cid, code="overrun", message="; ".join(o.line() for o in overruns))
                    return 3
                emit(event="done", case=cid)
    except KernelFault as exc:
        emit(event="fault", case=current, code=exc.code, message=exc.message)
        return 3
    except EntryPointFailed as exc:
        emit(event="fault", case=current, code=exc.status, message=exc.message)
        return 3
    except QualifyError as exc:
        emit(event="error", case=current, message=exc.one_line())
        return 2
    finally:
        prefetch.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qualify.run.worker")
    parser.add_argument("plan")
    parser.add_argument("--case", dest="cases", action="append", required=True)
    parser.add_argument("--side", choices=ARM_SIDES, required=True)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--library", help="shared-library arms: the build to load (qualify compare's argument)")
    args = parser.parse_args(argv)
    try:
        return run_cases(args.plan, args.cases, args.side, args.device, args.library)
    except QualifyError as exc:
        emit(event="error", case=None, message=exc.one_line())
        return 2


if __name__ == "__main__":
    sys.exit(main())
