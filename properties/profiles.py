"""Hypothesis profiles, chosen with HYPOTHESIS_PROFILE: ``ci`` (dev.py test uses it), ``dev``, ``fuzz``,
and ``ci-find`` and ``ci-seeded`` for properties/mutants.py.

fleet_model imports this module, so every property test runs under the chosen profile.

A fuzz run goes until it is stopped: ``HYPOTHESIS_PROFILE=fuzz timeout 3600 pytest properties``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "ci",
    max_examples=500,
    stateful_step_count=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
# The ci profile's examples without shrinking: properties/mutants.py only asks whether a run fails.
settings.register_profile("ci-find", settings.get_profile("ci"), phases=[Phase.explicit, Phase.generate])
# The same with the seed given by --hypothesis-seed: how often a seed finds a bug (mutants.py --seeds).
settings.register_profile("ci-seeded", settings.get_profile("ci-find"), derandomize=False, database=None)
settings.register_profile("dev", max_examples=100, stateful_step_count=40, deadline=None)
settings.register_profile(
    "fuzz",
    max_examples=100_000_000,
    stateful_step_count=150,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
