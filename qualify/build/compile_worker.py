"""The child process that runs one NVRTC compile, confined (qualify.build.sandbox).

It reads one request on stdin (a JSON line with the options, the name expression and each
header's name and size, then the source's and headers' bytes as they are), loads NVRTC, gives up every file but NVRTC's library folder and its own trace
folder, compiles, and writes one JSON reply on stdout: the log, the lowered name, the CUBIN and
the headers NVRTC's time trace names. It decides nothing: the parent checks and reports.
Run as `python -m qualify.build.compile_worker`.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
import tempfile
from pathlib import Path


def _nvrtc_folder() -> Path | None:
    """The folder libnvrtc was loaded from (its builtins library is loaded from there, lazily)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if "/libnvrtc" in path and path.startswith("/"):
                    return Path(path).parent
    except OSError:
        return None
    return None


def _log(nvrtc, prog) -> str:
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00").decode(errors="replace")


def _trace_names(folder: Path) -> list[str] | None:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    if not files:
        return None
    try:
        events = json.loads(files[0].read_text(encoding="utf-8"))["traceEvents"]
        names = [e["args"]["detail"] for e in events if e.get("name") == "Processing Header File"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return list(dict.fromkeys(n for n in names if isinstance(n, str)))


def compile_request(request: dict) -> dict:
    from cuda.bindings import nvrtc

    from qualify.build import sandbox

    _, major, minor = nvrtc.nvrtcVersion()  # loads libnvrtc before the process gives up its files
    trace_dir = Path(tempfile.mkdtemp(prefix="qualify-nvrtc-"))
    reply: dict = {"sandbox": "none: not requested", "nvrtc": f"{major}.{minor}"}
    try:
        if request.get("confine", True):
            abi, why = sandbox.support()
            folder = _nvrtc_folder()
            if abi and folder is not None:
                sandbox.restrict(readable=[folder], writable=[trace_dir])
                reply["sandbox"] = f"landlock (ABI {abi})"
            else:
                reply["sandbox"] = f"none: {why or 'the folder NVRTC was loaded from is unknown'}"
        headers = request["headers"]
        err, prog = nvrtc.nvrtcCreateProgram(
            request["source"],
            request["program"].encode(),
            len(headers),
            [h[1] for h in headers],
            [h[0].encode() for h in headers],
        )
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return {**reply, "error": f"nvrtcCreateProgram failed: {err}"}
        try:
            name = request["kernel"].encode()
            nvrtc.nvrtcAddNameExpression(prog, name)
            options = [*request["options"], f"--fdevice-time-trace={trace_dir / 'trace'}"]
            (compile_err,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
            reply["log"] = _log(nvrtc, prog)
            reply["compiled"] = compile_err == nvrtc.nvrtcResult.NVRTC_SUCCESS
            if not reply["compiled"]:
                reply["result"] = int(compile_err)
                return reply
            err, lowered = nvrtc.nvrtcGetLoweredName(prog, name)
            reply["lowered"] = lowered.decode() if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else None
            _, size = nvrtc.nvrtcGetCUBINSize(prog)
            cubin = b" " * size
            if size:
                nvrtc.nvrtcGetCUBIN(prog, cubin)
            reply["cubin"] = base64.b64encode(cubin if size else b"").decode("ascii")
            reply["headers"] = _trace_names(trace_dir)
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    return reply


MAX_HEAD_BYTES = 64 << 20  # the request's JSON line: names, sizes and options, never contents


def read_request(stream) -> dict:
    """The request qualify.build.nvrtc.write_request wrote: its JSON line, then the source and
    each header read to its stated size (bytes as they are; nothing decoded twice)."""
    line = stream.readline(MAX_HEAD_BYTES)
    request = json.loads(line)

    def exactly(size: int) -> bytes:
        data = stream.read(size)
        if len(data) != size:
            raise ValueError(f"the request ended after {len(data)} of {size} bytes")
        return data

    request["source"] = exactly(int(request.pop("source_size")))
    request["headers"] = [(name, exactly(int(size))) for name, size in request["headers"]]
    return request


def main() -> int:
    try:
        request = read_request(sys.stdin.buffer)
    except (ValueError, TypeError, KeyError) as exc:
        request, failed = None, f"the request is not one: {exc}"
    if request is None:
        sys.stdout.buffer.write(json.dumps({"error": failed}).encode())
        return 0
    try:
        reply = compile_request(request)
    except Exception as exc:  # noqa: BLE001 - the parent reports it as a tool failure
        reply = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.buffer.write(json.dumps(reply).encode())
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
