"""The published JSON Schema of plans, generated from the pydantic models."""

from __future__ import annotations

from typing import Any

from qualify.plan.model import SCHEMA_VERSION, Plan


def plan_json_schema() -> dict[str, Any]:
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://qualify.dev/schemas/plan-v{SCHEMA_VERSION}.json"
    return schema
