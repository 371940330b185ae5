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

    panels: Sequence[Mapping[str, Any]] = document["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    width, header = 18.0, 0.6
    height = rows * _GRID_ROW + header
    figure = plt.figure(figsize=(width, height), dpi=80)
    figure.suptitle(f"{document['title']}{subtitle}", fontsize=14, x=0.01, y=0.995, ha="left")
    for panel in panels:
        pos = panel["gridPos"]
        kind = panel["type"]
        # The panel's box in inches, then the axes inside it (room for title and ticks).
        left = pos["x"] / 24 * width + (0.75 if kind == "timeseries" else 0.2)
        right = (pos["x"] + pos["w"]) / 24 * width - 0.2
        top = height - header - pos["y"] * _GRID_ROW - (0.35 if kind != "row" else 0.0)
        bottom = (
            height
            - header
            - (pos["y"] + pos["h"]) * _GRID_ROW
            + {"timeseries": 0.55, "row": 0.0}.get(kind, 0.15)
        )
        ax = figure.add_axes(
            (left / width, bottom / height, (right - left) / width, (top - bottom) / height)
        )
        if kind == "row":
            ax.axis("off")
            ax.text(0, 0.5, "▾ " + panel["title"], fontsize=12, weight="bold", va="center")
            continue
        ax.set_title(panel["title"], fontsize=10, loc="left")
        unit = panel["fieldConfig"]["defaults"]["unit"]
        if kind == "table":
            _table(ax, panel, fetch)
        elif kind == "timeseries":
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
        _no_data(ax, panel)
        return
    nonzero = [s for s in series if any(s[2])]
    if nonzero:  # series that stay at 0 clutter a stack; all-zero panels keep theirs
        series = nonzero
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


def _no_data(ax: Any, panel: Mapping[str, Any]) -> None:
    text = panel["fieldConfig"]["defaults"].get("noValue", "no data")
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _table(ax: Any, panel: Mapping[str, Any], fetch: Fetch) -> None:
    """One line per storage, one column per target (as the merge transformation shows)."""
    organize = panel["transformations"][-1]["options"]["renameByName"]
    columns = [organize[f"Value #{t['refId']}"] for t in panel["targets"]]
    lines: dict[str, list[str]] = {}
    for index, target in enumerate(panel["targets"]):
        for result in fetch(target["expr"], True):
            row = lines.setdefault(result["metric"].get("storage", ""), [""] * len(columns))
            row[index] = _format(float(result["value"][1]), "short")
    ax.axis("off")
    if not lines:
        _no_data(ax, panel)
        return
    cells = [[storage, *values] for storage, values in sorted(lines.items())]
    drawn = ax.table(cellText=cells, colLabels=[organize["storage"], *columns], loc="center")
    drawn.auto_set_font_size(False)
    drawn.set_fontsize(8)


_COLORS = {"green": "tab:green", "orange": "tab:orange", "red": "tab:red"}


def _threshold_color(panel: Mapping[str, Any], value: float) -> str:
    """The colour Grafana gives *value*: that of the last threshold step at or below it."""
    color = "green"
    for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]:
        if step["value"] is None or value >= step["value"]:
            color = step["color"]
    return _COLORS.get(color, color)


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
        _no_data(ax, panel)
        return
    if bars:
        factor, _ = _scale(unit)
        top = panel["fieldConfig"]["defaults"].get("max")
        scale = float(top) * factor if top is not None else max(v for _, v in items) * factor
        count = len(items)
        for index, (label, value) in enumerate(items):
            y = count - 1 - index
            ax.barh(y, scale, color="0.92", height=0.6)
            ax.barh(y, value * factor, color=_threshold_color(panel, value), height=0.6)
            ax.text(0.005 * scale, y, f" {label}", va="center", fontsize=8)
            ax.text(scale, y, _format(value, unit) + " ", va="center", ha="right", fontsize=8)
        ax.set_xlim(0, scale or 1)
        ax.set_ylim(-0.6, count - 0.4)
        return
    text = "\n".join(f"{label}: {_format(value, unit)}" for label, value in items[:4])
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, transform=ax.transAxes)
