"""Raw-sample files stay readable across numpy versions."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from qualify.results.samples import TrialSamples, load, save


def test_round_trip(tmp_path):
    s = TrialSamples()
    for i in range(5):
        s.add("T=1", "base", ns=1000.0 + i, block=i // 2, sm_mhz=1980.0, throttle=0x4 * (i == 3), temp_c=40.0)
    s.add_floor(1300.5)
    arrays = s.arrays()
    save(tmp_path / "s.npz", arrays)
    back = load(tmp_path / "s.npz")
    assert set(back) == set(arrays)
    for key in arrays:
        assert back[key].dtype == arrays[key].dtype and np.array_equal(back[key], arrays[key])


def _npy_with_nul_padding(array: np.ndarray) -> bytes:
    """An .npy member as numpy 2.5 writes it: header padded with NUL bytes, not spaces."""
    header = repr({"descr": array.dtype.str, "fortran_order": False, "shape": array.shape}).encode()
    total = 10 + len(header) + 1
    pad = (64 - total % 64) % 64
    body = header + b"\x00" * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body + array.tobytes()


def test_reads_nul_padded_headers(tmp_path):
    values = np.arange(7, dtype=np.float64) * 1.5
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("T=1/base/ns.npy", _npy_with_nul_padding(values))
    (tmp_path / "s.npz").write_bytes(buf.getvalue())
    assert np.array_equal(load(tmp_path / "s.npz")["T=1/base/ns"], values)


def test_refuses_object_arrays(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        header = repr({"descr": "|O", "fortran_order": False, "shape": (1,)}).encode()
        z.writestr(
            "x.npy", b"\x93NUMPY\x01\x00" + (len(header) + 1).to_bytes(2, "little") + header + b"\n" + b"\x00" * 8
        )
    (tmp_path / "s.npz").write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="object"):
        load(tmp_path / "s.npz")


def test_refuses_a_zip_bomb_unread(tmp_path, monkeypatch):
    import qualify.results.samples as samples

    s = TrialSamples()
    for i in range(100):
        s.add("T=1", "base", ns=float(i), block=0, sm_mhz=0.0, throttle=0, temp_c=0.0)
    save(tmp_path / "s.npz", s.arrays())
    monkeypatch.setattr(samples, "MAX_SAMPLES_BYTES", 1000)
    with pytest.raises(ValueError, match="once expanded"):
        load(tmp_path / "s.npz")
