"""The frozen plan: typed models, loading, resolution of cases, and the digest that binds results."""

from qualify.plan.load import load_plan
from qualify.plan.model import Plan

__all__ = ["Plan", "load_plan"]
