"""Sandbox tests need bubblewrap that can make namespaces (`make sandbox-env`); without it they skip, saying so."""

import pytest

from pasodoble.sandbox import probe


def pytest_collection_modifyitems(config, items):
    found = probe()
    if found["essential_ok"]:
        return
    reason = f"no sandbox on this machine: {found['why']} (make sandbox-env installs bubblewrap)"
    for item in items:
        if "sandbox" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
