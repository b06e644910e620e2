"""Python arms' facts in a record's trials (`Trial.python`) held to the plan and to each other:
each names its side's callable and graph mode as the plan does, and an autotuner's choice, once
a trial has recorded it, is the choice of every later trial of the record."""

from __future__ import annotations

from qualify.plan.model import ARM_SIDES, Plan, PythonArm
from qualify.results.model import Trial


def python_problems(trials: list[Trial], plan: Plan) -> list[str]:
    out = []
    first: dict[str, tuple[int, dict]] = {}
    for trial in trials:
        where = f"trials/trial-{trial.index}.json"
        for side in ARM_SIDES:
            arm, info = plan.arm(side), trial.python.get(side)
            if info is None:
                if isinstance(arm, PythonArm) and trial.status == "complete":
                    out.append(f"{where}: python.{side} is missing, and the plan's {side} arm is a Python arm")
                continue
            if not isinstance(arm, PythonArm):
                out.append(f"{where}: python.{side}: the plan's {side} arm is not a Python arm")
                continue
            if info.callable != arm.callable or info.graph != arm.graph:
                out.append(
                    f"{where}: python.{side}: {info.callable} (graph {info.graph}), the plan's arm is "
                    f"{arm.callable} (graph {arm.graph})"
                )
            if info.autotuned:
                seen = first.setdefault(side, (trial.index, info.autotuned))
                if seen[1] != info.autotuned and trial.status == "complete":
                    out.append(
                        f"{where}: python.{side}.autotuned differs from trial {seen[0]}'s, and the trial is "
                        "complete: a record keeps the configuration its first trial's autotuner chose"
                    )
    return out
