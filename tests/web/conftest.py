"""The browser tests start `quire serve` with the service suite's process machinery (stopped with the session)."""

from tests.service.conftest import processes  # noqa: F401 - the fixture, shared rather than copied
