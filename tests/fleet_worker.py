"""A device worker for the fleet tests: a whole run of a plan on a fake device with its own UUID,
in a process of its own (spawned), writing into a record shared with other workers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


class ProcessWorker:
    """A worker process (spawned) with the wait/terminate surface the fleet and the trial
    processes drive."""

    def __init__(self, target, *args):
        import multiprocessing

        self.process = multiprocessing.get_context("spawn").Process(target=target, args=args)
        self.process.start()

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        return self.process.exitcode

    def terminate(self) -> None:
        self.process.terminate()


def run_on_fake_device(plan_path: str, record: str, ordinal: int, fail: bool = False) -> None:
    import fakes

    from qualify.commands.pipeline import run_plan
    from qualify.plan.load import load_plan
    from qualify.run.fake import FAKE_INFO, FakeDevice, FakeTelemetry

    info = FAKE_INFO.model_copy(
        update={"ordinal": ordinal, "uuid": f"GPU-0000000{ordinal}-0000-0000-0000-000000000000"}
    )
    if fail:
        raise SystemExit(5)  # a device the worker could not open
    loaded = load_plan(plan_path)
    device = FakeDevice(
        {"axpy": fakes.axpy}, durations={"base": 300_000.0, "candidate": 270_000.0}, info=info, seed=ordinal
    )
    run_plan(loaded, Path(record), lambda: device, lambda uuid: FakeTelemetry())


def one_trial_on_fake_device(plan_path: str, record: str, workdir: str, process: int, slower_pct: float) -> None:
    """One trial in a process of its own, as `qualify run` starts each (trial_processes): the
    candidate is `slower_pct` % slower in this process only, standing for whatever a process fixes
    (where its buffers sit) that moves the ratio between processes."""
    import fakes

    from qualify.commands.pipeline import run_plan
    from qualify.plan.load import load_plan
    from qualify.run.fake import FakeDevice, FakeTelemetry

    loaded = load_plan(plan_path)
    device = FakeDevice(
        {"axpy": fakes.axpy},
        durations={"base": 300_000.0, "candidate": 270_000.0 * (1 + slower_pct / 100)},
        seed=process,
    )
    run_plan(
        loaded,
        Path(record),
        lambda: device,
        lambda uuid: FakeTelemetry(),
        trials=1,
        render=False,
        preflight=lambda side, cases: [],  # shared between the trial processes through workdir
        workdir=Path(workdir),
    )
