"""The hypothesis profile of the property tests: derandomized in CI, so every run sees the same
examples; QUALIFY_FUZZ_PROFILE=explore searches afresh and longer.

READERS time-boxes the readers' fuzz tests (marker `fuzz`): a third of the profile's examples,
each with a deadline, since a reader that needs seconds for a few KiB of input is itself the bug."""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", max_examples=2_000, deadline=None)
PROFILE = settings.get_profile(os.environ.get("QUALIFY_FUZZ_PROFILE", "ci"))
READERS = settings(PROFILE, max_examples=max(PROFILE.max_examples // 3, 1), deadline=timedelta(seconds=5))
