"""`qualify doctor`: which roles can this host serve? One check per line, and the exit code that answers.

Three roles (ROLES): authoring plans (packages and NVRTC: a laptop without a GPU), running trials
(a GPU, its driver, the tools the plan's gates use) and a GPU CI runner (every tool). `--role`
asks for one, and the exit code answers for it; without it, doctor answers whether the host
serves any role.

A GPU runner needs the packages, NVRTC and its headers, a driver with a GPU the plan lists,
compute-sanitizer (and nvcc when a protocol builds shared libraries), and benefits from NVML. The
checks here read the host and never change it: qualify sets no clock, persistence or power state.

The CUDA driver is reached only through `qualify.run.device.CudaDevice` (the one driver importer);
NVML, which is read only and not the CUDA driver API, is read here as `qualify.run.telemetry` does.
Every probe of the host is a field of `Host`, so the decisions are tested on the CPU with fakes.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from qualify import generation
from qualify.errors import ExitCode, QualifyError
from qualify.results.model import DeviceInfo
from qualify.run.host import Host as Host
from qualify.run.host import real_host as real_host
from qualify.run.nvml_state import NvmlState as NvmlState

# History of the --json shape (bump on any incompatible change and say what changed):
#   1 — {"doctor_version", "ok", "exit_code", "device", "checks": [{"name", "status", "detail", "exit_code"}]}
#   2 — adds "cuda": {"driver", "bindings", "nvrtc", "headers", "generation", "extra"}, the versions the
#       `cuda` line shows (any may be null: not installed, no driver)
#   3 — adds "role" (the role asked with --role, or null) and "roles": [{"name", "serves", "does",
#       "blocked_by"}]; "ok" and "exit_code" answer for the role asked (none asked: any role)
DOCTOR_VERSION: Final = 3

RoleName = Literal["authoring", "running", "ci"]

# What each role is for, and the checks it needs (a check a role needs that fails blocks the role).
# Authoring needs no GPU: plan new, check and freeze compile with NVRTC; rehearse and golden make
# run on the CPU. Running needs the device and the tools the plan's gates use (without a plan,
# every tool); a GPU CI runner runs every protocol and the gpu tests, so it needs every tool.
ROLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "authoring": (
        "write and check plans: plan new, check, freeze and rehearse, golden make (no GPU needed)",
        ("packages", "nvrtc"),
    ),
    "running": (
        "run trials: run, compare, probe",
        ("packages", "nvrtc", "cuda", "gpu", "plan", "compute-sanitizer", "nvcc"),
    ),
    "ci": (
        "serve as a GPU CI runner: the gpu tests and every protocol",
        ("packages", "nvrtc", "cuda", "gpu", "compute-sanitizer", "nvcc"),
    ),
}
CI_TOOLS = ("compute-sanitizer", "nvcc")

# The generation-neutral packages; cuda-bindings, NVRTC and the runtime headers are named by the
# installed generation (qualify.generation), cuda-bindings and NVRTC before them as the line shows.
PACKAGES = ("cuda-pathfinder", "numpy", "pydantic", "nvidia-ml-py")

# NVML clock-event reasons that mean the SM runs below the clock it would otherwise hold. Idle (0x1),
# application-clock setting (0x2) and display clock (0x100) are states, not slowdowns.
SLOWDOWNS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "power brake",
}

APPLICATION_CLOCKS = 0x2  # NVML: the SM clock is limited by the application-clocks setting

Status = Literal["ok", "warn", "fail", "info"]


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    status: Status
    detail: str
    exit_code: int | None = None  # set when status is "fail": the code this problem maps to


class CudaVersions(BaseModel):
    """The CUDA stack's versions (qualify.generation): the driver's CUDA version, the cuda-bindings
    package, NVRTC, the runtime headers NVRTC compiles against, and the generation they make."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    driver: str | None
    bindings: str | None
    nvrtc: str | None
    headers: str | None
    generation: int | None
    extra: str | None  # the install extra of that generation, e.g. "cu13"


class Role(BaseModel):
    """Whether this host can serve one role, and the checks that keep it from doing so."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: RoleName
    serves: bool
    does: str
    blocked_by: list[str]


class DoctorReport(BaseModel):
    """The document `qualify doctor --json` prints (version DOCTOR_VERSION)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    doctor_version: Literal[3] = DOCTOR_VERSION
    ok: bool
    exit_code: int
    role: RoleName | None = None
    roles: list[Role] = []
    device: DeviceInfo | None
    cuda: CudaVersions
    checks: list[Check]


# ---------------------------------------------------------------------------------------------
# the decisions: pure functions of what the probes returned


def diagnose(
    host: Host,
    ordinal: int = 0,
    plan=None,
    needs_nvcc: bool = True,
    needs_sanitizer: bool = True,
    role: RoleName | None = "running",
) -> DoctorReport:
    """Run every check and say which roles the host serves. `ok` and the exit code answer for
    `role` (None: whether the host serves any role); the exit code is the first failure's among
    the checks that role needs, device/environment (5) before tools (6), since without a GPU
    nothing else can run."""
    checks = [_package_check(host)]
    cuda_checks, cuda = _toolchain_checks(host)
    checks += cuda_checks
    info, device_checks = _device_checks(host, ordinal, plan)
    checks += device_checks
    checks += _tool_checks(host, needs_nvcc, needs_sanitizer)
    roles = {name: _blocking(host, name, checks) for name in ROLES}
    served = [
        Role(name=name, serves=not blocked, does=ROLES[name][0], blocked_by=[c.name for c in blocked])
        for name, blocked in roles.items()
    ]
    if role is None:
        blocked = [] if any(r.serves for r in served) else roles["authoring"]
    else:
        blocked = roles[role]
    failures = [c.exit_code for c in blocked if c.exit_code is not None]
    order = (ExitCode.DEVICE, ExitCode.TOOL, ExitCode.BAD_INPUT)
    code = next((c for c in order if c in failures), failures[0] if failures else ExitCode.QUALIFIED)
    return DoctorReport(
        ok=not blocked, exit_code=int(code), role=role, roles=served, device=info, cuda=cuda, checks=checks
    )


def _package_check(host: Host) -> Check:
    packages = _packages(host)
    missing = [p for p in packages if host.package_version(p) is None]
    versions = ", ".join(f"{p} {host.package_version(p)}" for p in packages if p not in missing)
    if not missing:
        return Check(name="packages", status="ok", detail=versions)
    advice = generation.install_advice(_version(host.driver_cuda()))
    return Check(
        name="packages",
        status="fail",
        exit_code=ExitCode.DEVICE,
        detail=f"missing {', '.join(missing)}; {advice} ({versions})",
    )


def _toolchain_checks(host: Host) -> tuple[list[Check], CudaVersions]:
    """NVRTC and its headers, then the `cuda` line: every CUDA version the host has, agreeing."""
    checks = []
    nvrtc = headers = None
    try:
        nvrtc = host.nvrtc_version()
        include = host.include_dir()
        headers = host.header_version(include)
        checks.append(Check(name="nvrtc", status="ok", detail=f"NVRTC {nvrtc}, headers in {include}"))
    except QualifyError as exc:
        checks.append(Check(name="nvrtc", status="fail", exit_code=exc.exit_code, detail=exc.one_line()))
    found = CudaVersions(
        driver=host.driver_cuda(),
        bindings=host.package_version("cuda-bindings"),
        nvrtc=nvrtc,
        headers=headers,
        generation=None,
        extra=None,
    )
    cuda_check, cuda = _cuda_check(found)
    return [*checks, cuda_check], cuda


def _device_checks(host: Host, ordinal: int, plan) -> tuple[DeviceInfo | None, list[Check]]:
    """The GPU and its driver, the plan's devices (with --plan) and what NVML reads of it."""
    try:
        info = host.open_device(ordinal)
    except QualifyError as exc:
        return None, [
            Check(name="gpu", status="fail", exit_code=ExitCode.DEVICE, detail=f"device {ordinal}: {exc.one_line()}")
        ]
    gpu = (
        f"device {ordinal}: {info.name}, compute capability {info.compute_capability} ({info.arch}), "
        f"{info.sm_count} SMs, {info.uuid}"
    )
    checks = [
        Check(name="driver", status="ok", detail=f"driver {info.driver_version}, CUDA {info.cuda_driver_version}"),
        Check(name="gpu", status="ok", detail=gpu),
    ]
    if plan is not None:
        checks += _plan_checks(plan, info)
    return info, checks + _nvml_checks(host.nvml_state(info.uuid))


def _tool_checks(host: Host, needs_nvcc: bool, needs_sanitizer: bool) -> list[Check]:
    sanitizer_use = "the sanitizer gates of plans that declare acceptance.sanitizer"
    ncu = host.which("ncu")
    return [
        _tool_check(host, "compute-sanitizer", needs_sanitizer, sanitizer_use),
        _tool_check(host, "nvcc", needs_nvcc, "building the shared libraries `qualify compare` qualifies"),
        _cupti_check(host),
        Check(name="ncu", status="info", detail=ncu or "not found (optional: profiling leads only)"),
    ]


def _blocking(host: Host, role: str, checks: list[Check]) -> list[Check]:
    """The checks that keep the host from a role: failed ones it needs; for a CI runner, a tool
    the plan at hand does not need is still needed (the runner serves every protocol)."""
    needs = ROLES[role][1]
    out = [c for c in checks if c.status == "fail" and c.name in needs]
    if role == "ci":
        for c in checks:
            if c.name in CI_TOOLS and c.status != "fail" and host.which(c.name) is None:
                out.append(c.model_copy(update={"status": "fail", "exit_code": ExitCode.TOOL}))
    return out


def _version(text: str | None) -> generation.CudaVersion | None:
    try:
        return generation.CudaVersion.parse(text) if text else None
    except ValueError:
        return None


def _packages(host: Host) -> tuple[str, ...]:
    """cuda-bindings and the NVRTC and runtime wheels of the installed generation (the newest's
    names when cuda-bindings is missing), cuda-pathfinder after cuda-bindings, then the rest."""
    bindings = _version(host.package_version("cuda-bindings"))
    gen = (generation.for_major(bindings.major) if bindings else None) or generation.GENERATIONS[generation.NEWEST]
    first, *rest = gen.packages
    return (first, PACKAGES[0], *rest, *PACKAGES[1:])


def _cuda_check(found: CudaVersions) -> tuple[Check, CudaVersions]:
    """The `cuda` line: the four versions, the generation they make, and whether they agree."""
    stack = generation.CudaStack(
        driver=_version(found.driver),
        bindings=found.bindings,
        nvrtc=_version(found.nvrtc),
        headers=_version(found.headers),
    )
    gen = stack.generation
    found = found.model_copy(update={"generation": gen.major if gen else None, "extra": gen.extra if gen else None})
    parts = [
        f"driver CUDA {found.driver}" if found.driver else "no driver",
        f"cuda-bindings {found.bindings or 'none'}",
        f"NVRTC {found.nvrtc or 'none'}",
        f"headers {found.headers or 'none'}",
    ]
    detail = ", ".join(parts) + (f": generation {gen.major} (qualify[{gen.extra}])" if gen else "")
    refused, warned = generation.refusals(stack), generation.warnings(stack)
    if refused:
        return Check(name="cuda", status="fail", exit_code=ExitCode.DEVICE, detail=f"{detail}; {refused[0]}"), found
    if warned:
        return Check(name="cuda", status="warn", detail=f"{detail}; {warned[0]}"), found
    return Check(name="cuda", status="ok", detail=detail), found


def _plan_checks(plan, info: DeviceInfo) -> list[Check]:
    from qualify.evaluate.device_match import device_matches
    from qualify.plan.model.hardware import refusal, target_for
    from qualify.plan.python_source import runtime_missing

    specs = plan.hardware.devices
    listed = ", ".join(f"{s.name or '*'} (cc {s.compute_capability or 'any'})" for s in specs)
    out = []
    if device_matches(info, specs):
        out.append(Check(name="plan", status="ok", detail=f"{info.name} is a device plan {plan.name} lists"))
    else:
        out.append(
            Check(
                name="plan",
                status="fail",
                exit_code=ExitCode.DEVICE,
                detail=f"{info.name} (cc {info.compute_capability}) is not a device plan {plan.name} "
                f"lists ({listed}); qualify run would refuse it",
            )
        )
    if target_for(plan.hardware.architectures, info.arch) is None:
        out.append(
            Check(
                name="plan",
                status="warn",
                detail=refusal(plan.hardware.architectures, info.arch, info.compute_capability),
            )
        )
    missing = runtime_missing(plan)  # Python arms: torch and Triton for the trial processes
    if missing is not None:
        lacks = f"{' and '.join(missing)} not installed: pip install 'qualify[triton]'"
        detail, status = f"Python arms: {lacks if missing else 'torch and triton found'}", "warn" if missing else "ok"
        code = ExitCode.DEVICE if "torch" in missing else None
        out.append(Check(name="plan", status="fail" if code else status, exit_code=code, detail=detail))
    return out


def _nvml_checks(state: NvmlState | str) -> list[Check]:
    if isinstance(state, str):
        return [Check(name="nvml", status="warn", detail=f"{state}: no SM clock or throttle reasons per sample")]
    out = [Check(name="nvml", status="ok", detail="NVML reads this GPU (clock, throttle reasons, temperature)")]
    if state.persistence is False:
        out.append(
            Check(
                name="persistence",
                status="warn",
                detail="persistence mode off: the driver may unload between jobs and the first trial "
                "pays for it (nvidia-smi -pm 1, or nvidia-persistenced)",
            )
        )
    elif state.persistence:
        out.append(Check(name="persistence", status="ok", detail="persistence mode on"))
    if state.sm_mhz is not None:
        held = state.applications_clocks_set or bool((state.clock_reasons or 0) & APPLICATION_CLOCKS)
        locked = " (held by an application-clocks setting)" if held else ""
        out.append(
            Check(
                name="clocks",
                status="info",
                detail=f"SM {state.sm_mhz} MHz now, {state.sm_max_mhz or '?'} MHz max{locked}",
            )
        )
    if state.clock_reasons is not None:
        slow = [text for bit, text in SLOWDOWNS.items() if state.clock_reasons & bit]
        if slow:
            out.append(
                Check(
                    name="throttle",
                    status="warn",
                    detail=f"throttling now: {', '.join(slow)}; samples taken now are flagged",
                )
            )
        else:
            out.append(Check(name="throttle", status="ok", detail="no slowdown reported now"))
    if state.ecc is not None:
        out.append(Check(name="ecc", status="info", detail=f"ECC {'on' if state.ecc else 'off'}"))
    if state.mig:
        out.append(
            Check(
                name="mig",
                status="warn",
                detail="MIG mode on: a MIG slice has fewer SMs and less L2 than the device the plan "
                "names, so timings do not transfer",
            )
        )
    elif state.mig is False:
        out.append(Check(name="mig", status="ok", detail="MIG off"))
    if state.other_processes:
        pids = ", ".join(str(p) for p in state.other_processes[:8])
        out.append(
            Check(
                name="processes",
                status="warn",
                detail=f"{len(state.other_processes)} other process(es) use this GPU (pid {pids}): "
                "they share its SMs and memory bandwidth with the trials",
            )
        )
    elif state.other_processes is not None:
        out.append(Check(name="processes", status="ok", detail="no other process uses this GPU"))
    return out


def _cupti_check(host: Host) -> Check:
    """CUPTI is optional: without it runs work, and records say no kernel trace was taken."""
    why = host.cupti_missing()
    if why is None:
        version = host.package_version("cupti-python") or "version unknown"
        return Check(name="cupti", status="ok", detail=f"cupti-python {version}: kernel inventory and second timer")
    return Check(name="cupti", status="warn", detail=f"{why}; records will hold no kernel inventory or second timer")


def _tool_check(host: Host, tool: str, needed: bool, what: str) -> Check:
    path = host.which(tool)
    if path is not None:
        return Check(name=tool, status="ok", detail=path)
    where = "PATH, $CUDA_HOME/bin, /usr/local/cuda/bin"
    if not needed:
        return Check(name=tool, status="info", detail=f"not found ({where}); not needed for this plan")
    return Check(
        name=tool,
        status="fail",
        exit_code=ExitCode.TOOL,
        detail=f"not found ({where}); needed for {what}: install the CUDA toolkit",
    )


def plan_needs(plan) -> tuple[bool, bool]:
    """(needs nvcc, needs compute-sanitizer) for one plan: library arms are built with nvcc."""
    from qualify.plan.model import ARM_SIDES, LibraryArm

    nvcc = any(isinstance(plan.arm(side), LibraryArm) for side in ARM_SIDES)
    return nvcc, bool(plan.acceptance.sanitizer)


def format_report(report: DoctorReport) -> list[str]:
    """The roles first (yes or no, and what blocks each), then one line per check. A failed check
    is FAIL, with its exit code, where the role asked needs it; otherwise it only keeps the host
    from the roles named after it ("no"): a laptop that can author plans shows no FAIL."""
    marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "info": "    "}
    asked = ROLES[report.role][1] if report.role is not None else ()
    lines = []
    for r in report.roles:
        why = "" if r.serves else f" (blocked by {', '.join(r.blocked_by)})"
        lines.append(f"{'yes ' if r.serves else 'no  '}  role {r.name}: {r.does}{why}")
    for c in report.checks:
        if c.status == "fail" and c.name not in asked:
            blocks = [r.name for r in report.roles if c.name in r.blocked_by]
            lines.append(f"no    {c.name}: {c.detail} (needed for {', '.join(blocks) or 'no role'})")
            continue
        code = f" [exit {c.exit_code}]" if c.status == "fail" else ""
        lines.append(f"{marks[c.status]}  {c.name}: {c.detail}{code}")
    return lines
