"""Settings for every test session.

Hypothesis: no per-example deadline. Its default (200 ms) fails a correct test when a
loaded CI machine stalls one example, and CI may not depend on timing luck; what the
property tests check is behaviour, and their wall time is bounded by their example count.
"""

from __future__ import annotations

try:
    from hypothesis import settings
except ImportError:  # the tests that use it import it and say so
    pass
else:
    settings.register_profile("raftsink", deadline=None)
    settings.load_profile("raftsink")

pytest_plugins = ("tests.helpers.tls_certs",)
"""Fixtures shared by test modules: `certs` (a module's throw-away TLS certificates)."""
