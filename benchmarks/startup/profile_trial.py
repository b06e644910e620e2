"""Where a later trial's own time goes, function by function (GPU machine; issue 32 item 5).

`trial.py` times trial processes from outside and reads their stage accounts; this script looks
inside one. In one interpreter it runs trial 1 of a copy of the protocol (which fills the run's
input store, as a run's first trial process does), then clears what a fresh process would not
have (the in-process input cache) and runs trial 2 under cProfile, in a new CUDA context: the
stage accounts of both and the functions where trial 2 spent its time.

    python3 benchmarks/startup/profile_trial.py --protocol vecload --out $OUT/profile-vecload.txt
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from trial import copy_protocol  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocol", default="vecload")
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run import inputs
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    lines = []
    with tempfile.TemporaryDirectory(prefix="qualify-profile-") as scratch:
        work = Path(scratch)
        loaded = load_frozen(copy_protocol(args.protocol, work / "repo"))
        store = work / "store"
        store.mkdir()
        record = work / "record"
        profile = cProfile.Profile()
        for n in (1, 2):
            if n == 2:
                inputs.clear_cache()  # a fresh process has generated nothing
            start = time.perf_counter()
            if n == 2:
                profile.enable()
            outcome = run_plan(loaded, record, lambda: CudaDevice(0), Telemetry, trials=1, render=False, workdir=store)
            if n == 2:
                profile.disable()
            wall = time.perf_counter() - start
            trial = outcome.trials[-1]
            stages = ", ".join(f"{k} {v:.2f}" for k, v in trial.cost.stages_s.items() if v > 0.005)
            lines.append(
                f"trial {n} ({trial.status}): {wall:.2f} s in run_plan, trial wall {trial.cost.wall_s:.2f} s, "
                f"GPU-busy {trial.cost.gpu_busy_s:.3f} s; stages: {stages}"
            )
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args.top)
    lines += ["", f"trial 2 under cProfile (top {args.top} by cumulative time):", text.getvalue()]
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
