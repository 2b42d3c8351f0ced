"""A self-contained HTML page drawing a partitioned graph (no network, no external scripts).

Nodes are laid out in layers by their longest distance from the graph inputs, coloured by
provider; fused partitions get an outline colour of their own.  The page is an SVG with
wheel zoom and drag to pan, so it stays readable for a few thousand nodes.
"""

from __future__ import annotations

import html
import json
from typing import Any

_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"]
_WIDTH, _HEIGHT, _GAP_X, _GAP_Y = 150, 34, 40, 14


def _layers(nodes: list[dict], edges: list[tuple[str, str]]) -> dict[str, int]:
    order = [n["name"] for n in nodes]  # execution order: producers first
    depth = {name: 0 for name in order}
    incoming: dict[str, list[str]] = {}
    for source, target in edges:
        incoming.setdefault(target, []).append(source)
    for name in order:
        for source in incoming.get(name, ()):
            depth[name] = max(depth[name], depth[source] + 1)
    return depth


def write_html(report: dict[str, Any], path: str, title: str = "onnxplug partition") -> None:
    nodes, edges = report["nodes"], report["edges"]
    providers = report["providers"] or sorted({n["provider"] for n in nodes})
    colour = {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(providers)}
    partition_of = {member: name for name, members in report["partitions"].items() for member in members}
    depth = _layers(nodes, edges)
    rows: dict[int, int] = {}
    position = {}
    for node in nodes:
        layer = depth[node["name"]]
        row = rows.get(layer, 0)
        rows[layer] = row + 1
        position[node["name"]] = (10 + row * (_WIDTH + _GAP_X), 10 + layer * (_HEIGHT + _GAP_Y))
    width = 20 + max(rows.values(), default=1) * (_WIDTH + _GAP_X)
    height = 20 + (max(depth.values(), default=0) + 1) * (_HEIGHT + _GAP_Y)
    parts = []
    for source, target in edges:
        (x1, y1), (x2, y2) = position[source], position[target]
        parts.append(f'<line x1="{x1 + _WIDTH / 2}" y1="{y1 + _HEIGHT}" x2="{x2 + _WIDTH / 2}" y2="{y2}" class="e"/>')
    for node in nodes:
        x, y = position[node["name"]]
        fill = colour.get(node["provider"], "#999")
        partition = partition_of.get(node["name"])
        stroke = ' stroke="#000" stroke-width="3"' if partition else ""
        label = html.escape(f"{node['op_type']}")
        tip = html.escape(
            f"{node['name']} ({node['op_type']}) on {node['provider']}"
            + (f", partition {partition}" if partition else "")
        )
        parts.append(
            f'<g><title>{tip}</title><rect x="{x}" y="{y}" width="{_WIDTH}" height="{_HEIGHT}" rx="5" '
            f'fill="{fill}"{stroke}/><text x="{x + 6}" y="{y + 21}">{label}</text></g>'
        )
    legend = "".join(
        f'<span><i style="background:{c}"></i>{html.escape(p)}: {report["counts"].get(p, 0)} nodes</span>'
        for p, c in colour.items()
    )
    page = _TEMPLATE.format(
        title=html.escape(title),
        legend=legend,
        width=width,
        height=height,
        body="\n".join(parts),
        copies=len(report["copies"]),
        data=html.escape(json.dumps(report["counts"])),
    )
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(page)


_TEMPLATE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 0; }} header {{ padding: 8px 12px; background: #f4f4f4; }}
header span {{ margin-right: 16px; }}
header i {{ display: inline-block; width: 12px; height: 12px; margin-right: 4px; }}
#view {{ width: 100vw; height: calc(100vh - 60px); overflow: hidden; cursor: grab; }}
text {{ font-size: 12px; fill: #fff; pointer-events: none; }} .e {{ stroke: #888; stroke-width: 1; }}
</style></head>
<body><header><b>{title}</b> &nbsp; {legend} <span>copies: {copies}</span>
<span>wheel: zoom, drag: pan</span></header>
<div id="view"><svg id="g" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" data-counts="{data}">
<g id="root">
{body}
</g></svg></div>
<script>
(function () {{
  var root = document.getElementById("root"), view = document.getElementById("view");
  var scale = 1, x = 0, y = 0, drag = null;
  function apply() {{ root.setAttribute("transform", "translate(" + x + "," + y + ") scale(" + scale + ")"); }}
  view.addEventListener("wheel", function (e) {{ e.preventDefault(); scale *= e.deltaY < 0 ? 1.1 : 0.9; apply(); }});
  view.addEventListener("mousedown", function (e) {{ drag = [e.clientX - x, e.clientY - y]; }});
  window.addEventListener("mouseup", function () {{ drag = null; }});
  window.addEventListener("mousemove", function (e) {{
    if (drag) {{ x = e.clientX - drag[0]; y = e.clientY - drag[1]; apply(); }}
  }});
}})();
</script></body></html>
"""
