"""Preflight: every arm's cases run first in isolated child workers; a case that faults or hangs
there is recorded against its arm and left out of this process."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from qualify.plan.load import LoadedPlan
from qualify.plan.model import ARM_SIDES
from qualify.results.model import Failure

# isolation.CaseOutcome.status -> Failure.kind
_KINDS = {"fault": "fault", "timeout": "timeout", "error": "error"}


def run_preflight(
    loaded: LoadedPlan, preflight: Callable | None, progress: Callable[[int, str], None], failures: list[Failure]
) -> frozenset[str]:
    """The ids of cases that failed in a worker; their failures go into `failures`.

    The two arms' workers run at the same time: nothing is timed while they run.
    """
    if preflight is None:
        return frozenset()
    bad: set[str] = set()
    ids = [c.id for c in loaded.cases]
    with ThreadPoolExecutor(max_workers=len(ARM_SIDES)) as pool:
        outcomes = list(pool.map(lambda side: preflight(side, ids), ARM_SIDES))
    for side, results in zip(ARM_SIDES, outcomes):
        for outcome in results:
            if outcome.status != "ok":
                bad.add(outcome.case)
                message = f"in an isolated worker: {outcome.message}"
                failures.append(Failure(kind=_KINDS[outcome.status], case=outcome.case, side=side, message=message))
        progress(0, f"preflight {side}")
    return frozenset(bad)
