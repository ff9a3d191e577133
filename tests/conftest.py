"""pytest fixtures shared by every folder of tests/."""
import pytest

from memtrace_testing import Build


@pytest.fixture(scope="session")
def build():
    if not Build.library.exists() or not Build.report.exists():
        pytest.fail(f"build the project first (make build): {Build.library} missing")
    return Build
