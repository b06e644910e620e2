"""A child worker: run one arm of one case once, in a process of its own.

`qualify` runs this under compute-sanitizer (and, for fault isolation, on its own), because a
faulting kernel poisons the CUDA context of the whole process. It builds the arm exactly as the
engine does, launches it once on poisoned outputs, synchronises the device, and prints one JSON
line: {"status": "ok"} or {"status": "fault"|"error", "message": ...}.

    python -m qualify.run.worker PLAN --case T=640 --side candidate
"""

from __future__ import annotations

import argparse
import json
import sys

from qualify.build.arms import kernel_spec
from qualify.build.nvrtc import compile_kernel
from qualify.errors import QualifyError
from qualify.plan.load import load_plan
from qualify.run import inputs as input_gen
from qualify.run.arms import ArmExec
from qualify.run.device import CudaDevice, KernelFault


def run_once(plan_path: str, case_id: str, side: str, ordinal: int = 0) -> None:
    loaded = load_plan(plan_path)
    case = next((c for c in loaded.cases if c.id == case_id), None)
    if case is None:
        raise QualifyError(f"no case {case_id!r} in the plan")
    arm = case.arms[side]
    with CudaDevice(ordinal) as dev:
        compiled = compile_kernel(kernel_spec(loaded, side, dev.info.arch))
        kernel = dev.load_kernel(side, compiled, arm.launch.shared_bytes)
        buffers = {b.name: dev.alloc(b.nbytes) for b in arm.buffers}
        for spec in loaded.plan.workload.buffers:
            if spec.role == "input":
                dev.upload(buffers[spec.name], input_gen.generate(loaded.plan.seeds, case.id, spec, arm.buffer(spec.name)))
            elif spec.role == "scratch":
                dev.poison(buffers[spec.name])
        ex = ArmExec(side, kernel, arm, buffers, [b.name for b in arm.buffers if b.role == "output"])
        ex.bind_args()
        ex.run_once(dev)
        dev.check_idle()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qualify.run.worker")
    parser.add_argument("plan")
    parser.add_argument("--case", required=True)
    parser.add_argument("--side", choices=("base", "candidate"), required=True)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        run_once(args.plan, args.case, args.side, args.device)
    except KernelFault as exc:
        print(json.dumps({"status": "fault", "code": exc.code, "message": exc.message}), flush=True)
        return 3
    except QualifyError as exc:
        print(json.dumps({"status": "error", "message": exc.one_line()}), flush=True)
        return 2
    print(json.dumps({"status": "ok"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
