"""Sanitizer: the plan's compute-sanitizer checks, once per device (the first trial that gets
there), after all timing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from qualify.plan.model import ARM_SIDES, Plan
from qualify.results.model import SanitizerResult
from qualify.results.store import Record
from qualify.run.stages.where import watch

SANITIZER_WORKERS = 4


def sanitize(
    plan: Plan, record: Record, device_uuid: str, check: Callable | None, progress: Callable[[int, str], None]
) -> Iterator[SanitizerResult]:
    """Each check's result, in the plan's order, as soon as it is known.

    The checks run SANITIZER_WORKERS at a time: each is a process of its own and none is timed.
    With fail-fast on "sanitizer", checks not yet started when one finds something are not started.
    """
    checks = plan.acceptance.sanitizer
    if not checks or check is None:
        return
    if any(t.sanitizer for t in record.trials() if t.provenance.device.uuid == device_uuid):
        return
    fail_fast = "sanitizer" in plan.stop.fail_fast
    jobs = [(c.tool, cid, side, c.timeout_seconds) for c in checks for cid in c.cases for side in ARM_SIDES]
    stop = False

    def one(job):
        if stop:
            return None
        return check(*job)

    with ThreadPoolExecutor(max_workers=SANITIZER_WORKERS) as pool:
        futures = [pool.submit(one, job) for job in jobs]
        for job, future in zip(jobs, futures):
            tool, case, side, _ = job
            with watch(case, side):
                result = future.result()
                if result is None:
                    continue
                yield result
                progress(0, f"{tool} {case} {side}: {result.status}")
            if result.status != "clean" and fail_fast:
                stop = True
