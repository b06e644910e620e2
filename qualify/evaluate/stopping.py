"""When a case's timing stops: the plan's stop rule as a pure function of the samples so far.

The engine calls `stop_reason` after each block of a pair (the comparison, or the A/A control)
and stops that pair at the first non-None answer, which it records with the case. The rules:

- fixed: every block of `schedule.blocks` runs ("blocks done"); `budget.max_samples` still caps it.
- precision (earlier name: noise): after at least `stop.min_blocks` blocks, stop once the ratio's
  95 % interval half-width is at most `stop.target_ci_pct` ("target met"); otherwise stop at the
  first cap — `schedule.blocks` ("block cap"), `budget.max_samples` per arm ("sample cap") or
  `stop.max_case_seconds` of the pair's wall time ("wall cap").

The interval it tests is the one the verdict reports (`qualify.evaluate.stats`), so a case stopped
on "target met" carries that half-width in its record. Stopping on the interval is optional
stopping, which narrows intervals a little on average; `min_blocks >= 3` and a target well inside
the ±0.5 % "same" band keep the effect small, and the calibration benchmark measures the rates
under the real schedule rather than assuming them.

Every reason but "wall cap" can be re-derived from the saved samples (`replay_stop`).
"""

from __future__ import annotations

import numpy as np

from qualify.evaluate.stats import ci_half_width_pct
from qualify.evaluate.summarize import floor_ns, pair_stats
from qualify.plan.model import Plan
from qualify.plan.schedule import Pair
from qualify.results.samples import key

TARGET_MET = "target met"
BLOCKS_DONE = "blocks done"
BLOCK_CAP = "block cap"
SAMPLE_CAP = "sample cap"
WALL_CAP = "wall cap"
REASONS = (TARGET_MET, BLOCKS_DONE, BLOCK_CAP, SAMPLE_CAP, WALL_CAP)


def adaptive(plan: Plan) -> bool:
    return plan.stop.rule in ("precision", "noise")


def half_width_pct(arrays: dict[str, np.ndarray], case_id: str, pair: Pair, plan: Plan) -> float:
    """The ratio's interval half-width in %, over the samples of `pair` so far (inf below 2 blocks)."""
    (a, _), (b, _) = pair
    stats = pair_stats(arrays, case_id, a, b, floor_ns(arrays), plan.schedule.iterations_per_sample)
    return ci_half_width_pct(stats)


def stop_reason(
    arrays: dict[str, np.ndarray], case_id: str, pair: Pair, blocks_done: int, plan: Plan, elapsed_s: float = 0.0
) -> str | None:
    """Why the pair's timing stops after `blocks_done` blocks, or None to run another block.

    `pair` is `qualify.plan.schedule.MAIN` or `AA`; `elapsed_s` is the wall time the pair's timing
    has taken so far (the only input not in the samples).
    """
    sched, stop = plan.schedule, plan.stop
    per_block = 2 * sched.samples_per_block  # samples per arm in one block
    if adaptive(plan) and blocks_done >= stop.min_blocks:
        if stop.target_ci_pct is not None and half_width_pct(arrays, case_id, pair, plan) <= stop.target_ci_pct:
            return TARGET_MET
    if blocks_done >= sched.blocks:
        return BLOCK_CAP if adaptive(plan) else BLOCKS_DONE
    if (blocks_done + 1) * per_block > plan.budget.max_samples:
        return SAMPLE_CAP
    if adaptive(plan) and stop.max_case_seconds is not None and elapsed_s >= stop.max_case_seconds:
        return WALL_CAP
    return None


def replay_stop(arrays: dict[str, np.ndarray], case_id: str, pair: Pair, plan: Plan) -> tuple[int, str | None]:
    """Re-run the rule block by block over saved samples: (blocks the rule allows, its reason).

    For `report --check`: a record whose pair ran more blocks than this, or claims another reason,
    did not follow its plan. A "wall cap" cannot be replayed (time is not in the samples): the
    replay then runs to the last saved block and returns None as the reason.
    """
    (a, _), (b, _) = pair
    blocks = np.unique(np.concatenate([arrays[key(case_id, a, "block")], arrays[key(case_id, b, "block")]]))
    done = 0
    for done, last in enumerate(blocks.tolist(), start=1):
        prefix = _through_block(arrays, case_id, (a, b), last)
        reason = stop_reason(prefix, case_id, pair, done, plan, elapsed_s=0.0)
        if reason is not None:
            return done, reason
    return done, None


def _through_block(
    arrays: dict[str, np.ndarray], case_id: str, series: tuple[str, str], last: int
) -> dict[str, np.ndarray]:
    out = {"floor_ns": arrays["floor_ns"]} if "floor_ns" in arrays else {}
    for s in series:
        keep = arrays[key(case_id, s, "block")] <= last
        for field in ("ns", "block"):
            out[key(case_id, s, field)] = arrays[key(case_id, s, field)][keep]
    return out
