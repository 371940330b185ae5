"""docs/metrics.md's two metric tables say what the catalogue exports: every Prometheus
metric with its type and labels, every OpenTelemetry instrument with its kind, unit,
attributes and Prometheus name, and nothing else."""

from __future__ import annotations

import re

from mcp_cancellation.telemetry._catalogue import ALL
from mcp_cancellation.telemetry.otel._names import DURATION, METER_INSTRUMENTS

from ..support import project_root


def table(heading: str) -> list[list[str]]:
    """The rows of the table whose header row starts with *heading*, as cells."""
    lines = (project_root() / "docs" / "metrics.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {heading} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def names(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"`([^`]+)`", cell))


def test_the_prometheus_table_is_the_catalogue() -> None:
    documented = {names(row[0])[0]: (row[1], names(row[2])) for row in table("Metric")}
    exported = {info.name: (info.type, info.labels) for info in ALL}
    assert documented == exported


def test_the_opentelemetry_table_is_the_bridge_s_instruments() -> None:
    documented = {
        names(row[0])[0]: (row[1].removeprefix("observable "), names(row[3]))
        for row in table("Instrument")
    }
    instruments = {
        name: (kind, attributes) for name, (kind, _, attributes) in METER_INSTRUMENTS.items()
    }
    assert documented == instruments
    prometheus = {names(row[0])[0]: names(row[4])[0] for row in table("Instrument")}
    assert {prometheus[name] for name in prometheus if name != DURATION} == {
        info.name for info in ALL
    }
