"""Sanitizer: the plan's compute-sanitizer checks, once per device (the first trial that gets
there), started with the trial and done before its first timed sample.

Each check is a process of its own under compute-sanitizer and none is timed, so they run beside
the isolated preflight and the build (`engine.TrialRunner._build_and_preflight`) instead of after
the timing: in the first trial of a run they cost what the longer of the two costs, not their
sum. Nothing is timed while one still runs: the engine collects every result before the floor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from qualify.plan.model import ARM_SIDES, Plan
from qualify.results.model import SanitizerResult
from qualify.results.store import Record
from qualify.run.stages.where import watch

SANITIZER_WORKERS = 4

Job = tuple[str, str, str, float]  # tool, case, side, timeout in seconds


class SanitizerChecks:
    """The checks this trial owes, started at construction, SANITIZER_WORKERS at a time.

    With fail-fast on "sanitizer", checks not yet started when one finds something are not
    started. `close()` (always called: the engine's `finally`) starts no new check and waits for
    the running ones, so no sanitizer process outlives the trial that started it.
    """

    def __init__(self, plan: Plan, record: Record, device_uuid: str, check: Callable | None):
        checks = plan.acceptance.sanitizer
        owed = bool(checks) and check is not None
        if owed and any(t.sanitizer for t in record.trials() if t.provenance.device.uuid == device_uuid):
            owed = False  # an earlier trial on this device ran them
        self._fail_fast = "sanitizer" in plan.stop.fail_fast
        self._stop = False
        self._check = check
        self.jobs: list[Job] = (
            [(c.tool, cid, side, c.timeout_seconds) for c in checks for cid in c.cases for side in ARM_SIDES]
            if owed
            else []
        )
        self._pool = ThreadPoolExecutor(max_workers=SANITIZER_WORKERS) if self.jobs else None
        self._futures: list[Future] = [self._pool.submit(self._one, job) for job in self.jobs] if self._pool else []

    def _one(self, job: Job) -> SanitizerResult | None:
        if self._stop:
            return None
        assert self._check is not None
        result = self._check(*job)
        if result is not None and result.status != "clean" and self._fail_fast:
            self._stop = True  # here, not where results are read: they are read after the preflight
        return result

    def results(self, progress: Callable[[int, str], None]) -> Iterator[SanitizerResult]:
        """Each check's result, in the plan's order, as soon as it is known."""
        for job, future in zip(self.jobs, self._futures):
            tool, case, side, _ = job
            with watch(case, side):
                result = future.result()
                if result is None:
                    continue
                yield result
                progress(0, f"{tool} {case} {side}: {result.status}")

    def close(self) -> None:
        self._stop = True
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
