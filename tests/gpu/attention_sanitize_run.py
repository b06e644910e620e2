"""Child process for compute-sanitizer: exercise one attention library once and exit.

    python attention_sanitize_run.py LIB.so T [Hq Hk]

Runs the gated full pass, a prefix window (q_base 128 when T allows), the ungated pass and the
stand-alone gate on one small seeded problem with strided V, then checks that every output row the
kernel owns was written. Exit code 0 means the program itself succeeded; the sanitizer decides
about memory errors and races through its own exit code and summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attention_harness as ah  # noqa: E402


def main(argv: list[str]) -> int:
    lib_path, T = Path(argv[1]), int(argv[2])
    Hq, Hk = (int(argv[3]), int(argv[4])) if len(argv) > 4 else (4, 2)
    lib = ah.AttentionLib(lib_path)
    dev = ah.Device(0)
    try:
        dc = ah.DeviceCase(dev, ah.Case(T=T, Hq=Hq, Hk=Hk, seed=7))
        outputs = {"gated": dc.gated(lib), "ungated": dc.ungated(lib), "ungated+gate": dc.ungated_then_gate(lib)}
        q_base = 128 if T > 128 else 0
        window = dc.gated_prefix(lib, q_base)[q_base:]
        outputs[f"prefix q_base={q_base}"] = window
        bad = [name for name, out in outputs.items() if (out == ah.SENTINEL).any()]
        for name, out in outputs.items():
            print(f"{lib_path.name} T={T} {name}: {out.size} elements, finite={np.isfinite(ah.from_bf16(out)).all()}")
        if bad:
            print(f"unwritten output in: {', '.join(bad)}")
            return 1
        return 0
    finally:
        dev.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
