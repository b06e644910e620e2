"""CUDA generations: the version rules on both sides of each bound, the refusal without an install
extra, header discovery by NVRTC's generation, doctor's `cuda` line, and the start-up check's
refusal when the driver cannot load NVRTC's code (a fake driver returns the load error)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from plans import make_repo
from test_doctor import by_name, healthy
from test_refused_inputs import refused

import qualify.run.device as device_module
from qualify.build.nvrtc import nvrtc_version, toolkit_include_dir
from qualify.commands.doctor import diagnose
from qualify.errors import DeviceError
from qualify.generation import (
    GENERATIONS,
    CudaStack,
    CudaVersion,
    cubin_loads,
    header_dir,
    header_version,
    install_advice,
    ptx_loads,
    refusals,
    warnings,
)

ROOT = Path(__file__).resolve().parents[1]
V = CudaVersion.parse


# -- versions and rules ------------------------------------------------------------------------


def test_cuda_versions_read_as_the_driver_and_packages_write_them():
    assert CudaVersion.from_int(13000) == V("13.0") and CudaVersion.from_int(12090) == V("12.9")
    assert V("12.9.86") == CudaVersion(12, 9) and str(CudaVersion(12, 4)) == "12.4"
    assert V("12.10") > V("12.9")  # numbers, not text
    with pytest.raises(ValueError):
        V("thirteen")


@pytest.mark.parametrize(
    "nvrtc, driver, cubin, ptx",
    [
        ("13.0", "13.0", True, True),  # the H200's pair
        ("13.1", "13.0", True, False),  # newer minor: minor-version compatibility covers CUBIN only
        ("13.0", "12.9", False, False),  # newer major: nothing loads
        ("12.9", "13.0", True, True),  # older NVRTC on a newer driver: backward compatibility
        ("12.9", "12.8", True, False),
        ("12.8", "12.9", True, True),
    ],
)
def test_what_a_driver_loads_from_an_nvrtc(nvrtc, driver, cubin, ptx):
    assert cubin_loads(V(nvrtc), V(driver)) is cubin
    assert ptx_loads(V(nvrtc), V(driver)) is ptx


def stack(driver="13.0", bindings="13.3.1", nvrtc="13.0", headers="13.0") -> CudaStack:
    return CudaStack(
        driver=V(driver) if driver else None,
        bindings=bindings,
        nvrtc=V(nvrtc) if nvrtc else None,
        headers=V(headers) if headers else None,
    )


def test_a_matching_stack_has_no_refusal_and_no_warning():
    for s in (
        stack(),
        stack(driver="12.9", bindings="12.9.10", nvrtc="12.9", headers="12.9"),
        stack(driver="13.0", bindings="12.9.10", nvrtc="12.9", headers="12.9"),
    ):
        assert (refusals(s), warnings(s)) == ([], [])


def test_nvrtc_of_a_newer_major_than_the_driver_is_refused_naming_the_drivers_extra():
    (why,) = refusals(stack(driver="12.4"))
    assert why.startswith("NVRTC 13.0 writes code the driver's CUDA 12.4 cannot load")
    assert why.endswith("install the extra for the driver's CUDA 12.4: pip install 'qualify[cu12]'")


def test_cuda_bindings_of_a_newer_major_than_the_driver_is_refused():
    # NVRTC 12 would load, but cuda-bindings 13 needs a CUDA 13 driver
    why = refusals(stack(driver="12.9", bindings="13.3.1", nvrtc="12.9", headers="12.9"))
    assert any(w.startswith("cuda-bindings 13.3.1 needs a CUDA 13 driver") for w in why), why
    assert refusals(stack(driver="13.0", bindings="13.3.1")) == []


def test_bindings_and_nvrtc_of_different_generations_are_refused():
    (why,) = refusals(stack(bindings="12.9.10", nvrtc="13.0"))
    assert "different generations" in why


def test_headers_of_another_major_are_refused_and_another_minor_is_a_warning():
    (why,) = refusals(stack(headers="12.9"))
    assert "the CUDA headers are 12.9, NVRTC is 13.0" in why and "qualify[cu13]" in why
    assert refusals(stack(headers="13.1")) == []
    assert warnings(stack(headers="13.1")) == ["the CUDA headers are 13.1, NVRTC is 13.0: keep them on one minor"]


def test_a_newer_nvrtc_minor_warns_and_the_same_minor_does_not():
    assert warnings(stack(nvrtc="13.1", headers="13.1"))[0].startswith(
        "NVRTC 13.1 is newer than the driver's CUDA 13.0"
    )
    assert warnings(stack(nvrtc="13.0")) == []


def test_without_a_driver_only_the_installed_parts_are_judged():
    assert refusals(stack(driver=None)) == [] and warnings(stack(driver=None, nvrtc="13.9", headers="13.9")) == []
    (why,) = refusals(stack(driver=None, bindings=None, nvrtc=None, headers=None))
    assert why.startswith("cuda-bindings, NVRTC not installed; install qualify[cu13] (CUDA 13.x) or qualify[cu12]")


def test_the_advice_names_the_drivers_extra_or_the_rule():
    assert install_advice(V("12.2")).endswith("pip install 'qualify[cu12]'")
    assert install_advice(V("13.0")).endswith("pip install 'qualify[cu13]'")
    assert "newer than every extra; pip install 'qualify[cu13]'" in install_advice(V("14.0"))
    assert "nvidia-smi" in install_advice(None) and "cu12" in install_advice(V("11.8"))


# -- the refusal without an extra ----------------------------------------------------------------

# Runs qualify with cuda.bindings unimportable, as after `pip install qualify` with no extra.
WITHOUT_BINDINGS = "import sys; sys.modules['cuda.bindings'] = None; from qualify.cli import main; main(sys.argv[1:])"


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "check", "protocols/vecload/plan.json"],
        ["run", "protocols/vecload/plan.json", "--record", "{tmp}/record"],
    ],
)
def test_without_an_extra_the_first_use_is_one_line_exit_5_naming_the_extras(argv, tmp_path):
    argv = [a.format(tmp=tmp_path) for a in argv]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_BINDINGS, *argv], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    # one error line; `plan check` then says which stage it could not reach
    (line, *notes) = done.stderr.splitlines()
    assert notes == (
        [
            "qualify: not checked: kernels: they need the stages that failed (compile) to pass first",
            "qualify: 1 error in 1 stage (compile); 1 stage not checked",
        ]
        if argv[:2] == ["plan", "check"]
        else []
    )
    assert line.startswith("qualify: error: cuda-bindings: not installed (cuda.bindings)"), line
    assert "install qualify[cu13] (CUDA 13.x) or qualify[cu12] (CUDA 12.x)" in line
    assert not (tmp_path / "record").exists()


def test_records_are_checked_and_merged_without_an_extra(tmp_path):
    """The base install is generation-neutral: what needs no GPU and no compiler (report --check,
    --merge: the merge job of gpu.yml installs no extra) runs without cuda-bindings."""
    for argv in (
        ["report", "--check", "records/vecload"],
        ["report", "--merge", tmp_path / "merged", "records/vecload"],
    ):
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_BINDINGS, *map(str, argv)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert done.returncode == 0 and done.stderr == "", (argv, done.stderr)


# -- header discovery --------------------------------------------------------------------------


def header_folder(root: Path, layout: str, cudart: int) -> Path:
    folder = root / layout
    folder.mkdir(parents=True)
    (folder / "cuda_runtime.h").write_text("#pragma once\n")
    (folder / "cuda_runtime_api.h").write_text(f"#pragma once\n#define CUDART_VERSION  {cudart}\n")
    return folder


@pytest.fixture
def both_wheels(tmp_path) -> tuple[Path, Path, Path]:
    """A site-packages holding both generations' runtime wheels, as after `pip install
    nvidia-cuda-runtime-cu12` over a cu13 install."""
    site = tmp_path / "site-packages"
    return (
        site,
        header_folder(site, "nvidia/cu13/include", 13000),
        header_folder(site, "nvidia/cuda_runtime/include", 12090),
    )


def test_the_headers_of_nvrtcs_generation_are_chosen_with_both_wheels_installed(both_wheels):
    site, cu13, cu12 = both_wheels
    pathfinder = lambda: str(cu13)  # noqa: E731 - cuda-pathfinder lists cu13 first whatever NVRTC is
    assert header_dir(V("12.9"), pathfinder, search=[str(site)]) == cu12
    assert header_dir(V("13.0"), pathfinder, search=[str(site)]) == cu13
    # each generation's wheel is found by its own layout, before a fallback of the other generation
    assert header_dir(V("13.0"), lambda: str(cu12), search=[str(site)]) == cu13
    assert header_dir(V("12.9"), lambda: None, search=[str(site)]) == cu12
    assert header_version(cu12) == V("12.9") and header_version(cu13) == V("13.0")


def test_the_fallback_is_taken_only_when_it_is_nvrtcs_generation(tmp_path):
    toolkit = header_folder(tmp_path / "cuda-12.4", "include", 12040)
    assert header_dir(V("12.9"), lambda: str(toolkit), search=[str(tmp_path / "empty")]) == toolkit
    with pytest.raises(DeviceError) as exc:
        header_dir(V("13.0"), lambda: str(toolkit), search=[str(tmp_path / "empty")])
    assert exc.value.exit_code == 5
    assert f"found only {toolkit} (12.4)" in exc.value.message
    assert exc.value.message.endswith("install the extra for NVRTC CUDA 13.0: pip install 'qualify[cu13]'")


def test_no_headers_at_all_is_refused(tmp_path):
    with pytest.raises(DeviceError) as exc:
        header_dir(V("12.9"), lambda: None, search=[str(tmp_path)])
    assert exc.value.one_line() == (
        "cuda_runtime.h: no CUDA 12 headers for NVRTC 12.9 (cuda_bf16.h ...); install the "
        "extra for NVRTC CUDA 12.9: pip install 'qualify[cu12]'"
    )


def test_a_header_folder_without_a_version_is_not_taken(tmp_path):
    folder = header_folder(tmp_path, "include", 0)
    (folder / "cuda_runtime_api.h").write_text("#pragma once\n")  # no CUDART_VERSION: not a runtime's header
    assert header_version(folder) is None
    with pytest.raises(DeviceError) as exc:
        header_dir(V("13.0"), lambda: str(folder), search=[])
    assert f"found only {folder} (no CUDART_VERSION)" in exc.value.message


def test_this_installs_headers_are_of_its_nvrtcs_generation():
    """Runs in both CI venvs (cu13 and cu12): the folder NVRTC compiles against is its own
    generation's, from the runtime wheel its extra installed."""
    nvrtc = V(nvrtc_version())
    folder = toolkit_include_dir()
    assert header_version(folder).major == nvrtc.major
    assert folder.as_posix().endswith(GENERATIONS[nvrtc.major].header_folder)


# -- doctor's cuda line ------------------------------------------------------------------------


def test_doctor_shows_the_four_versions_and_the_generation():
    report = diagnose(healthy())
    (packages,) = by_name(report, "packages")  # the names pip gives the cu13 extra's wheels
    assert packages.detail.startswith(
        "cuda-bindings 13.0.1, cuda-pathfinder 1.0, nvidia-cuda-nvrtc 1.0, "
        "nvidia-cuda-runtime 1.0, numpy 1.0, pydantic 1.0, nvidia-ml-py 1.0"
    )
    (cuda,) = by_name(report, "cuda")
    assert (cuda.status, cuda.detail) == (
        "ok",
        "driver CUDA 13.0, cuda-bindings 13.0.1, NVRTC 13.0, headers 13.0: generation 13 (qualify[cu13])",
    )
    assert (report.cuda.generation, report.cuda.extra, report.cuda.driver) == (13, "cu13", "13.0")


def test_doctor_refuses_a_cu13_install_on_a_cuda_12_driver():
    report = diagnose(healthy(driver_cuda=lambda: "12.4"))
    assert report.exit_code == 5
    (cuda,) = by_name(report, "cuda")
    assert cuda.status == "fail" and cuda.exit_code == 5
    assert cuda.detail.endswith(
        "NVRTC 13.0 writes code the driver's CUDA 12.4 cannot load; install the extra for "
        "the driver's CUDA 12.4: pip install 'qualify[cu12]'"
    )


def test_doctor_on_a_cu12_install_names_the_cu12_packages():
    versions = {"cuda-bindings": "12.9.10", "nvidia-cuda-nvrtc-cu12": "12.9.86", "nvidia-cuda-runtime-cu12": "12.9.79"}
    host = healthy(
        package_version=lambda name: versions.get(name, "1.0"),
        nvrtc_version=lambda: "12.9",
        header_version=lambda folder: "12.9",
        driver_cuda=lambda: "12.4",
    )
    report = diagnose(host)
    assert report.exit_code == 0
    (packages,) = by_name(report, "packages")
    assert packages.detail.startswith(
        "cuda-bindings 12.9.10, cuda-pathfinder 1.0, nvidia-cuda-nvrtc-cu12 12.9.86, "
        "nvidia-cuda-runtime-cu12 12.9.79, numpy"
    )
    (cuda,) = by_name(report, "cuda")
    assert cuda.status == "warn" and "generation 12 (qualify[cu12])" in cuda.detail  # 12.9 on a 12.4 driver
    missing = diagnose(
        replace(
            host, package_version=lambda name: None if name == "nvidia-cuda-runtime-cu12" else versions.get(name, "1.0")
        )
    )
    assert (
        "missing nvidia-cuda-runtime-cu12; install the extra for the driver's CUDA 12.4: pip install "
        "'qualify[cu12]'" in by_name(missing, "packages")[0].detail
    )


# -- the start-up check ------------------------------------------------------------------------

UNSUPPORTED_PTX = 222  # CUDA_ERROR_UNSUPPORTED_PTX_VERSION


class FakeDriver:
    """cuda.bindings.driver as CudaDevice.__init__ uses it, on a CUDA `version` driver whose
    cuModuleLoadData answers `load_result`; records the calls that matter here."""

    def __init__(self, version: int, load_result: int = 0):
        from cuda.bindings import driver

        self.CUresult, self.CUdevice_attribute, self.CUstream_flags = (
            driver.CUresult,
            driver.CUdevice_attribute,
            driver.CUstream_flags,
        )
        self._ok = driver.CUresult.CUDA_SUCCESS
        self.version, self.load_result = version, load_result
        self.calls: list[str] = []
        self.loaded: list[bytes] = []

    def __getattr__(self, name):  # any call not listed below succeeds with a dummy handle
        def call(*args):
            self.calls.append(name)
            return (self._ok, 1)

        return call

    def cuInit(self, flags):
        return (self._ok,)

    def cuDeviceGetCount(self):
        return (self._ok, 1)

    def cuCtxSetCurrent(self, ctx):
        return (self._ok,)

    def cuDeviceGetName(self, size, dev):
        return (self._ok, b"NVIDIA H200\x00")

    def cuDeviceGetUuid(self, dev):
        return (self._ok, SimpleNamespace(bytes=bytes(range(16))))

    def cuDeviceGetAttribute(self, attr, dev):
        values = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0}
        return (self._ok, next((v for k, v in values.items() if attr.name.endswith(k)), 1024))

    def cuDriverGetVersion(self):
        return (self._ok, self.version)

    def cuDeviceGetPCIBusId(self, size, dev):
        return (self._ok, b"0000:01:00.0\x00")

    def cuModuleLoadData(self, image):
        self.loaded.append(bytes(image))
        self.calls.append("cuModuleLoadData")
        return (self.CUresult(self.load_result), 7 if self.load_result == 0 else None)

    def cuGetErrorName(self, err):
        return (self._ok, err.name.encode())


def test_the_start_up_check_loads_nvrtcs_code_and_goes_on(monkeypatch):
    fake = FakeDriver(13000)
    monkeypatch.setattr(device_module, "_driver", lambda: fake)
    dev = device_module.CudaDevice(0)
    assert dev.info.cuda_driver_version == "13.0"
    (image,) = fake.loaded
    assert image[:4] == b"\x7fELF"  # CUBIN from the installed NVRTC, for the device's sm_90
    assert fake.calls.index("cuModuleUnload") < fake.calls.index("cuStreamCreate")
    assert "cuDevicePrimaryCtxRelease" not in fake.calls


def test_the_start_up_check_refuses_a_driver_that_cannot_load_the_code(monkeypatch):
    fake = FakeDriver(12040, load_result=UNSUPPORTED_PTX)
    monkeypatch.setattr(device_module, "_driver", lambda: fake)
    with pytest.raises(DeviceError) as exc:
        device_module.CudaDevice(0)
    assert exc.value.exit_code == 5
    assert exc.value.message == (
        f"the driver's CUDA 12.4 cannot load code compiled by NVRTC {nvrtc_version()} "
        "(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222); install the extra for the driver's CUDA "
        "12.4: pip install 'qualify[cu12]'"
    )
    assert "cuDevicePrimaryCtxRelease" in fake.calls and "cuStreamCreate" not in fake.calls


def test_run_on_such_a_driver_is_one_line_exit_5_and_no_record(monkeypatch, capsys, tmp_path):
    """The parent only identifies the device; its trial process opens it and is refused: the run
    exits with that code, one line, and leaves no record."""
    from test_invocation import children_in_process

    monkeypatch.setattr(device_module, "_driver", lambda: FakeDriver(12040, load_result=UNSUPPORTED_PTX))
    children = children_in_process(monkeypatch)
    refused(
        capsys,
        ["run", ROOT / "protocols/vecload/plan.json", "--record", tmp_path / "record"],
        5,
        "the driver's CUDA 12.4 cannot load code compiled by NVRTC",
        "pip install 'qualify[cu12]'",
    )
    assert not (tmp_path / "record").exists()
    assert [c[0] for c in children] == ["trial-process"]


# -- tools/compile_protocols.py ------------------------------------------------------------------


def compile_protocols(*argv) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_protocols.py"), *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def test_compile_protocols_compiles_each_protocol_with_the_installed_generation(tmp_path):
    installed = V(nvrtc_version()).major
    make_repo(tmp_path)
    broken = make_repo(tmp_path / "broken", files={"kernels/k.cu": "__global__ void axpy( {\n"}).parent.parent
    done = compile_protocols("--generation", installed, "--protocols", tmp_path / "protocols")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(f"NVRTC {nvrtc_version()}, headers {nvrtc_version()}")
    assert "ok    tiny: base and candidate for sm_90: 2 CUBINs, every launch fits" in done.stdout
    failed = compile_protocols("--protocols", broken)
    assert failed.returncode == 4
    assert any(
        line.startswith("FAIL  tiny: ") and "NVRTC could not compile" in line for line in failed.stdout.splitlines()
    )


def test_compile_protocols_refuses_another_generation_than_asked(tmp_path):
    other = next(g for g in GENERATIONS if g != V(nvrtc_version()).major)
    done = compile_protocols("--generation", other, "--protocols", tmp_path)
    assert done.returncode == 5 and done.stdout == ""
    assert done.stderr == (
        f"compile_protocols: NVRTC {nvrtc_version()} is installed, generation {other} was asked "
        f"for: {GENERATIONS[other].pip}\n"
    )
