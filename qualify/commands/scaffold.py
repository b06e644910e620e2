"""`qualify plan new`: a working skeleton plan for a kernel pair or a library pair.

The skeleton is meant to pass `plan check` as written, so that a team starts from a plan that
works and edits it, rather than from a blank page and a list of errors. What qualify can know is
filled in: for a kernel, its parameters — count and byte sizes from the compiled CUBIN
(`qualify.build.params`), names and C types from the `__global__` declaration — become the
launch's arguments and the buffers; for a library, the signature given becomes the call. What
only the team can know (hypothesis, cases, shapes, gates, the bound) gets a placeholder, and
`todo` lists each one for the terminal.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from qualify.build.declarations import ELEMENT_TYPES, SCALAR_TYPES, Param, declared_params
from qualify.build.indexing import kernel_body
from qualify.errors import UsageError
from qualify.io import MAX_SOURCE_BYTES, read_limited

# A mantissa bit of each float type (or the low bit of an integer): flipping it in the first
# input element must change the output, which is what the skeleton's negative control asks.
FLIP_BIT = {"f32": 22, "f64": 51, "f16": 9, "bf16": 6}
SIGNATURE_TYPES = ("ptr", "i32", "u32", "i64", "u64", "f32", "f64")
FIDELITY_PLACEHOLDER = {"ulp": 4, "abs": 1e-3, "rel": 1e-3}
TOLERANCE_PLACEHOLDER = {"atol": 1e-6, "rtol": 1e-5}


@dataclass
class Skeleton:
    plan: dict
    todo: list[str] = field(default_factory=list)


def _common(name: str, archs: list[str], fidelity: str, bound: float | None, todo: list[str]) -> dict:
    if fidelity == "tolerance":
        # |err| <= atol + rtol·|expected| against the base arm: a change of summation order in f32
        # moves results by a few ulp, which rtol of 1e-5 (about 84 f32 ulp) holds
        todo.append(
            f"acceptance.fidelity.atol, rtol: {TOLERANCE_PLACEHOLDER} are placeholders; choose them from "
            "`qualify probe PLAN` on a GPU before freezing"
        )
    elif fidelity != "bytes" and bound is None:
        bound = FIDELITY_PLACEHOLDER[fidelity]
        todo.append(
            f"acceptance.fidelity.bound: {bound} is a placeholder; choose it from `qualify probe PLAN` "
            "on a GPU before freezing"
        )
    todo += [
        "hypothesis, independent_variable, revisions: say what the candidate changes and what you expect",
        "workload.cases and buffers[].shape: the sizes to qualify (placeholders: N)",
        "acceptance.gates: the speed-up (or the regression) that counts as success",
    ]
    # every device of each architecture; a plan for one GPU model names it ('NVIDIA H200*')
    from qualify.plan.model.hardware import compute_capability_of

    devices = [{"compute_capability": "{}.{}".format(*compute_capability_of(a))} for a in dict.fromkeys(archs)]
    fid: dict = {"mode": fidelity}
    if fidelity == "tolerance":
        if bound is not None:
            raise UsageError("--fidelity tolerance takes no --bound: edit atol and rtol in the plan", field="--bound")
        fid |= TOLERANCE_PLACEHOLDER
    elif fidelity != "bytes":
        fid["bound"] = bound
    return {
        "schema_version": 1,
        "name": name,
        "hypothesis": "TODO: the candidate is faster because ...",
        "independent_variable": "TODO: the one thing that differs between the arms",
        "revisions": {"base": "TODO-base", "candidate": "TODO-candidate"},
        "hardware": {"devices": devices, "architectures": archs},
        "arms": {},
        "workload": {},
        "seeds": {"base": 1},
        "schedule": {"warmup": 10, "samples_per_block": 10, "blocks": 10, "trials": 2, "cache": "cold"},
        "budget": {"max_trials": 3, "max_samples": 200, "max_wall_seconds": 900},
        "stop": {"rule": "fixed"},
        "acceptance": {
            "gates": [{"name": "faster", "where": "N >= 1048576", "min_speedup_pct": 5.0}],
            "fidelity": fid,
            "sanitizer": [{"tool": "memcheck", "cases": ["N=4096"]}],
        },
        "controls": {"aa": True, "negative": []},
    }


def _buffers_and_controls(pointers: list[tuple[str, str, bool]], plan: dict, todo: list[str]) -> list[dict]:
    """Buffers from (name, dtype, is_input); the last pointer is the output when none is
    marked an input (a library's signature says nothing about constness)."""
    buffers = []
    for bname, dtype, is_input in pointers:
        buf = {"name": bname, "dtype": dtype, "shape": ["N"], "role": "input" if is_input else "output"}
        if is_input:
            buf["init"] = {"kind": "normal", "mean": 0.0, "std": 1.0}
        buffers.append(buf)
    first_input = next((b for b in buffers if b["role"] == "input"), None)
    if first_input is not None:
        plan["controls"]["negative"].append(
            {
                "kind": "input",
                "name": f"flip_{first_input['name']}",
                "buffer": first_input["name"],
                "mutation": {"op": "flip_bit", "index": 0, "bit": FLIP_BIT.get(first_input["dtype"], 0)},
            }
        )
        todo.append("controls.negative: the flipped element must change an output, or the control stays green")
    return buffers


def _scalar_value(kind: str):
    """Integers default to the case's size N, floats to 1.0: placeholders that resolve."""
    return 1.0 if kind.startswith("f") else "N"


def kernel_skeleton(
    plan_path: Path,
    name: str,
    base: tuple[Path, str],
    candidate: tuple[Path, str],
    params: list[Param],
    sizes: list[int],
    archs: list[str],
    fidelity: str,
    bound: float | None,
    threads: int = 256,
    body: str | None = None,
) -> Skeleton:
    """A plan for two CUDA arms whose kernel takes `params` (read from the source, checked
    against `sizes`, the compiled byte sizes), launched with blocks of `threads`; `body`, the
    kernel's text, gives the buffers' shapes where its indexing says them."""
    from qualify.build.indexing import inferred_shape, placeholders
    from qualify.build.params import ARG_BYTES

    integers = placeholders([p.name for p in params if not p.pointer and SCALAR_TYPES.get(p.ctype, "f")[0] in "iu"])
    todo: list[str] = []
    plan = _common(name, archs, fidelity, bound, todo)
    args, pointers = [], []
    for k, p in enumerate(params):
        if p.pointer:
            element = p.ctype.rstrip("*").strip()
            dtype = ELEMENT_TYPES.get(element)
            if dtype is None:
                raise UsageError(
                    f"parameter {k} ({p.ctype} {p.name}): qualify has no buffer type for {element!r} "
                    f"(it knows {', '.join(sorted(ELEMENT_TYPES))})",
                    file=base[0],
                )
            pointers.append((p.name, dtype, p.const))
            args.append({"kind": "buffer", "name": p.name})
        else:
            kind = SCALAR_TYPES.get(p.ctype)
            if kind is None:
                raise UsageError(
                    f"parameter {k} ({p.ctype} {p.name}): qualify passes pointers and the scalars "
                    f"{', '.join(sorted(set(SCALAR_TYPES.values())))}, not {p.ctype!r}",
                    file=base[0],
                )
            args.append({"kind": kind, "value": integers.get(p.name, _scalar_value(kind))})
    planned = [ARG_BYTES[a["kind"]] for a in args]
    if planned != sizes:
        raise UsageError(
            f"the declaration reads as byte sizes {planned} but the compiled kernel takes {sizes}; "
            "write workload.launch.args by hand",
            file=base[0],
        )
    if not any(not is_input for _, _, is_input in pointers):
        raise UsageError("the kernel has no non-const pointer parameter: nothing to compare", file=base[0])
    folder = plan_path.parent
    for side, (source, kernel) in (("base", base), ("candidate", candidate)):
        plan["arms"][side] = {"kind": "cuda", "source": _relative(source, folder), "kernel": kernel}
    names = list(integers.values()) or ["N"]
    buffers = _buffers_and_controls(pointers, plan, todo)
    inferred = []
    for buf in buffers:
        shape = inferred_shape(body, buf["name"], integers) if len(names) > 1 else None
        if shape is not None:
            buf["shape"] = shape
            inferred.append(f"{buf['name']} {shape}")
        elif len(names) > 1:
            buf["shape"] = list(names)
    if len(names) > 1:
        # one placeholder per integer parameter: the first sized as N was, the others moderate
        first, rest = names[0], names[1:]
        cases = [{first: 64, **dict.fromkeys(rest, 1024)}, {first: 4096, **dict.fromkeys(rest, 1024)}]
        plan["acceptance"]["gates"][0]["where"] = f"{first} >= 4096"
        plan["acceptance"]["sanitizer"][0]["cases"] = [",".join(f"{k}={cases[0][k]}" for k in sorted(cases[0]))]
        todo.append(
            f"workload.buffers[].shape: {'; '.join(inferred) or 'none'} read from the kernel's indexing, "
            f"the others every placeholder ({', '.join(names)}): confirm each"
        )
    else:
        cases = [{"N": 4096}, {"N": 1048576}]
    plan["workload"] = {
        "params": {"THREADS": threads},
        "cases": cases,
        "buffers": buffers,
        "launch": {
            "grid": [f"cdiv({' * '.join(names)}, THREADS)"],
            "block": ["THREADS"],
            "shared_bytes": 0,
            "args": args,
        },
    }
    todo.append(
        f"workload.launch: grid, block, shared_bytes and the scalar arguments (placeholders: {', '.join(names)}, 1.0)"
    )
    return Skeleton(plan, todo)


def library_skeleton(
    plan_path: Path,
    name: str,
    symbol: str,
    signature: list[str],
    libraries: tuple[Path, Path] | None,
    archs: list[str],
    fidelity: str,
    bound: float | None,
    abi: tuple[str, int] | None = None,
    error_symbol: str | None = None,
) -> Skeleton:
    todo: list[str] = []
    for t in signature:
        if t not in SIGNATURE_TYPES:
            raise UsageError(f"--signature: unknown type {t!r} (types: {', '.join(SIGNATURE_TYPES)})")
    n_ptr = signature.count("ptr")
    if n_ptr == 0:
        raise UsageError("--signature: no 'ptr' argument, so no output buffer to compare")
    plan = _common(name, archs, fidelity, bound, todo)
    todo.append(
        "hardware.architectures: for library arms, the architectures the .so files were built for "
        "(qualify compiles nothing); hardware.devices still gates which GPU may run the plan"
    )
    pointers = [(f"buf{k}", "f32", k < n_ptr - 1) for k in range(n_ptr)]
    call, ptr_index = [], 0
    for t in signature:
        if t == "ptr":
            call.append({"kind": "buffer", "name": pointers[ptr_index][0]})
            ptr_index += 1
        else:
            call.append({"kind": t, "value": _scalar_value(t)})
    from qualify.plan.model import ARM_SIDES

    folder = plan_path.parent
    for k, side in enumerate(ARM_SIDES):
        arm: dict = {"kind": "library", "symbol": symbol, "signature": list(signature)}
        if libraries is not None:
            arm = {
                "kind": "library",
                "library": _relative(libraries[k], folder),
                **{x: y for x, y in arm.items() if x != "kind"},
            }
        if abi is not None:
            arm["abi_symbol"], arm["abi_version"] = abi
        if error_symbol is not None:
            arm["error_symbol"] = error_symbol
        plan["arms"][side] = arm
    plan["workload"] = {
        "cases": [{"N": 4096}, {"N": 1048576}],
        "buffers": _buffers_and_controls(pointers, plan, todo),
        "call": call,
    }
    todo.append("workload.buffers: names, dtypes (placeholders: f32) and which pointers the entry point writes")
    if libraries is None:
        todo.append("arms.*.library is left out: `qualify compare BASE.so CAND.so --plan PLAN` binds the two builds")
    return Skeleton(plan, todo)


def _relative(path: Path, folder: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), folder.resolve())).as_posix()


def compiled_sizes(source: Path, kernel: str, arch: str, root: Path | None = None) -> tuple[list[int], str]:
    """Byte sizes of the kernel's parameters as NVRTC compiles them, and its lowered name.
    `root`: the repository the plan will live in; the compile reads nothing outside it (and the
    CUDA headers), as `plan check` will."""
    from qualify.build.elf import ElfProblem
    from qualify.build.nvrtc import KernelSpec, compile_kernel
    from qualify.build.params import kernel_params
    from qualify.errors import ToolError

    compiled = compile_kernel(KernelSpec(source.resolve(), kernel, arch, root=root))
    try:
        return [p.size for p in kernel_params(compiled.cubin, compiled.lowered_name)], compiled.lowered_name
    except ElfProblem as exc:
        raise ToolError(f"cannot read {kernel}'s parameter list from its CUBIN: {exc}", file=source) from None


def compiled_max_threads(source: Path, kernel: str, arch: str) -> int | None:
    """Threads per block the kernel is compiled for (`__launch_bounds__`), None when unbounded."""
    from qualify.build.elf import ElfProblem
    from qualify.build.launch_bounds import launch_bounds
    from qualify.build.nvrtc import KernelSpec, compile_kernel

    compiled = compile_kernel(KernelSpec(Path(source).resolve(), kernel, arch))
    try:
        return launch_bounds(compiled.cubin, compiled.lowered_name).max_per_block
    except ElfProblem:
        return None  # the plan check that follows names the problem


def default_name(plan_path: Path) -> str:
    stem = plan_path.parent.name if plan_path.stem == "plan" else plan_path.stem
    name = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._")
    return name or "my-plan"


def write_new_plan(plan_path: Path, skeleton: Skeleton) -> None:
    """Write the skeleton, then prove it: a skeleton that fails `plan check` is removed again and
    the check's error is reported (a bug in the skeleton, or a source outside the repository)."""
    import json

    from qualify.commands.check import check_plan
    from qualify.errors import FrozenInputChanged, QualifyError
    from qualify.io import atomic_write_text

    if plan_path.is_symlink():  # dangling or not: `plan new` writes a file of its own, never through a link
        raise FrozenInputChanged("is a symbolic link; `plan new` writes a new file only", file=plan_path)
    if plan_path.exists():
        raise FrozenInputChanged("exists; `plan new` never overwrites a plan", file=plan_path)
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(plan_path, json.dumps(skeleton.plan, indent=2) + "\n", replace=False)
    try:
        check_plan(plan_path)
    except QualifyError:
        plan_path.unlink()
        raise


def check_architectures(archs: list[str]) -> None:
    """The plan model's own architecture check (one list of what qualify supports), as a UsageError
    naming --arch: an unknown architecture never reaches the compiler."""
    from pydantic import ValidationError

    from qualify.plan.model.hardware import Hardware

    try:
        Hardware.model_validate({"devices": [{"compute_capability": "0.0"}], "architectures": archs})
    except ValidationError as exc:
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise UsageError(message, field="--arch") from None


def skeleton_from_options(
    plan_path: Path,
    *,
    name: str | None,
    source: Path | None,
    kernel: str | None,
    cand_source: Path | None,
    cand_kernel: str | None,
    library_pair: bool,
    symbol: str | None,
    signature: str | None,
    base_so: Path | None,
    candidate_so: Path | None,
    abi_symbol: str | None,
    abi_version: int | None,
    error_symbol: str | None,
    archs: tuple[str, ...],
    fidelity: str,
    bound: float | None,
) -> Skeleton:
    """`plan new`'s options (by their click names) -> the skeleton they ask for; a missing or
    contradictory option is a UsageError."""
    name = name or default_name(plan_path)
    archs = list(dict.fromkeys(archs))
    check_architectures(archs)  # before anything is compiled for them
    if library_pair == (source is not None):
        raise UsageError("give --cuda FILE --kernel NAME for a kernel pair, or --library for a library pair")
    if library_pair:
        if not symbol or not signature:
            raise UsageError("a library pair needs --symbol NAME and --signature TYPES (e.g. ptr,ptr,i32,f32)")
        if (base_so is None) != (candidate_so is None):
            raise UsageError("give both --base-so and --candidate-so, or neither (then `compare` binds them)")
        if (abi_symbol is None) != (abi_version is None):
            raise UsageError("--abi-symbol and --abi-version go together")
        return library_skeleton(
            plan_path,
            name,
            symbol,
            [t.strip() for t in signature.split(",")],
            (base_so, candidate_so) if base_so is not None else None,
            archs,
            fidelity,
            bound,
            (abi_symbol, abi_version) if abi_symbol else None,
            error_symbol,
        )
    else:
        if not kernel:
            raise UsageError("a kernel pair needs --kernel NAME")
        cand_source, cand_kernel = cand_source or source, cand_kernel or kernel
        from qualify.plan.model.arms import KERNEL_NAME

        for option, value in (("--kernel", kernel), ("--candidate-kernel", cand_kernel)):
            # checked before NVRTC sees it as a name expression: a newline there would be a source
            # line the include scanner never read
            if len(value) > 200 or re.fullmatch(KERNEL_NAME, value) is None:
                raise UsageError(
                    f"{value!r} is not a kernel name (letters, digits, _ and ::, then an optional "
                    "<template arguments>, as the plan's arms.*.kernel accepts)",
                    field=option,
                )
        if not Path(source).is_file() or not Path(cand_source).is_file():
            raise UsageError("no such file", file=source if not Path(source).is_file() else cand_source)
        from qualify.plan.files import repository_root

        root = repository_root(Path(plan_path).resolve()).resolve()
        sizes, _ = compiled_sizes(source, kernel, archs[0], root)
        cand_sizes, _ = compiled_sizes(cand_source, cand_kernel, archs[0], root)
        if cand_sizes != sizes:
            raise UsageError(
                f"the candidate {cand_kernel} takes byte sizes {cand_sizes}, the base {kernel} "
                f"{sizes}: one launch serves both arms",
                file=cand_source,
            )
        text = read_limited(Path(source), MAX_SOURCE_BYTES).decode("utf-8", errors="replace")
        params = declared_params(text, kernel)
        if params is None:
            raise UsageError(f"no __global__ declaration of {kernel.split('<')[0]} found", file=source)
        # the block must fit both kernels' __launch_bounds__ on every architecture `plan check` compiles
        threads = min(
            [256]
            + [
                compiled_max_threads(s, k, arch) or 256
                for s, k in ((source, kernel), (cand_source, cand_kernel))
                for arch in archs
            ]
        )
        return kernel_skeleton(
            plan_path,
            name,
            (source, kernel),
            (cand_source, cand_kernel),
            params,
            sizes,
            archs,
            fidelity,
            bound,
            threads,
            body=kernel_body(text, kernel),
        )
