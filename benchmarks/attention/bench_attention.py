"""Benchmark the two attention tiles against PyTorch's SDPA on one GPU.

    python3 benchmarks/attention/bench_attention.py --out results.json      # measure (needs torch + GPU)
    python3 benchmarks/attention/bench_attention.py --render results.json   # rewrite README.md's tables

Measure mode builds both libraries with make (into --build-dir, default a temporary folder), then
for each length T times, in one process and on torch's current stream:
  base  libattention_base.so (64-row tile) through attention_ungated
  cand  libattention_cand.so (128-row tile) through attention_ungated
  sdpa  torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        on [1, Hq, T, 256] bf16 (the layout SDPA prefers, made contiguous before timing).
Timer: one CUDA event pair around REPS back-to-back calls (launch latency amortised, L2 warm from
the warm-up), divided by REPS; TRIALS such samples per arm, arm order rotated every trial; the
median is reported, every sample is kept. Causal FLOPs are counted as 4 * Hq * 256 * T * (T+1) / 2.
It also records per-kernel registers/stack/spills (cuobjdump on the built .so), the occupancy that
follows from them and the device limits, which SDPA kernels ran, and two parity checks at the
benchmark shapes (base == cand bytes; relative error of the kernel against SDPA).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KERNEL_DIR = REPO / "kernels" / "attention"
HEAD_DIM = 256
TILES = {"base": 64, "cand": 128}
SCHEMA_VERSION = 1
TABLE_START, TABLE_END = "<!-- results:start -->", "<!-- results:end -->"


# ------------------------------------------------------------------------------------- helpers
def find_tool(name: str) -> str | None:
    for candidate in (
        shutil.which(name),
        os.path.join(os.environ["CUDA_HOME"], "bin", name) if os.environ.get("CUDA_HOME") else None,
        f"/usr/local/cuda/bin/{name}",
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def build(build_dir: Path) -> dict[str, Path]:
    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise SystemExit("nvcc not found")
    cmd = ["make", "-C", str(KERNEL_DIR), f"BUILD={build_dir}", f"NVCC={nvcc}", "-j2"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return {name: build_dir / f"libattention_{name}.so" for name in TILES}


def resource_usage(lib: Path, arch: str = "sm_90") -> dict:
    """Registers, stack, local and shared bytes of attention_gated_fwd for one arch, from cuobjdump."""
    tool = find_tool("cuobjdump")
    if tool is None:
        return {"error": "cuobjdump not found"}
    text = subprocess.run([tool, "--dump-resource-usage", str(lib)], capture_output=True, text=True).stdout
    for section in re.split(r"arch = ", text)[1:]:
        if not section.startswith(arch):
            continue
        m = re.search(
            r"Function (_Z19attention_gated_fwd\S*?):\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", section
        )
        if m:
            return {
                "source": f"cuobjdump --dump-resource-usage ({arch})",
                "function": m.group(1),
                "registers": int(m.group(2)),
                "stack_bytes": int(m.group(3)),
                "static_shared_bytes": int(m.group(4)),
                "local_bytes": int(m.group(5)),
            }
    return {"error": f"no {arch} resource usage for attention_gated_fwd in cuobjdump output"}


def ptxas_spills(arch: str = "sm_90") -> dict:
    """Spill bytes per tile from an nvcc -Xptxas -v device-only compile of the same source."""
    nvcc = find_tool("nvcc")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, tile in TILES.items():
            proc = subprocess.run(
                [
                    nvcc,
                    "-std=c++17",
                    "-O3",
                    "-lineinfo",
                    f"-arch={arch}",
                    "--cubin",
                    "-Xptxas",
                    "-v",
                    f"-DATTENTION_TILE={tile}",
                    "-o",
                    os.path.join(tmp, f"{name}.cubin"),
                    str(KERNEL_DIR / "attention.cu"),
                ],
                capture_output=True,
                text=True,
            )
            log = proc.stdout + proc.stderr
            mangled = f"_Z19attention_gated_fwdILi{tile}E"
            block = next((b for b in re.split(r"(?=ptxas info\s*: Compiling entry function)", log) if mangled in b), "")
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", block)
            r = re.search(r"Used (\d+) registers", block)
            out[name] = (
                {
                    "registers": int(r.group(1)),
                    "stack_bytes": int(m.group(1)),
                    "spill_store_bytes": int(m.group(2)),
                    "spill_load_bytes": int(m.group(3)),
                }
                if m and r
                else {"error": log[-2000:]}
            )
    return out


def occupancy(regs: int, threads: int, dyn_smem: int, props: dict) -> dict:
    """Resident blocks per SM from registers, shared memory and threads (CUDA occupancy rules)."""
    warps = threads // 32
    regs_per_warp = math.ceil(regs * 32 / 256) * 256  # allocation unit: 256 registers per warp
    by_regs = (props["regs_per_sm"] // regs_per_warp) // warps
    by_smem = props["smem_per_sm"] // (dyn_smem + props["reserved_smem_per_block"])
    by_threads = props["max_threads_per_sm"] // threads
    blocks = min(by_regs, by_smem, by_threads, 32)
    return {
        "blocks_per_sm": blocks,
        "warps_per_sm": blocks * warps,
        "limited_by": min((by_regs, "registers"), (by_smem, "shared memory"), (by_threads, "threads"))[1],
        "blocks_by_registers": by_regs,
        "blocks_by_shared_memory": by_smem,
        "blocks_by_threads": by_threads,
    }


def nvrtc_occupancy(threads: dict[str, int], smem: dict[str, int]) -> dict:
    """Cross-check: the driver's own occupancy answer for an NVRTC (sm_90) build of the same source."""
    try:
        from cuda.bindings import driver, nvrtc
        from cuda.pathfinder import find_nvidia_header_directory

        src = (KERNEL_DIR / "attention.cu").read_bytes()
        err, prog = nvrtc.nvrtcCreateProgram(src, b"attention.cu", 0, [], [])
        names = {name: f"attention_gated_fwd<{tile}>".encode() for name, tile in TILES.items()}
        for n in names.values():
            nvrtc.nvrtcAddNameExpression(prog, n)
        major = driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0)[
            1
        ]
        minor = driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0)[
            1
        ]
        opts = [
            f"--gpu-architecture=sm_{major}{minor}".encode(),
            b"--std=c++17",
            f"--include-path={find_nvidia_header_directory('cudart')}".encode(),
        ]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return {"error": f"nvrtc: {res.name}"}
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        err, module = driver.cuModuleLoadData(cubin)
        if err != driver.CUresult.CUDA_SUCCESS:
            return {"error": f"cuModuleLoadData: {err.name}"}
        out = {}
        for name, expr in names.items():
            _, lowered = nvrtc.nvrtcGetLoweredName(prog, expr)
            _, fn = driver.cuModuleGetFunction(module, lowered)
            driver.cuFuncSetAttribute(
                fn, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem[name]
            )
            _, regs = driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, fn)
            _, local = driver.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn)
            err, blocks = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, threads[name], smem[name])
            out[name] = {
                "registers": regs,
                "local_bytes": local,
                "blocks_per_sm": blocks if err == driver.CUresult.CUDA_SUCCESS else f"error {err.name}",
            }
        driver.cuModuleUnload(module)
        nvrtc.nvrtcDestroyProgram(prog)
        return out
    except Exception as exc:  # noqa: BLE001 - a cross-check only; record why it failed
        return {"error": repr(exc)}


def nvidia_smi() -> dict:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return {}
    q = "name,driver_version,uuid,clocks.max.sm,clocks.sm,temperature.gpu,power.draw"
    proc = subprocess.run([tool, f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        return {}
    values = [v.strip() for v in proc.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(q.split(","), values))


# ------------------------------------------------------------------------------------- measure
def measure(args) -> dict:
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    props_t = torch.cuda.get_device_properties(dev)
    props = {
        "regs_per_sm": int(getattr(props_t, "regs_per_multiprocessor", 65536)),
        "smem_per_sm": int(getattr(props_t, "shared_memory_per_multiprocessor", 233472)),
        "max_threads_per_sm": int(getattr(props_t, "max_threads_per_multi_processor", 2048)),
        # the CUDA runtime reserves 1 KiB of shared memory per resident block (sm_80 and later)
        "reserved_smem_per_block": 1024,
    }

    build_dir = Path(args.build_dir or tempfile.mkdtemp(prefix="attention-bench-"))
    paths = build(build_dir)
    libs = {}
    for name, path in paths.items():
        lib = ctypes.CDLL(str(path))
        lib.attention_ungated.argtypes = (
            [ctypes.c_void_p] * 3
            + [ctypes.c_int, ctypes.c_void_p]
            + [ctypes.c_int] * 4
            + [ctypes.c_float, ctypes.c_void_p]
        )
        lib.attention_ungated.restype = ctypes.c_int
        lib.attention_error_string.restype = ctypes.c_char_p
        libs[name] = lib

    Hq, Hk, D = args.hq, args.hk, HEAD_DIM
    scale = 1.0 / math.sqrt(D)
    kernels = {}
    spills = ptxas_spills()
    for name, tile in TILES.items():
        threads, smem = 2 * tile, (tile + 64) * 264 * 2
        usage = resource_usage(paths[name])
        entry = {
            "query_rows": tile,
            "threads": threads,
            "dynamic_shared_bytes": smem,
            "resources_sm90": usage,
            "ptxas_sm90": spills.get(name),
        }
        regs = usage.get("registers") or (spills.get(name) or {}).get("registers")
        if regs:
            entry["occupancy"] = occupancy(regs, threads, smem, props)
        kernels[name] = entry
    cross = nvrtc_occupancy({n: 2 * t for n, t in TILES.items()}, {n: (t + 64) * 264 * 2 for n, t in TILES.items()})
    for name in TILES:
        kernels[name]["driver_occupancy_nvrtc_build"] = cross.get(name, cross)

    results = []
    gen = torch.Generator(device=dev).manual_seed(20261129)
    for T in args.lengths:
        q = torch.randn(T, Hq, D, device=dev, dtype=torch.bfloat16, generator=gen)
        k = torch.randn(T, Hk, D, device=dev, dtype=torch.bfloat16, generator=gen)
        v = torch.randn(T, Hk, D, device=dev, dtype=torch.bfloat16, generator=gen)
        outs = {name: torch.empty_like(q) for name in TILES}
        qs, ks, vs = (x.permute(1, 0, 2).unsqueeze(0).contiguous() for x in (q, k, v))

        def kernel_call(name):
            lib, out = libs[name], outs[name]
            stream = torch.cuda.current_stream().cuda_stream

            def call():
                rc = lib.attention_ungated(
                    q.data_ptr(), k.data_ptr(), v.data_ptr(), Hk * D, out.data_ptr(), T, Hq, Hk, D, scale, stream
                )
                if rc != 0:
                    raise RuntimeError(f"{name}: {lib.attention_error_string(rc).decode()}")

            return call

        def sdpa_call(backend=None):
            def plain():
                return F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, enable_gqa=True)

            if backend is None:
                return plain
            from torch.nn.attention import sdpa_kernel

            def pinned():
                with sdpa_kernel([backend]):
                    return plain()

            return pinned

        def timed(fn) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / args.reps

        arms = {"base": kernel_call("base"), "cand": kernel_call("cand"), "sdpa": sdpa_call()}
        for fn in arms.values():  # warm-up, excluded
            for _ in range(args.warmup):
                fn()
        torch.cuda.synchronize()
        order = list(arms)
        samples = {name: [] for name in arms}
        for trial in range(args.trials):
            rot = order[trial % len(order) :] + order[: trial % len(order)]
            for name in rot:
                samples[name].append(timed(arms[name]))

        flops = 4 * Hq * D * T * (T + 1) / 2
        row = {"T": T, "causal_flops": flops, "arms": {}}
        for name, s in samples.items():
            med = statistics.median(s)
            row["arms"][name] = {
                "samples_ms": [round(x, 5) for x in s],
                "median_ms": round(med, 5),
                "tflops": round(flops / (med * 1e-3) / 1e12, 2),
                "spread_pct": round(100 * (max(s) - min(s)) / med, 2),
            }
        for name in TILES:
            row["arms"][name]["throughput_vs_sdpa"] = round(
                row["arms"]["sdpa"]["median_ms"] / row["arms"][name]["median_ms"], 3
            )

        # which SDPA kernels the default dispatch ran, and each pinned backend's time
        try:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                arms["sdpa"]()
                torch.cuda.synchronize()
            row["sdpa_kernels"] = sorted({e.key for e in prof.key_averages() if e.device_time_total > 0})[:6]
        except Exception as exc:  # noqa: BLE001
            row["sdpa_kernels"] = [f"profiler failed: {exc!r}"]
        backends = {}
        from torch.nn.attention import SDPBackend

        for bname in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
            try:
                fn = sdpa_call(getattr(SDPBackend, bname))
                fn()
                torch.cuda.synchronize()
                backends[bname] = {"median_ms": round(statistics.median(timed(fn) for _ in range(3)), 5)}
                backends[bname]["tflops"] = round(flops / (backends[bname]["median_ms"] * 1e-3) / 1e12, 2)
            except Exception as exc:  # noqa: BLE001 - a backend that refuses this shape
                backends[bname] = {"error": str(exc).splitlines()[0][:200] if str(exc) else repr(exc)}
        row["sdpa_backends"] = backends

        # parity at the benchmark shape
        for fn in (arms["base"], arms["cand"]):
            fn()
        ref = arms["sdpa"]()[0].permute(1, 0, 2).float()
        torch.cuda.synchronize()
        row["parity"] = {
            "base_equals_cand_bytes": bool(torch.equal(outs["base"].view(torch.int16), outs["cand"].view(torch.int16))),
            "relative_error_vs_sdpa": round(float((outs["base"].float() - ref).norm() / ref.norm()), 6),
        }
        results.append(row)
        print(
            f"T={T}: "
            + ", ".join(f"{n} {a['median_ms']:.4f} ms ({a['tflops']} TFLOP/s)" for n, a in row["arms"].items())
            + f"; parity {row['parity']}",
            flush=True,
        )
        del q, k, v, qs, ks, vs, outs
        torch.cuda.empty_cache()

    from cuda.bindings import driver as cu_driver

    smi = nvidia_smi()
    return {
        "schema_version": SCHEMA_VERSION,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": [sys.executable, *sys.argv],
        "device": {
            "name": props_t.name,
            "capability": f"{props_t.major}.{props_t.minor}",
            "sm_count": props_t.multi_processor_count,
            "driver": smi.get("driver_version"),
            "driver_cuda_version": cu_driver.cuDriverGetVersion()[1],
            "uuid": smi.get("uuid"),
            "sm_clock_max_mhz": smi.get("clocks.max.sm"),
            "limits": props,
        },
        "software": {
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "python": platform.python_version(),
            "nvcc": subprocess.run([find_tool("nvcc"), "--version"], capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[-1],
        },
        "config": {
            "batch": 1,
            "Hq": Hq,
            "Hk": Hk,
            "head_dim": D,
            "dtype": "bfloat16",
            "causal": True,
            "scale": scale,
            "seed": 20261129,
            "warmup_calls": args.warmup,
            "reps_per_sample": args.reps,
            "trials": args.trials,
            "kernel_entry_point": "attention_ungated (V contiguous, ldv = Hk*256)",
            "timer": "CUDA event pair around reps back-to-back calls on torch's current stream, /reps; "
            "L2 warm; arm order rotated per trial; median of trials",
            "flops": "4 * Hq * 256 * T * (T + 1) / 2",
        },
        "kernels": kernels,
        "results": results,
    }


# -------------------------------------------------------------------------------------- render
def render_tables(res: dict) -> list[str]:
    dev = res["device"]
    lines = [
        f"Measured {res['date_utc']} on {dev['name']} (sm_{dev['capability'].replace('.', '')}, {dev['sm_count']} SMs, "
        f"driver {dev['driver']}), torch {res['software']['torch']}, batch 1, Hq={res['config']['Hq']}, "
        f"Hk={res['config']['Hk']}, head_dim 256, bf16, causal. Median of {res['config']['trials']} trials of "
        f"{res['config']['reps_per_sample']} back-to-back calls each (spread = (max - min) / median).",
        "",
        "| T | base (64 rows) ms | TFLOP/s | cand (128 rows) ms | TFLOP/s | SDPA ms | TFLOP/s | base / SDPA | cand / SDPA | spread base / cand / SDPA |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in res["results"]:
        a = row["arms"]
        lines.append(
            f"| {row['T']} | {a['base']['median_ms']:.3f} | {a['base']['tflops']:.1f} | {a['cand']['median_ms']:.3f} | "
            f"{a['cand']['tflops']:.1f} | {a['sdpa']['median_ms']:.3f} | {a['sdpa']['tflops']:.1f} | "
            f"{a['base']['throughput_vs_sdpa']:.3f} | {a['cand']['throughput_vs_sdpa']:.3f} | "
            f"{a['base']['spread_pct']:.1f} % / {a['cand']['spread_pct']:.1f} % / {a['sdpa']['spread_pct']:.1f} % |"
        )
    lines += ["", "Ratios are SDPA time / kernel time (1.0 = SDPA's throughput).", ""]
    lines += [
        "| T | SDPA kernels (default dispatch) | FLASH | EFFICIENT | CUDNN | base == cand bytes | rel. error vs SDPA |",
        "|---:|---|---:|---:|---:|---|---:|",
    ]
    for row in res["results"]:
        b = row.get("sdpa_backends", {})

        def cell(name):
            x = b.get(name, {})
            if "median_ms" in x:
                return f"{x['median_ms']:.3f} ms ({x['tflops']:.0f})"
            return "refused" if "error" in x else "n/a"

        kern = "<br>".join(f"`{k[:70]}`" for k in row.get("sdpa_kernels", []))
        lines.append(
            f"| {row['T']} | {kern} | {cell('FLASH_ATTENTION')} | {cell('EFFICIENT_ATTENTION')} | "
            f"{cell('CUDNN_ATTENTION')} | {row['parity']['base_equals_cand_bytes']} | "
            f"{row['parity']['relative_error_vs_sdpa']:.2e} |"
        )
    lines += [
        "",
        "Pinned backends: median ms (TFLOP/s) of 3 samples; 'refused': the backend raised for this shape "
        "(message in results.json).",
        "",
    ]
    lines += [
        "| tile | threads | dynamic smem B | registers (sm_90) | stack / spill st / spill ld B | blocks/SM | warps/SM | limited by | driver check (NVRTC build) |",
        "|---|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for name, k in res["kernels"].items():
        r, p, o = k.get("resources_sm90", {}), k.get("ptxas_sm90") or {}, k.get("occupancy", {})
        c = k.get("driver_occupancy_nvrtc_build", {})
        check = f"{c.get('registers')} regs, {c.get('blocks_per_sm')} blocks/SM" if "registers" in c else "n/a"
        spill = (
            f"{p.get('stack_bytes')} / {p.get('spill_store_bytes')} / {p.get('spill_load_bytes')}"
            if "spill_store_bytes" in p
            else "n/a"
        )
        lines.append(
            f"| {name} ({k['query_rows']} rows) | {k['threads']} | {k['dynamic_shared_bytes']:,} | "
            f"{r.get('registers', 'n/a')} | {spill} | {o.get('blocks_per_sm', 'n/a')} | "
            f"{o.get('warps_per_sm', 'n/a')} | {o.get('limited_by', 'n/a')} | {check} |"
        )
    return lines


def render(results_path: Path, readme: Path) -> None:
    res = json.loads(results_path.read_text())
    if res.get("schema_version") != SCHEMA_VERSION:
        raise SystemExit(f"{results_path}: unknown schema_version {res.get('schema_version')}")
    block = "\n".join([TABLE_START, *render_tables(res), TABLE_END])
    text = readme.read_text() if readme.exists() else f"# Attention kernel benchmark\n\n{TABLE_START}\n{TABLE_END}\n"
    if TABLE_START not in text or TABLE_END not in text:
        raise SystemExit(f"{readme}: markers {TABLE_START} / {TABLE_END} missing")
    head, rest = text.split(TABLE_START, 1)
    tail = rest.split(TABLE_END, 1)[1]
    readme.write_text(head + block + tail)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write results JSON here (measure mode)")
    ap.add_argument("--render", type=Path, help="results JSON to render into --readme")
    ap.add_argument("--readme", type=Path, default=HERE / "README.md")
    ap.add_argument("--build-dir", type=Path, help="where make puts the libraries (default: a temporary folder)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--hq", type=int, default=16)
    ap.add_argument("--hk", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args(argv)
    if args.render:
        render(args.render, args.readme)
        return 0
    if not args.out:
        ap.error("--out or --render is required")
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; refusing to overwrite a result file")
    res = measure(args)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(res, indent=2) + "\n")
    tmp.replace(args.out)
    print("\n".join(render_tables(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
