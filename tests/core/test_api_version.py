"""The contract version as a compatible range: older minors load, newer minors and other majors
are refused with the reason."""

from __future__ import annotations

import pytest

import onnxplug
from onnxplug.api import API_VERSION, Device, KernelProvider, ProviderFactory


def _plugin(version):
    class Factory(ProviderFactory):
        name = "versioned"
        ort_name = "VersionedExecutionProvider"
        api_version = version

        def devices(self):
            return [Device("cpu")]

        def create(self, device, options):
            return KernelProvider(self, device)

    class Plugin:
        @onnxplug.hookimpl
        def onnxplug_provider_factories(self):
            return [Factory()]

    return Plugin()


def test_the_core_speaks_1_2():
    assert API_VERSION == (1, 2)


@pytest.mark.parametrize("version", [1, (1, 0), (1, 1), (1, 2)])
def test_factories_written_for_this_or_an_older_minor_load(version):
    environment = onnxplug.Environment(autoload=False, entry_points=[])
    environment.register(_plugin(version), name="versioned")
    assert environment.factory("versioned") is not None


@pytest.mark.parametrize(
    "version, reason",
    [
        ((1, 3), "newer than this onnxplug's 1.2"),
        (2, "this onnxplug speaks 1.x"),
        ((2, 0), "speaks 1.x"),
        ("1", "must be"),
    ],
)
def test_newer_minors_other_majors_and_garbage_are_refused_with_the_reason(version, reason):
    environment = onnxplug.Environment(autoload=False, entry_points=[])
    with pytest.raises(onnxplug.PluginError, match="versioned") as caught:
        environment.register(_plugin(version), name="versioned")
    assert reason in str(caught.value)
    assert environment.factory("versioned") is None
