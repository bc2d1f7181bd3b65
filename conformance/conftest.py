"""Activates the conformance pytest plugin for ``pytest conformance`` from a checkout.

Installed, the plugin is also a ``pytest11`` entry point (so ``pytest --pyargs conformance`` sees its
options); without installation use ``pytest -p conformance.plugin --pyargs conformance``. Either
way it is registered once.
"""
import conformance.plugin as _plugin


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.is_registered(_plugin):
        # pytest_addoption is a historic hook: registering now also adds the plugin's options.
        pluginmanager.register(_plugin, "conformance.plugin")
