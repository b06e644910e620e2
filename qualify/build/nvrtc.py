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
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from qualify import generation, strict_json
from qualify.build import hints, includes, sandbox
from qualify.build.header_reads import BUILTIN, check_reads
from qualify.build.resources import KernelResources, error_lines, parse_ptxas_log
from qualify.errors import BuildError, PlanError, QualifyError, ToolError
from qualify.io import MAX_JSON_BYTES, MAX_SOURCE_BYTES, UnreadableFile, atomic_write_bytes, read_limited

_LOCK = threading.Lock()
CACHE_FORMAT = 2  # 2: headers handed in memory, the worker's confinement kept


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
    sandbox: str = ""  # how the compile was confined: "landlock (ABI n)" or "none: <why>"


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
    # No include path: every header reaches NVRTC in memory (qualify.build.includes), found by
    # qualify in the source's folder, the arm's include_dirs, CCCL and the toolkit, in that order.
    opts = [
        f"--gpu-architecture={spec.arch}",
        "--std=c++17",
        "--ptxas-options=-v",
        "--generate-line-info",  # sanitizer reports name source lines
        *(f"-D{k}={v}" for k, v in spec.defines),
        *spec.options,
    ]
    return [o.encode() for o in opts]


def cccl_include_dir() -> Path | None:
    """The CCCL headers of NVRTC's generation (qualify.generation.cccl_dir); None when not installed."""
    return generation.cccl_dir(generation.CudaVersion.parse(nvrtc_version()).major, toolkit_include_dir())


def cccl_version() -> str | None:
    """The version of the CCCL headers kernels compile against ("3.0.1"); None without CCCL."""
    folder = cccl_include_dir()
    return generation.cccl_version(folder) if folder is not None else None


def compile_sandbox() -> str:
    """How compile workers are confined on this host: "landlock (ABI n)" or "none: <why>"."""
    return sandbox.describe()


def search_dirs(spec: KernelSpec) -> tuple[Path, ...]:
    """The folders an include is looked up in, in order (a quoted one first beside its includer)."""
    cccl = cccl_include_dir()
    return (spec.source.parent, *spec.include_dirs, *((cccl,) if cccl else ()), toolkit_include_dir())


def trusted_dirs() -> tuple[Path, ...]:
    cccl = cccl_include_dir()
    return (*((cccl.resolve(),) if cccl else ()), toolkit_include_dir().resolve())


def compile_kernel(spec: KernelSpec) -> CompiledKernel:
    """Compile one kernel to CUBIN; BuildError carries the NVRTC log lines that matter.

    qualify finds and reads every header first (qualify.build.includes: computed includes are
    refused) and NVRTC compiles them from memory in a confined worker (qualify.build.sandbox);
    the headers NVRTC's trace names are checked against the repository and the lock before the
    CUBIN is returned, so what is compiled is what was frozen. Results are cached by the exact
    bytes NVRTC read (qualify.build.nvrtc's cache functions).
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
    check_reads(spec, source, compiled.headers, toolkit_include_dir(), cccl_include_dir())
    return compiled


def _resolve(spec: KernelSpec, source: bytes) -> includes.Headers:
    # every folder resolved, so a symlink in a toolkit's path (/usr/local/cuda) compares as itself
    repository = (spec.root,) if spec.root is not None else (spec.source.parent, *spec.include_dirs)
    return includes.resolve_headers(
        spec.source.resolve(),
        source,
        tuple(Path(d).resolve() for d in search_dirs(spec)),
        tuple(Path(d).resolve() for d in repository),
        trusted_dirs(),
        dict(spec.defines),
    )


def _compile(spec: KernelSpec, source: bytes, opts: list[bytes]) -> CompiledKernel:
    _supported(spec)
    headers = _resolve(spec, source)
    names = sorted(headers.by_name)
    request = {
        # The absolute path names the program (it is in the line info, so in the CUBIN); NVRTC
        # can open no file there, or anywhere: its headers are the ones given here.
        "program": str(spec.source),
        "kernel": spec.kernel,
        "options": [o.decode() for o in opts],
    }
    reply = _run_worker(request, source, [(n, headers.by_name[n][1]) for n in names], spec)
    allowed = headers.allowed
    log = scrub_log(str(reply.get("log", "")), allowed)
    if not reply.get("compiled"):
        hint = hints.for_log(log, spec, cccl_include_dir())
        raise BuildError(
            f"NVRTC could not compile {spec.kernel} for {spec.arch}{hint}",
            # a template named without arguments: the hint says it all; NVRTC's lines about its
            # internal name map would only confuse
            log="" if hints.is_template_hint(hint) else error_lines(log),
            file=spec.source,
        )
    lowered_name = reply.get("lowered")
    if not lowered_name:
        raise BuildError(f"kernel {spec.kernel} was not instantiated", file=spec.source)
    cubin = base64.b64decode(reply.get("cubin", ""))
    if not cubin:  # a virtual architecture yields PTX only, with success
        raise BuildError(f"NVRTC produced no CUBIN for {spec.arch}", file=spec.source)
    traced = reply.get("headers")
    if traced is None:
        raise ToolError("NVRTC wrote no readable time trace; the headers it read cannot be listed")
    read = []
    for name in traced:
        given = headers.by_name.get(name)
        if given is not None:
            read.append((str(given[0]), hashlib.sha256(given[1]).hexdigest()))
        elif name.startswith("__nv"):
            read.append((name, BUILTIN))  # NVRTC's own in-memory headers
        else:
            raise ToolError(f"NVRTC reports reading {name!r}, which qualify did not hand it", file=spec.source)
    # Seen on the GPU machine's NVRTC 13.0 for extern "C" kernels: an empty log. The figures are then
    # missing from `plan check`; at run time the driver's own attributes are recorded regardless.
    resources = parse_ptxas_log(log).get(lowered_name)
    return CompiledKernel(
        spec=spec,
        lowered_name=lowered_name,
        cubin=cubin,
        log=log,
        resources=resources,
        headers=tuple(read),
        sandbox=str(reply.get("sandbox", "")),
    )


WORKER_TIMEOUT_S = 600


def write_request(stream, request: dict, source: bytes, headers: list[tuple[str, bytes]]) -> None:
    """The worker's request as it reads it (qualify.build.compile_worker.read_request): one JSON
    line (the options, and each header's name and size), then the source's and headers' bytes as
    they are. Nothing is encoded or joined: the headers are held once, by the caller, however large."""
    head = {**request, "source_size": len(source), "headers": [[n, len(data)] for n, data in headers]}
    stream.write(json.dumps(head).encode() + b"\n")
    stream.write(source)
    for _, data in headers:
        stream.write(data)


def _run_worker(request: dict, source: bytes, headers: list[tuple[str, bytes]], spec: KernelSpec) -> dict:
    """One compile in a fresh, confined child process (qualify.build.compile_worker)."""
    # the parent's whole environment: the worker must load the very NVRTC the parent did (found by
    # cuda-pathfinder through PYTHONPATH, LD_LIBRARY_PATH, LD_PRELOAD, CUDA_HOME ...)
    env = dict(os.environ)
    try:
        # the request goes through an unnamed temporary file, not a pipe fed from memory: its bytes
        # are written straight from the headers qualify read, never copied into one request object
        with tempfile.TemporaryFile(prefix="qualify-compile-") as stdin:
            write_request(stdin, request, source, headers)
            stdin.seek(0)
            done = subprocess.run(
                [sys.executable, "-m", "qualify.build.compile_worker"],
                stdin=stdin,
                capture_output=True,
                timeout=WORKER_TIMEOUT_S,
                env=env,
                cwd=tempfile.gettempdir(),
                check=False,
            )
    except subprocess.TimeoutExpired:
        raise BuildError(f"NVRTC did not finish {spec.kernel} within {WORKER_TIMEOUT_S} s", file=spec.source) from None
    except OSError as exc:
        raise ToolError(f"cannot start the compile worker: {exc.strerror or exc}") from None
    try:
        reply = json.loads(done.stdout)
    except ValueError:
        reply = None
    if not isinstance(reply, dict) or "error" in reply:
        why = reply["error"] if isinstance(reply, dict) else f"exit {done.returncode}, no reply"
        raise ToolError(f"the compile worker failed compiling {spec.kernel}: {why}", file=spec.source)
    if reply.get("nvrtc") != nvrtc_version():
        raise ToolError(
            f"the compile worker loaded NVRTC {reply.get('nvrtc')}, this process NVRTC {nvrtc_version()}",
            file=spec.source,
        )
    return reply


_ABSOLUTE = re.compile(r"(?<![\w.])/[^\s\"'<>():]+")


def scrub_log(log: str, allowed: tuple[Path, ...]) -> str:
    """The log without any line that names an absolute path outside `allowed` (NVRTC quotes the
    lines of the files it names; whatever it could read, its log shows only what qualify gave it)."""
    out = []
    for line in log.splitlines():
        # a path of two or more parts (a lone "/b" is as likely a division in a quoted source line)
        paths = [Path(os.path.normpath(p)) for p in _ABSOLUTE.findall(line) if p.count("/") >= 2]
        if any(not any(p == a or a in p.parents for a in allowed) for p in paths):
            out.append("[a line naming a file outside the repository and the CUDA headers was withheld]")
        else:
            out.append(line)
    return "\n".join(out) + ("\n" if log.endswith("\n") else "")


def _supported(spec: KernelSpec) -> None:
    """Refuse an architecture this NVRTC cannot compile for, in one line (NVRTC's own error is
    an invalid-option code)."""
    numbers = supported_archs()
    digits = re.match(r"sm_(\d+)", spec.arch)
    if numbers and digits and int(digits.group(1)) not in numbers:
        raise BuildError(
            f"NVRTC {nvrtc_version()} cannot compile for {spec.arch} (it knows sm_{', sm_'.join(map(str, numbers))}); "
            f"{generation.install_advice()}",
            file=spec.source,
        )


@lru_cache(maxsize=1)
def supported_archs() -> tuple[int, ...]:
    """The real architectures this NVRTC compiles for (nvrtcGetSupportedArchs), as numbers."""
    nvrtc = _nvrtc()
    try:
        err, archs = nvrtc.nvrtcGetSupportedArchs()
    except (AttributeError, RuntimeError):
        return ()
    return tuple(int(a) for a in archs) if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else ()


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
        "cccl": str(cccl_include_dir()),
        "include_dirs": [str(d) for d in spec.include_dirs],
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
        sandbox=hit.sandbox,
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
        sandbox = str(data.get("sandbox", ""))
    except (QualifyError, strict_json.JSONProblem, UnicodeDecodeError, KeyError, TypeError, ValueError):
        return None  # missing, unreadable or damaged: compile again and overwrite it
    return CompiledKernel(
        spec=spec,
        lowered_name=lowered,
        cubin=cubin,
        log=log,
        resources=parse_ptxas_log(log).get(lowered),
        headers=headers,
        sandbox=sandbox,
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
        "sandbox": compiled.sandbox,
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
