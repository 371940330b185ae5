"""Draw a Grafana dashboard as a PNG with matplotlib, from real Prometheus data.

Grafana does not run here, so the pictures in docs/dashboards.md are drawn from the same
queries, against the Prometheus server of the end-to-end test: each panel sits where its
``gridPos`` puts it, time series as lines (stacked when the panel stacks), stat and gauge
panels as their last value, bar gauges as horizontal bars. Regenerate the committed PNGs
with ``MCP_CANCELLATION_RENDER_DOCS=1 .venv/bin/python -m pytest tests/dashboards -m e2e``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: (expr, instant) -> Prometheus result: matrix for ranges, vector for instants.
Fetch = Callable[[str, bool], list[dict[str, Any]]]

_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_GRID_ROW = 0.42  # inches per Grafana grid row


def legend(template: str, metric: Mapping[str, str]) -> str:
    if template in ("", "__auto"):
        return ", ".join(f"{k}={v}" for k, v in sorted(metric.items())) or "value"
    return _LABEL.sub(lambda m: metric.get(m.group(1), ""), template)


def _scale(unit: str) -> tuple[float, str]:
    if unit == "percentunit":
        return 100.0, "%"
    if unit == "ops":
        return 1.0, "/s"
    return 1.0, ""


def _format(value: float, unit: str) -> str:
    factor, suffix = _scale(unit)
    value *= factor
    if abs(value) >= 100 or value == int(value):
        return f"{value:.0f}{suffix}"
    return f"{value:.2f}{suffix}"


def render(document: Mapping[str, Any], fetch: Fetch, path: Path, subtitle: str = "") -> None:
    """Draw *document*'s panels with data from *fetch* into the PNG *path*."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.gridspec import GridSpec

    panels: Sequence[Mapping[str, Any]] = document["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    figure = plt.figure(figsize=(18, rows * _GRID_ROW + 0.8), dpi=80)
    figure.suptitle(f"{document['title']}{subtitle}", fontsize=14, x=0.01, ha="left")
    grid = GridSpec(
        rows, 24, figure=figure, hspace=1.6, wspace=0.9, top=1 - 0.8 / (rows * _GRID_ROW + 0.8)
    )
    for panel in panels:
        pos = panel["gridPos"]
        ax = figure.add_subplot(
            grid[pos["y"] : pos["y"] + pos["h"], pos["x"] : pos["x"] + pos["w"]]
        )
        ax.set_title(panel["title"], fontsize=10, loc="left")
        unit = panel["fieldConfig"]["defaults"]["unit"]
        kind = panel["type"]
        if kind == "timeseries":
            _timeseries(ax, panel, fetch, unit)
        else:
            _values(ax, panel, fetch, unit, bars=kind == "bargauge")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def _timeseries(ax: Any, panel: Mapping[str, Any], fetch: Fetch, unit: str) -> None:
    factor, suffix = _scale(unit)
    stacked = panel["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get("mode")
    series: list[tuple[str, list[float], list[float]]] = []
    for target in panel["targets"]:
        for result in fetch(target["expr"], False):
            times = [float(t) for t, _ in result["values"]]
            values = [float(v) * factor for _, v in result["values"]]
            series.append((legend(target["legendFormat"], result["metric"]), times, values))
    if not series:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return
    start = min(s[1][0] for s in series)
    if stacked == "normal" and len(series) > 1:
        grid = sorted({t for _, times, _ in series for t in times})
        stacks = [
            [dict(zip(times, values, strict=True)).get(t, 0.0) for t in grid]
            for _, times, values in series
        ]
        ax.stackplot([t - start for t in grid], *stacks, labels=[s[0] for s in series], alpha=0.6)
    else:
        for label, times, values in series:
            ax.plot([t - start for t in times], values, label=label, linewidth=1.2)
    ax.set_xlabel("seconds", fontsize=8)
    if suffix:
        ax.set_ylabel(suffix, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=2 if len(series) > 4 else 1)


def _values(ax: Any, panel: Mapping[str, Any], fetch: Fetch, unit: str, bars: bool) -> None:
    items: list[tuple[str, float]] = []
    for target in panel["targets"]:
        for result in fetch(target["expr"], True):
            items.append(
                (legend(target["legendFormat"], result["metric"]), float(result["value"][1]))
            )
    ax.set_xticks([])
    ax.set_yticks([])
    if not items:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return
    if bars:
        factor, _ = _scale(unit)
        labels = [label for label, _ in items][::-1]
        values = [value * factor for _, value in items][::-1]
        ax.barh(labels, values, color="tab:orange")
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        for index, (_, value) in enumerate(items[::-1]):
            ax.text(value * factor, index, " " + _format(value, unit), va="center", fontsize=7)
        ax.tick_params(labelsize=7)
        return
    text = "\n".join(f"{label}: {_format(value, unit)}" for label, value in items[:4])
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, transform=ax.transAxes)
