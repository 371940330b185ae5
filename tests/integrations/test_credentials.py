"""No password, anywhere: a secret in a storage URL or an admin app's URL is fed through
every path that formats one (configuration errors, an unreachable or TLS-refusing server,
the storage-down warning, ``/metrics``, the OpenTelemetry bridge, each CLI subcommand), and
appears in none of what they print, log, raise or serve."""

from __future__ import annotations

import asyncio
import logging
import traceback
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_cancellation import (
    CancellationRegistry,
    ConfigurationError,
    RedisStorage,
    StorageUnavailable,
)
from mcp_cancellation.telemetry.otel import OpenTelemetryBridge
from mcp_cancellation.telemetry.prometheus import metrics_app

from ..support import UvicornThread
from ._helpers import cli

pytestmark = pytest.mark.e2e

SECRET = "Sup3r-S3cret-P4ss"
SECRETS = (SECRET, SECRET.replace("-", "%2D"))


def clean(*texts: object) -> None:
    for text in texts:
        assert not any(secret in str(text) for secret in SECRETS), text


def everything(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


@pytest.mark.parametrize(
    "url",
    [
        f"redis://user:{SECRET}@127.0.0.1:notaport/0",
        f"redis://user:{SECRET}@127.0.0.1:6379/notadb",
        f"mysql://user:{SECRET}@127.0.0.1/0",
        f"redis+cluster://user:{SECRET}@127.0.0.1:notaport/0",
        f"redis+cluster://user:{SECRET}@127.0.0.1:7000/3",
        f"redis://127.0.0.1:6379/0?password={SECRET}&ssl_cert_reqs=bogus-value",
    ],
)
def test_a_configuration_error_never_shows_the_password(url: str) -> None:
    try:
        storage = RedisStorage.from_url(url)
    except ConfigurationError as exc:
        clean(everything(exc))
    else:  # (redis-py reads some options only when it connects)
        clean(repr(storage), storage.identity)


@pytest.mark.redis
async def test_an_unreachable_or_refusing_server_never_shows_the_password(
    redis_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    port = redis_server.port
    urls = [
        f"redis://user:{SECRET}@127.0.0.1:1/0",  # nothing listens
        f"rediss://user:{SECRET}@127.0.0.1:{port}/0",  # TLS against a plain port
        f"redis://user:{SECRET}@127.0.0.1:{port}/0",  # a wrong user and password
    ]
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    for url in urls:
        storage = RedisStorage.from_url(url, timeout=1.0, connect_timeout=0.5)
        registry = CancellationRegistry(storage, janitor_interval=None)
        bridge = OpenTelemetryBridge(
            registry,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        ).install()
        try:
            with caplog.at_level(logging.DEBUG):
                with pytest.raises(StorageUnavailable) as raised:
                    await registry.cancel("x", "why", "ip:192.0.2.1")
                clean(everything(raised.value), repr(storage), storage.identity)
                with UvicornThread(metrics_app(registry)) as server:
                    async with httpx.AsyncClient() as http:
                        scraped = await http.get(server.url + "/")
                clean(scraped.text)
        finally:
            bridge.uninstall()
            await registry.aclose()
    clean(caplog.text, reader.get_metrics_data())
    clean(*(span.to_json() for span in spans.get_finished_spans()))


async def test_every_cli_subcommand_keeps_the_password_to_itself() -> None:
    bad = f"redis://ops:{SECRET}@127.0.0.1:notaport/0"
    down = f"redis://ops:{SECRET}@127.0.0.1:1/0"
    admin = f"http://ops:{SECRET}@127.0.0.1:1/admin"
    runs = [
        ("inspect", "--redis", bad),
        ("inspect", "--redis", down),
        ("inspect", "--url", admin, "--token", SECRET),
        ("cancel", "--redis", bad, "--scope", "ip:192.0.2.1", "--all"),
        ("cancel", "--redis", down, "--scope", "ip:192.0.2.1", "--all"),
        ("cancel", "--url", admin, "--token", SECRET, "--scope", "ip:192.0.2.1", "--all"),
        ("demo", "--redis", bad, "--port", "0"),
        ("demo", "--redis", f"mysql://ops:{SECRET}@127.0.0.1/0", "--port", "0"),
        ("client", "--url", f"http://ops:{SECRET}@127.0.0.1:1/mcp"),
        ("simulate", "--url", f"ftp://ops:{SECRET}@127.0.0.1:1/mcp"),
        ("simulate", "--url", f"http://ops:{SECRET}@192.0.2.1:1/mcp"),
    ]
    for args in runs:
        code, out, err = await asyncio.wait_for(cli(*args), 60)
        assert code != 0, (args, out, err)
        assert "Traceback" not in err, (args, err)
        clean(out, err)
