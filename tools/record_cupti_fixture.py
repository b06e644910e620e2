#!/usr/bin/env python3
"""Record real CUPTI kernel activity of a library pair into a JSON fixture for the CPU tests.

Runs one trial of a frozen compare plan on GPU 0 (into a temporary record), keeping every
CONCURRENT_KERNEL record's raw fields as cupti-python gave them, and writes per chosen case and
arm the traced calls: the event window and the raw records of each. The CPU tests parse these
records, derive the inventory, the occupancy and the attribution from them, and check the
second timer on them (tests/test_inventory.py).

    python tools/record_cupti_fixture.py kernels/attention/build/libattention_base.so \\
        kernels/attention/build/libattention_cand.so --plan protocols/attention-wide-entry/plan.json \\
        --out tests/fixtures/cupti/attention-wide-entry.json

Needs a GPU, the cupti-cu13 extra and a plan frozen beforehand; prints what it wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

FIXTURE_VERSION = 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", default="", help="comma-separated case ids (default: every case)")
    args = parser.parse_args(argv)

    from qualify.commands.pipeline import load_frozen, run_plan
    from qualify.run import cupti_tracer
    from qualify.run.device import CudaDevice
    from qualify.run.telemetry import Telemetry

    why = cupti_tracer.missing()
    if why is not None:
        print(f"record_cupti_fixture: {why}", file=sys.stderr)
        return 6
    cupti_tracer.RAW_SINK = []
    with tempfile.TemporaryDirectory(prefix="qualify-cupti-fixture-") as tmp:
        outcome = run_plan(
            load_frozen(args.plan),
            Path(tmp) / "record",
            lambda: CudaDevice(0),
            Telemetry,
            libraries={"base": args.base, "candidate": args.candidate},
            trials=1,
        )
    (trial,) = outcome.trials
    if trial.kernel_trace is None or trial.kernel_trace.limits is None:
        print(f"record_cupti_fixture: no trace was taken ({trial.kernel_trace})", file=sys.stderr)
        return 1
    by_correlation = {raw["correlation_id"]: raw for raw in cupti_tracer.RAW_SINK}
    wanted = [c for c in args.cases.split(",") if c]
    cases = {}
    for case in trial.cases:
        if case.trace is None or (wanted and case.case not in wanted):
            continue
        cases[case.case] = {
            side: [
                {"event_ns": call.event_ns, "records": [by_correlation[k.correlation_id] for k in call.kernels]}
                for call in calls
            ]
            for side, calls in case.trace.items()
        }
    fixture = {
        "fixture_version": FIXTURE_VERSION,
        "synthetic": False,
        "recorded": {
            "tool": trial.kernel_trace.tool,
            "device": trial.provenance.device.model_dump(mode="json"),
            "plan": args.plan.as_posix(),
            "libraries": {side: info.sha256 for side, info in trial.libraries.items()},
            "trial_status": trial.status,
        },
        "floor_ns": trial.timer["floor_ns"],
        "limits": trial.kernel_trace.limits.model_dump(mode="json"),
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(fixture, indent=1) + "\n")
    calls = sum(len(v) for c in cases.values() for v in c.values())
    print(
        f"wrote {args.out}: {len(cases)} cases, {calls} traced calls, "
        f"{sum(len(x['records']) for c in cases.values() for v in c.values() for x in v)} kernel records, "
        f"trial {trial.status}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
