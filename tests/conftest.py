"""Markers that skip with a reason, and a fixture that proves root tests leave nothing behind."""

from __future__ import annotations

import os
import shutil

import pytest

from emu.net.cleanup import clean


def _has_mininet() -> bool:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return False
    return shutil.which("mnexec") is not None


def pytest_collection_modifyitems(config, items):
    root = os.geteuid() == 0
    mininet = _has_mininet()
    for item in items:
        if "root" in item.keywords and not root:
            item.add_marker(pytest.mark.skip(reason="needs root for namespaces and veth (run as root, as CI does)"))
        if "mininet" in item.keywords and not mininet:
            item.add_marker(pytest.mark.skip(reason="needs Mininet and mnexec (apt-get install mininet)"))


@pytest.fixture
def no_leftovers():
    """Clean before; after the test, clean again and fail if anything had been left."""
    clean()
    yield
    report = clean()
    assert report.empty(), f"the test left things behind: {report}"
