"""Compile a plan's CUDA source arms: one KernelSpec per arm and architecture.

The same specs serve `plan check` (every declared architecture, no GPU) and the run stage (the
device's own architecture only), so what is checked is what is timed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from qualify.build.header_reads import BUILTIN, cccl_key
from qualify.build.nvrtc import CompiledKernel, KernelSpec, cccl_include_dir, compile_kernel, toolkit_include_dir
from qualify.errors import BuildError, all_of
from qualify.plan.load import LoadedPlan
from qualify.plan.model import ARM_SIDES, MAX_SHARED_PER_BLOCK, BuildControl, CudaArm, normalize_option
from qualify.plan.model.hardware import target_for


def kernel_spec(
    loaded: LoadedPlan, side: str, arch: str, extra_defines: dict | None = None, kernel: str | None = None
) -> KernelSpec:
    """The NVRTC program of one kernel of a CUDA arm: its `kernel`, or `kernel` named among its own
    launches (each compiled from the arm's source as a program of its own).

    `arch`: a plan architecture, or a device's own (sm_90), which compiles for the plan's target on
    that device (sm_90a where the plan lists it and not sm_90; see target_for)."""
    arch = target_for(loaded.plan.hardware.architectures, arch) or arch
    arm = loaded.plan.arm(side)
    assert isinstance(arm, CudaArm)
    kernel = kernel or arm.kernel
    assert kernel in arm.kernels
    base = loaded.path.parent
    defines = {**arm.defines, **(extra_defines or {})}
    # A frozen plan compiles against its lock's hashes (what was pre-registered), an unfrozen one
    # against the repository alone (`plan check` before `plan freeze`).
    frozen = loaded.lock["files"] if loaded.lock is not None else {}
    return KernelSpec(
        source=(base / arm.source).resolve(),
        kernel=kernel,
        arch=arch,
        defines=tuple((k, str(v)) for k, v in sorted(defines.items())),
        options=tuple(normalize_option(o) for o in arm.options),
        include_dirs=tuple((base / d).resolve() for d in arm.include_dirs),
        root=loaded.files.root,
        frozen=tuple(sorted(frozen.items())),
        locked=loaded.lock is not None,
    )


def launch_label(side: str, index: int | None) -> str:
    """How plan check names a compiled kernel: the side for an arm launched by workload.launch,
    the plan field of the launch ('base.launches[1]') for an arm with its own launches."""
    return side if index is None else f"{side}.launches[{index}]"


def parse_label(label: str) -> tuple[str, int | None]:
    """launch_label's inverse: (side, launch index or None)."""
    side, _, rest = label.partition(".launches[")
    return side, (int(rest.rstrip("]")) if rest else None)


def arm_kernels(loaded: LoadedPlan) -> list[tuple[str, str]]:
    """(label, kernel name) of every kernel launch of the plan's CUDA arms, in side then launch order."""
    out = []
    for side in ARM_SIDES:
        arm = loaded.plan.arm(side)
        if isinstance(arm, CudaArm):
            if arm.launches is None:
                out.append((launch_label(side, None), arm.kernel))
            else:
                out += [(launch_label(side, i), launch.kernel) for i, launch in enumerate(arm.launches)]
    return out


def compile_arms(loaded: LoadedPlan, archs: list[str], jobs: int = 2) -> dict[tuple[str, str], CompiledKernel]:
    """Compile every launch of every CUDA arm for every architecture; keys are (label, arch), the
    label being the side, or the launch's field for an arm with its own launches (launch_label)."""
    specs = {
        (label, arch): kernel_spec(loaded, parse_label(label)[0], arch, kernel=kernel)
        for label, kernel in arm_kernels(loaded)
        for arch in archs
    }
    # NVRTC programs are independent; two threads halve the wall time of a check on CI's 2 cores.
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {key: pool.submit(compile_kernel, spec) for key, spec in specs.items()}
    compiled, refused = {}, []
    for key, future in futures.items():
        try:
            compiled[key] = future.result()
        except BuildError as exc:  # every arm and architecture NVRTC refuses, not only the first
            refused.append(exc)
    if refused:
        raise all_of(refused)
    return compiled


def headers_read(loaded: LoadedPlan, jobs: int = 2) -> dict[str, Path]:
    """Every file inside the repository, and every CCCL header, that NVRTC reads to build the
    plan's CUDA arms: for each declared architecture, each arm, and the candidate under each build
    control's defines (a define can select another header). Keys are as in the lock: repository
    paths, and CCCL headers under generation.CCCL_PREFIX (a CCCL upgrade changes the digest)."""
    archs = loaded.plan.hardware.architectures
    launches = arm_kernels(loaded)
    specs = [
        kernel_spec(loaded, parse_label(label)[0], arch, kernel=kernel) for label, kernel in launches for arch in archs
    ]
    specs += [
        kernel_spec(loaded, "candidate", arch, extra_defines=c.defines, kernel=kernel)
        for c in loaded.plan.controls.negative
        if isinstance(c, BuildControl)
        for label, kernel in launches
        if parse_label(label)[0] == "candidate"
        for arch in archs
    ]
    specs = list(dict.fromkeys(specs))  # a kernel launched twice is read once
    # unlocked: the headers are being frozen now, so they are only required to be in the repository
    specs = [replace(spec, frozen=(), locked=False) for spec in specs]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        compiled = list(pool.map(compile_kernel, specs))
    root = loaded.files.root
    toolkit = toolkit_include_dir().resolve()
    cccl = cccl_include_dir()
    cccl = cccl.resolve() if cccl is not None else None
    found: dict[str, Path] = {}
    for kernel in compiled:
        for name, digest in kernel.headers:
            if digest == BUILTIN:
                continue
            path = Path(name).resolve()
            if cccl is not None and path.is_relative_to(cccl):
                found[cccl_key(cccl, path)] = path
            elif not path.is_relative_to(toolkit) and path.is_relative_to(root):
                found[path.relative_to(root).as_posix()] = path
    return found


@dataclass(frozen=True)
class FitRow:
    side: str
    arch: str
    case: str
    dynamic_shared_bytes: int
    total_shared_bytes: int
    limit_bytes: int

    @property
    def fits(self) -> bool:
        return self.total_shared_bytes <= self.limit_bytes


def shared_memory_fit(loaded: LoadedPlan, compiled: dict[tuple[str, str], CompiledKernel]) -> list[FitRow]:
    rows = []
    for (label, arch), kernel in compiled.items():
        side, index = parse_label(label)
        for case in loaded.cases:
            arm = case.arms[side]
            launch = arm.launch if index is None else arm.steps[index].launch
            assert launch is not None
            dyn = launch.shared_bytes
            rows.append(
                FitRow(
                    side=label,
                    arch=arch,
                    case=case.id,
                    dynamic_shared_bytes=dyn,
                    total_shared_bytes=dyn + (kernel.resources.static_shared_bytes if kernel.resources else 0),
                    limit_bytes=MAX_SHARED_PER_BLOCK[arch],
                )
            )
    return rows
