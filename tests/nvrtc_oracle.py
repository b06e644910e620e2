"""What NVRTC's preprocessor actually opens, observed from a confined compile worker (issue 36, item 2).

`Oracle` starts one child process that loads NVRTC, confines itself with Landlock exactly as
qualify.build.compile_worker does (NVRTC's library folder readable, one private folder writable
for the time trace), then compiles source after source. Every header of a fixed vocabulary is
handed to NVRTC in memory, so whatever name a directive computes is found if it is one of them;
the reply for each source lists the headers NVRTC's time trace says it processed, and the names
its log says it could not open (a name outside the vocabulary). Those two together are the files
NVRTC's preprocessor opened: what the include scanner must have seen (or refused).

NVRTC compiles without a GPU, so this runs wherever the `cu13` extra is installed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

VOCABULARY = tuple(f"h{i}.h" for i in range(8))
MISSED = "QUALIFY_HAS_INCLUDE_MISSED"  # an #error a source raises when __has_include tested another name
_COULD_NOT_OPEN = re.compile(r'could not open source file "([^"]*)"')

_CHILD = r"""
import base64, json, os, shutil, sys, tempfile
from pathlib import Path
from cuda.bindings import nvrtc
from qualify.build import compile_worker, sandbox

nvrtc.nvrtcVersion()
trace_dir = Path(tempfile.mkdtemp(prefix="qualify-oracle-"))
abi, why = sandbox.support()
folder = compile_worker._nvrtc_folder()
if abi and folder is not None:
    sandbox.restrict(readable=[folder], writable=[trace_dir])
    confined = f"landlock (ABI {abi})"
else:
    confined = f"none: {why or 'NVRTC folder unknown'}"
headers = json.loads(sys.argv[1])
print(json.dumps({"sandbox": confined}), flush=True)
for line in sys.stdin:
    source = json.loads(line)
    for p in trace_dir.iterdir():
        p.unlink()
    err, prog = nvrtc.nvrtcCreateProgram(
        source.encode(), b"fuzz.cu", len(headers), [b"/* empty */\n"] * len(headers), [h.encode() for h in headers]
    )
    nvrtc.nvrtcAddNameExpression(prog, b"k")
    options = [b"--gpu-architecture=compute_90", b"-default-device", f"--fdevice-time-trace={trace_dir / 'trace'}".encode()]
    (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
    log = compile_worker._log(nvrtc, prog)
    traced = compile_worker._trace_names(trace_dir) if result == nvrtc.nvrtcResult.NVRTC_SUCCESS else None
    nvrtc.nvrtcDestroyProgram(prog)
    print(json.dumps({"compiled": result == nvrtc.nvrtcResult.NVRTC_SUCCESS, "log": log, "traced": traced}), flush=True)
shutil.rmtree(trace_dir, ignore_errors=True)
"""


class Oracle:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, json.dumps(VOCABULARY)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.sandbox = json.loads(self.proc.stdout.readline())["sandbox"]

    def opened(self, source: str) -> tuple[set[str], str, bool]:
        """(headers NVRTC opened, its log, whether it compiled)."""
        self.proc.stdin.write(json.dumps(source) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        names = {n for n in reply["traced"] or () if not n.startswith("__nv")}
        names |= set(_COULD_NOT_OPEN.findall(reply["log"]))
        return names, reply["log"], reply["compiled"]

    def close(self) -> None:
        self.proc.communicate(timeout=60)  # closes its pipes and waits for it
