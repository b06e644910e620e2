"""The machine-code fact of a trial (`Trial.code`) held to what the trial and its plan give.

A free A/A (identical code and launches) makes every gate read a ratio of exactly 1, so the fact
must follow from the evidence, never stand alone: its status from its digests, `free_aa` from
status and `launches_match`, the architecture from the device and the plan's target for it, the
kind of code from the plan's arms, and NVRTC arms' `launches_match` from the plan's resolved
launches and the kernel names the trace saw. The digests themselves cannot be recomputed offline
(the CUBINs are not stored); they are held to the rest. Where the fact compares the functions each
launch executes (scope 'launched'), each arm's digest must be the one its launches' digests give,
and the functions it names as launched must be the kernels the trace saw that arm launch.
"""

from __future__ import annotations

from dataclasses import replace

from qualify.build.machine_code import sequence_digest
from qualify.evaluate.kernels import traced_launches_match
from qualify.plan.model import ARM_SIDES, LibraryArm, Plan, PythonArm
from qualify.plan.model.hardware import target_for
from qualify.plan.resolve import resolve_cases
from qualify.results.model import CodeIdentity, Trial


def code_problems(trial: Trial, plan: Plan) -> list[str]:
    """Every way the trial's machine-code fact contradicts its own parts, its trace or its plan."""
    return _code_problems(trial) + _code_plan_problems(trial, plan)


def short_digest(digest: object) -> str:
    """A digest as the record's problems quote it."""
    return f"{str(digest)[:16]}…"


def _code_problems(trial: Trial) -> list[str]:
    """The machine-code fact against itself and the trial's trace: a free A/A makes every gate read
    a ratio of exactly 1, so it must follow from what the trial holds, never stand alone."""
    code = trial.code
    if code is None:
        return []
    out = []
    digests = [code.digests.get(side) for side in ARM_SIDES]
    if None not in digests and (digests[0] == digests[1]) != (code.status == "identical"):
        out.append(
            f"code.status is {code.status!r}, but its digests {short_digest(digests[0])} and "
            f"{short_digest(digests[1])} {'agree' if digests[0] == digests[1] else 'differ'}"
        )
    if code.free_aa != (code.status == "identical" and code.launches_match is True):
        out.append(
            f"code.free_aa is {code.free_aa}, but the code is {code.status} and its launches_match "
            f"is {code.launches_match}"
        )
    if code.scope == "launched":
        out.extend(_launched_problems(code, trial))
    if code.arms in ("library", "python"):
        traced = traced_launches_match(trial.cases)
        if traced is not None and code.launches_match != traced:
            out.append(f"code.launches_match is {code.launches_match}, but the kernel trace and outputs say {traced}")
    return out


def _code_plan_problems(trial: Trial, plan: Plan) -> list[str]:
    """The machine-code fact against the plan and the trial's device: the architecture compared is
    the one the trial ran on, the kind of code the plan's arms', and NVRTC arms' `launches_match`
    what the plan and the trace give."""
    code = trial.code
    if code is None:
        return []
    out = []
    kind = code_kind(plan)
    device_arch = trial.provenance.device.arch
    # a library's code is the fat binary's entry for the device; an NVRTC arm's is the plan's
    # target for it (sm_90a where the plan lists that and not sm_90)
    expected = (
        device_arch
        if kind in ("library", "python")
        else (target_for(plan.hardware.architectures, device_arch) or device_arch)
    )
    if code.arch != expected:
        out.append(
            f"code.arch is {code.arch!r}, but the trial ran on {device_arch}"
            + (f", for which the plan compiles {expected}" if expected != device_arch else "")
        )
    if code.arms != kind:
        out.append(f"code.arms is {code.arms!r}, but the plan's arms are {kind} arms")
    elif kind == "nvrtc":
        out.extend(_kernel_launch_problems(code, trial, plan))
    return out


def code_kind(plan: Plan) -> str:
    """The kind of machine code a plan's arms give: a Python arm on either side makes it the
    JIT's cubins (compared only when both are Python; otherwise stated unknown)."""
    if any(isinstance(plan.arm(side), PythonArm) for side in ARM_SIDES):
        return "python"
    return "library" if isinstance(plan.arms.base, LibraryArm) else "nvrtc"


def _kernel_launch_problems(code: CodeIdentity, trial: Trial, plan: Plan) -> list[str]:
    """NVRTC arms: `launches_match` as the plan and the trace give it. The run compares the lowered
    kernel names and every case's resolved launch (grid, block, shared memory, buffers, arguments,
    parameters); the second comes from the plan alone, the first from the kernel names the trace
    saw each arm launch."""
    stated = code.launches_match
    if code.status != "unknown" and stated is None:
        return [f"code.launches_match is missing, but the {code.status} code of NVRTC arms always compares launches"]
    if stated is not True:
        # False is the cautious claim (the timing is judged as measured); it is still refused
        # where the trace shows both arms launching the same kernels and the plan the same launch
        if stated is False and _traced_kernel_names_match(trial) is True and _plan_launch_differs(plan) is None:
            return [
                "code.launches_match is False, but the plan launches both arms alike and the trace saw the same kernels"
            ]
        return []
    out = []
    differs = _plan_launch_differs(plan)
    if differs is not None:
        out.append(f"code.launches_match is True, but the plan launches the arms differently in case {differs}")
    if _traced_kernel_names_match(trial) is False:
        out.append("code.launches_match is True, but the kernel trace saw the arms launch different kernels")
    return out


def _plan_launch_differs(plan: Plan) -> str | None:
    """The first case whose two arms the plan resolves to different launches; None if none does."""
    for case in resolve_cases(plan):
        if replace(case.arms["base"], side="") != replace(case.arms["candidate"], side=""):
            return case.id
    return None


def _traced_kernel_names_match(trial: Trial) -> bool | None:
    """Whether the traced calls of both arms launched kernels of the same names: False as soon as
    one traced case says otherwise, True when every case was traced and agrees, None without a trace."""
    traced = [c.trace for c in trial.cases if c.trace and all(c.trace.get(side) for side in ARM_SIDES)]
    for trace in traced:
        names = [{k.name for call in trace[side] for k in call.kernels} for side in ARM_SIDES]
        if names[0] != names[1]:
            return False
    return True if traced and len(traced) == len(trial.cases) else None


def _launched_problems(code: CodeIdentity, trial: Trial) -> list[str]:
    """A fact of launched functions: each arm's digest is its launches' (so the status follows
    from the launches, pair by pair), and the trace bears the functions it names: as many distinct
    kernels per arm as it lists, and the arms' kernels the same exactly where it says they are. (The
    trace's names are CUPTI's, not always the lowered names compiled, so they are compared within
    the trace, not against the fact's spelling.)"""
    out = []
    named: dict[str, set[str]] = {}
    for side in ARM_SIDES:
        launches = code.launched.get(side, [])
        named[side] = {f.name for f in launches}
        if side in code.digests and code.digests[side] != sequence_digest([f.digest for f in launches]):
            out.append(
                f"code.digests.{side} is {short_digest(code.digests[side])}, not the digest of the "
                f"{len(launches)} launches code.launched.{side} lists"
            )
        if any(not f.functions or f.functions[0] != f.name for f in launches):
            out.append(f"code.launched.{side}: a launch whose functions do not start with the kernel it names")
    traced = [c for c in trial.cases if c.trace and all(c.trace.get(side) for side in ARM_SIDES)]
    if not named["base"] or not traced or len(traced) != len(trial.cases):
        return out
    seen = {
        side: {k.name for c in traced for call in (c.trace or {})[side] for k in call.kernels} for side in ARM_SIDES
    }
    for side in ARM_SIDES:
        if len(seen[side]) != len(named[side]):
            out.append(
                f"code.launched.{side} names {len(named[side])} distinct kernels, but the trace saw the {side} "
                f"arm launch {len(seen[side])}"
            )
    if (seen["base"] == seen["candidate"]) != (named["base"] == named["candidate"]):
        out.append(
            "code.launched names the arms' kernels as "
            + ("the same" if named["base"] == named["candidate"] else "different")
            + ", but the trace saw "
            + ("the same" if seen["base"] == seen["candidate"] else "different")
            + " kernels"
        )
    return out
