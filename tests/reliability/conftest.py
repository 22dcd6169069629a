"""Hypothesis profiles: ``ci`` (default, 200 examples per property and backend) and
``nightly`` (10,000), chosen with ``--hypothesis-profile=nightly``."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

_common = dict(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much,
                           HealthCheck.function_scoped_fixture],  # backend names only
)
settings.register_profile("ci", max_examples=200, derandomize=True, **_common)
settings.register_profile("nightly", max_examples=10_000, **_common)
settings.load_profile("ci")
