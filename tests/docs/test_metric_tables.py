"""docs/metrics.md's two metric tables say what the catalogue exports: every Prometheus
metric with its type and labels, every OpenTelemetry instrument with its kind, unit,
attributes and Prometheus name, and nothing else; and every rejection reason is
documented in metrics.md and api.md."""

from __future__ import annotations

import re

from mcp_cancellation.telemetry._catalogue import ALL, REJECT_REASONS, TASK_REJECT_REASONS
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


def _reasons(text: str, marker: str) -> set[str]:
    """The backquoted reasons of the line of *text* that names *marker*: ``reason="x"``
    spellings, or the ``(`a` \\| `b`)`` list of a signal's table row."""
    (line,) = [line for line in text.splitlines() if line.startswith(marker)]
    spelled = set(re.findall(r'reason="([a-z_]+)"', line))
    listed = re.search(r"`reason` \(([^)]*)\)", line)
    return spelled | (set(names(listed[1])) if listed else set())


def test_every_rejection_reason_is_documented_where_users_read_it() -> None:
    """Each reason the package emits (the catalogue's), in metrics.md's Prometheus table
    and api.md's signal table: no more, no fewer."""
    docs = project_root() / "docs"
    metrics = (docs / "metrics.md").read_text(encoding="utf-8")
    api = (docs / "api.md").read_text(encoding="utf-8")
    assert _reasons(metrics, "| `mcp_cancellation_rejected_total` |") == set(REJECT_REASONS)
    assert _reasons(metrics, "| `mcp_cancellation_tasks_rejected_total` |") == set(
        TASK_REJECT_REASONS
    )
    assert _reasons(api, "| `cancellation_rejected` (") == set(REJECT_REASONS)
    assert _reasons(api, "| `task_rejected` (") == set(TASK_REJECT_REASONS)
