"""NVRTC compilation through cuda.bindings: the only module that imports NVRTC.

Works without a GPU (CI compiles every declared architecture). It always produces CUBIN for a real
architecture: an NVRTC newer than the driver writes PTX the driver cannot load, while SASS for the
device's own architecture loads on any driver that knows the GPU.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from qualify import generation, strict_json
from qualify.build.resources import KernelResources, error_lines, parse_ptxas_log
from qualify.errors import BuildError, FrozenInputChanged, PlanError, QualifyError, ToolError
from qualify.io import MAX_JSON_BYTES, MAX_SOURCE_BYTES, UnreadableFile, atomic_write_bytes, read_limited

_LOCK = threading.Lock()
BUILTIN = "builtin"  # the sha256 slot of a header NVRTC holds in memory (no file was read)
CACHE_FORMAT = 1


@dataclass(frozen=True)
class KernelSpec:
    """What to compile: one kernel of one source for one architecture.

    `root` and `frozen` say what NVRTC may read: with a root, every header it reports must lie in
    the repository at `root` (toolkit headers aside); with `locked`, it must also be one of the
    `frozen` (repository path, sha256) pairs with those very bytes, the source included.
    """

    source: Path
    kernel: str  # name expression, e.g. "attention_gated_fwd<64>"
    arch: str  # "sm_90"
    defines: tuple[tuple[str, str], ...] = ()
    options: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = ()
    root: Path | None = None
    frozen: tuple[tuple[str, str], ...] = ()
    locked: bool = False


@dataclass(frozen=True)
class CompiledKernel:
    spec: KernelSpec
    lowered_name: str
    cubin: bytes
    log: str
    resources: KernelResources | None  # None: ptxas printed no report (seen with some NVRTC builds)
    # (path as NVRTC reported it, sha256 of its bytes or BUILTIN) for every header NVRTC opened
    headers: tuple[tuple[str, str], ...] = ()
    cached: bool = False


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # installed without an extra (qualify[cu13] or qualify[cu12])
        raise generation.missing_extra("cuda-bindings", f"not installed ({exc.name or exc})") from None
    return nvrtc


@lru_cache(maxsize=1)
def nvrtc_version() -> str:
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except RuntimeError as exc:  # libnvrtc of cuda-bindings' generation not found
        raise generation.missing_extra("libnvrtc", f"NVRTC cannot be loaded ({type(exc).__name__})") from None
    _check(err, "nvrtcVersion")
    return f"{major}.{minor}"


def _pathfinder_headers() -> str | None:
    from cuda.pathfinder import find_nvidia_header_directory

    return find_nvidia_header_directory("cudart")


@lru_cache(maxsize=1)
def toolkit_include_dir() -> Path:
    """The runtime headers of NVRTC's own generation (qualify.generation.header_dir)."""
    return generation.header_dir(generation.CudaVersion.parse(nvrtc_version()), _pathfinder_headers)


def _check(err, what: str) -> None:
    nvrtc = _nvrtc()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise BuildError(f"{what} failed: {msg.decode(errors='replace')}")


def options_for(spec: KernelSpec) -> list[bytes]:
    # The source's own folder is the first include path, named explicitly; the working directory
    # is never one (the program is named by its absolute path, see compile_kernel).
    opts = [
        f"--gpu-architecture={spec.arch}",
        "--std=c++17",
        "--ptxas-options=-v",
        "--generate-line-info",  # sanitizer reports name source lines
        f"--include-path={spec.source.parent}",
        *(f"--include-path={d}" for d in spec.include_dirs),
        f"--include-path={toolkit_include_dir()}",
        *(f"-D{k}={v}" for k, v in spec.defines),
        *spec.options,
    ]
    return [o.encode() for o in opts]


def compile_kernel(spec: KernelSpec) -> CompiledKernel:
    """Compile one kernel to CUBIN; BuildError carries the NVRTC log lines that matter.

    NVRTC reports the headers it opened (its device time trace lists each one); they are checked
    against the repository and the lock before the CUBIN is returned, so what is compiled is what
    was frozen, whatever the preprocessor made of the source. Results are cached by the exact bytes
    NVRTC read (qualify.build.nvrtc's cache functions).
    """
    nvrtc_version()  # one line naming the install extra when NVRTC is missing
    try:
        source = read_limited(spec.source, MAX_SOURCE_BYTES)
    except UnreadableFile as exc:
        raise PlanError(exc.message, file=spec.source) from None
    opts = options_for(spec)
    key = cache_key(spec, source, opts)
    compiled = _cache_get(key, spec)
    if compiled is None:
        compiled = _compile(spec, source, opts)
        _cache_put(key, compiled)
    check_reads(spec, source, compiled.headers)
    return compiled


def _compile(spec: KernelSpec, source: bytes, opts: list[bytes]) -> CompiledKernel:
    nvrtc = _nvrtc()
    # The absolute path as the program's name: NVRTC looks for `#include "..."` next to the
    # including file, and for a bare name that is the working directory, which is no part of the plan.
    err, prog = nvrtc.nvrtcCreateProgram(source, str(spec.source).encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    trace_dir = tempfile.mkdtemp(prefix="qualify-nvrtc-")
    try:
        name = spec.kernel.encode()
        (err,) = nvrtc.nvrtcAddNameExpression(prog, name)
        _check(err, "nvrtcAddNameExpression")
        traced = [*opts, f"--fdevice-time-trace={Path(trace_dir) / 'trace'}".encode()]
        (compile_err,) = nvrtc.nvrtcCompileProgram(prog, len(traced), traced)
        log = _program_log(prog)
        if compile_err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise BuildError(
                f"NVRTC could not compile {spec.kernel} for {spec.arch}",
                log=error_lines(log),
                file=spec.source,
            )
        err, lowered = nvrtc.nvrtcGetLoweredName(prog, name)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise BuildError(f"kernel {spec.kernel} was not instantiated", file=spec.source)
        lowered_name = lowered.decode()
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        if size == 0:  # a virtual architecture yields PTX only, with success
            raise BuildError(f"NVRTC produced no CUBIN for {spec.arch}", file=spec.source)
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "nvrtcGetCUBIN")
        headers = _hash_headers(traced_headers(Path(trace_dir)), spec)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
        shutil.rmtree(trace_dir, ignore_errors=True)
    # Seen on the GPU machine's NVRTC 13.0 for extern "C" kernels: an empty log. The figures are then
    # missing from `plan check`; at run time the driver's own attributes are recorded regardless.
    resources = parse_ptxas_log(log).get(lowered_name)
    return CompiledKernel(
        spec=spec, lowered_name=lowered_name, cubin=cubin, log=log, resources=resources, headers=headers
    )


def traced_headers(trace_dir: Path) -> list[str]:
    """The headers NVRTC opened, in order, from the time trace it wrote into `trace_dir`."""
    files = sorted(p for p in trace_dir.iterdir() if p.is_file())
    if not files:
        raise ToolError("NVRTC wrote no time trace; the headers it read cannot be listed")
    try:
        events = json.loads(files[0].read_text(encoding="utf-8"))["traceEvents"]
        names = [e["args"]["detail"] for e in events if e.get("name") == "Processing Header File"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ToolError(f"NVRTC's time trace is unreadable ({exc}); the headers it read cannot be listed") from None
    return list(dict.fromkeys(n for n in names if isinstance(n, str)))


def _hash_headers(names: list[str], spec: KernelSpec) -> tuple[tuple[str, str], ...]:
    out = []
    for name in names:
        path = Path(name)
        if not path.is_absolute():
            # Only NVRTC's in-memory headers come back without a folder: the include paths are all
            # absolute and the program is named by its absolute path.
            out.append((name, BUILTIN))
            continue
        try:
            out.append((name, hashlib.sha256(read_limited(path, MAX_SOURCE_BYTES)).hexdigest()))
        except UnreadableFile as exc:
            raise PlanError(f"NVRTC read {name}, which is now unreadable: {exc.message}", file=spec.source) from None
    return tuple(out)


def _inside(root: Path, path: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def check_reads(spec: KernelSpec, source: bytes, headers: tuple[tuple[str, str], ...]) -> None:
    """Refuse a compile that read anything the plan does not bind.

    A header outside the repository (other than the toolkit's, whose version is provenance) is a
    bad plan (exit 2); with a lock, a header the lock does not list, or whose bytes differ from
    the lock, is a frozen input that changed (exit 3), and so is the source itself.
    """
    if spec.root is None:  # qualify's own helper kernels
        return
    root = spec.root.resolve()
    toolkit = toolkit_include_dir().resolve()
    frozen = dict(spec.frozen)
    if spec.locked:
        _check_frozen(spec, root, frozen, spec.source.resolve(), hashlib.sha256(source).hexdigest())
    for name, digest in headers:
        if digest == BUILTIN:
            if Path(name).exists() and not name.startswith("__nv"):
                raise PlanError(f"NVRTC read {name!r} from the working directory", file=spec.source)
            continue
        path = Path(name).resolve()
        if _inside(toolkit, path):
            continue
        if not _inside(root, path):
            raise PlanError(f"NVRTC read {path}, which is outside the repository {root}", file=spec.source)
        if spec.locked:
            _check_frozen(spec, root, frozen, path, digest)


def _check_frozen(spec: KernelSpec, root: Path, frozen: dict[str, str], path: Path, digest: str) -> None:
    rel = path.relative_to(root).as_posix()
    if rel not in frozen:
        raise FrozenInputChanged(
            f"NVRTC reads this file compiling {spec.source.name}, but the lock does not freeze it (re-freeze the plan)",
            file=rel,
        )
    if frozen[rel] != digest:
        raise FrozenInputChanged("changed after freezing (the bytes NVRTC read differ from the lock)", file=rel)


# ---------------------------------------------------------------------------------------------
# compile cache
#
# Preflight and sanitizer workers, each trial and `plan check` compile the same kernels; NVRTC takes
# seconds per attention kernel. An entry is keyed by everything NVRTC was given (source bytes,
# name expression, options with defines, include paths and architecture, NVRTC version and header
# folder) and holds the headers NVRTC then read with their sha256: it is used only while every one
# of them still has those bytes, so the key covers the exact bytes of the compile's inputs. Entries
# live in memory for the process and on disk for the next ones; an entry that does not parse or
# whose CUBIN does not match its hash is ignored and rebuilt.

_MEMO: dict[str, CompiledKernel] = {}


def cache_dir() -> Path:
    explicit = os.environ.get("QUALIFY_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qualify"


def cache_key(spec: KernelSpec, source: bytes, opts: list[bytes]) -> str:
    material = {
        "format": CACHE_FORMAT,
        "nvrtc": nvrtc_version(),
        "toolkit": str(toolkit_include_dir()),
        "program": str(spec.source),  # the name is in the line info, so in the CUBIN
        "kernel": spec.kernel,
        "options": [o.decode() for o in opts],
        "source_sha256": hashlib.sha256(source).hexdigest(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _entry_path(key: str) -> Path:
    return cache_dir() / "nvrtc" / f"{key}.json"


def _still_valid(headers: tuple[tuple[str, str], ...]) -> bool:
    for name, digest in headers:
        if digest == BUILTIN:
            continue
        try:
            if hashlib.sha256(read_limited(Path(name), MAX_SOURCE_BYTES)).hexdigest() != digest:
                return False
        except QualifyError:
            return False
    return True


def _cache_get(key: str, spec: KernelSpec) -> CompiledKernel | None:
    with _LOCK:
        hit = _MEMO.get(key)
    if hit is None:
        hit = _read_entry(key, spec)
    if hit is None or not _still_valid(hit.headers):
        return None
    with _LOCK:
        _MEMO[key] = hit
    return CompiledKernel(
        spec=spec,
        lowered_name=hit.lowered_name,
        cubin=hit.cubin,
        log=hit.log,
        resources=hit.resources,
        headers=hit.headers,
        cached=True,
    )


def _read_entry(key: str, spec: KernelSpec) -> CompiledKernel | None:
    path = _entry_path(key)
    try:
        data = strict_json.parse(read_limited(path, MAX_JSON_BYTES).decode("utf-8"))
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or data.get("key") != key:
            return None
        cubin = base64.b64decode(data["cubin"], validate=True)
        if hashlib.sha256(cubin).hexdigest() != data["cubin_sha256"] or cubin[:4] != b"\x7fELF":
            return None
        headers = tuple((str(n), str(d)) for n, d in data["headers"])
        log, lowered = str(data["log"]), str(data["lowered_name"])
    except (QualifyError, strict_json.JSONProblem, UnicodeDecodeError, KeyError, TypeError, ValueError):
        return None  # missing, unreadable or damaged: compile again and overwrite it
    return CompiledKernel(
        spec=spec,
        lowered_name=lowered,
        cubin=cubin,
        log=log,
        resources=parse_ptxas_log(log).get(lowered),
        headers=headers,
    )


def _cache_put(key: str, compiled: CompiledKernel) -> None:
    with _LOCK:
        _MEMO[key] = compiled
    entry = {
        "format": CACHE_FORMAT,
        "key": key,
        "lowered_name": compiled.lowered_name,
        "log": compiled.log,
        "headers": [list(h) for h in compiled.headers],
        "cubin_sha256": hashlib.sha256(compiled.cubin).hexdigest(),
        "cubin": base64.b64encode(compiled.cubin).decode("ascii"),
    }
    try:
        atomic_write_bytes(_entry_path(key), json.dumps(entry).encode())
    except (QualifyError, OSError):
        pass  # a cache that cannot be written (read-only home, full disk) only costs time


def clear_memo() -> None:
    """Forget the in-process entries (tests; a long-lived process that wants a fresh compile)."""
    with _LOCK:
        _MEMO.clear()


def _program_log(prog) -> str:
    nvrtc = _nvrtc()
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _check(err, "nvrtcGetProgramLogSize")
    buf = b" " * size
    (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
    _check(err, "nvrtcGetProgramLog")
    return buf.rstrip(b"\x00").decode(errors="replace")
