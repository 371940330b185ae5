"""Both bridges follow one policy: idempotent install and uninstall, ConfigurationError for
a registry that is gone or a second setup with other options, and receivers that go with
a registry collected while bridged."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from mcp_cancellation import CancellationRegistry, ConfigurationError, MemoryStorage, signals
from mcp_cancellation.telemetry import otel
from mcp_cancellation.telemetry.prometheus import PrometheusBridge, metrics_app

Make = Callable[[CancellationRegistry], otel.OpenTelemetryBridge | PrometheusBridge]


def _installed(bridge: otel.OpenTelemetryBridge | PrometheusBridge) -> bool:
    return bridge.installed


def _registry() -> CancellationRegistry:
    return CancellationRegistry(MemoryStorage(), janitor_interval=None)


@pytest.fixture(params=["otel", "prometheus"])
def make_bridge(request: pytest.FixtureRequest) -> Iterator[Make]:
    made: list[otel.OpenTelemetryBridge | PrometheusBridge] = []

    def make(registry: CancellationRegistry) -> otel.OpenTelemetryBridge | PrometheusBridge:
        bridge: otel.OpenTelemetryBridge | PrometheusBridge
        if request.param == "otel":
            bridge = otel.OpenTelemetryBridge(
                registry, tracer_provider=TracerProvider(), meter_provider=MeterProvider()
            )
        else:
            bridge = PrometheusBridge(registry, collector_registry=CollectorRegistry())
        made.append(bridge)
        return bridge

    yield make
    for bridge in made:
        bridge.uninstall()


def test_install_and_uninstall_are_idempotent(make_bridge: Make) -> None:
    registry = _registry()
    # Blinker holds receivers weakly: an earlier test's bridge that is garbage but not yet
    # collected would be counted here and vanish mid-test. Collect it first.
    gc.collect()
    before = len(signals.request_cancelled.receivers)
    bridge = make_bridge(registry)
    assert bridge.install() is bridge.install() is bridge
    assert _installed(bridge)
    assert len(signals.request_cancelled.receivers) == before + 1
    bridge.uninstall()
    bridge.uninstall()
    assert not _installed(bridge)
    assert len(signals.request_cancelled.receivers) == before


def test_a_bridge_of_a_collected_registry_cannot_install(make_bridge: Make) -> None:
    registry = _registry()
    bridge = make_bridge(registry)
    del registry
    gc.collect()
    with pytest.raises(ConfigurationError, match="no longer exists"):
        bridge.install()


def test_a_registry_collected_while_bridged_takes_its_receivers_along(make_bridge: Make) -> None:
    before = len(signals.request_cancelled.receivers)
    registry = _registry()
    make_bridge(registry).install()
    assert len(signals.request_cancelled.receivers) == before + 1
    del registry
    gc.collect()
    assert len(signals.request_cancelled.receivers) == before


def test_a_second_setup_returns_the_bridge_or_refuses_other_options() -> None:
    registry = _registry()
    tracer_provider, meter_provider = TracerProvider(), MeterProvider()
    try:
        first = otel.instrument(
            registry, tracer_provider=tracer_provider, meter_provider=meter_provider
        )
        assert otel.instrument(registry) is first  # nothing named: the same bridge
        assert otel.instrument(registry, tracer_provider=tracer_provider) is first
        with pytest.raises(ConfigurationError, match="tracer_provider"):
            otel.instrument(registry, tracer_provider=TracerProvider())
        with pytest.raises(ConfigurationError, match="hash_key"):
            otel.instrument(registry, hash_key="another key")
    finally:
        otel.uninstrument(registry)
    app = metrics_app(registry)
    assert metrics_app(registry).bridge is app.bridge
    with pytest.raises(ConfigurationError, match="top_k"):
        metrics_app(registry, top_k=3)
    app.bridge.uninstall()
