"""A self-contained HTML page drawing a partitioned graph (works offline, no external scripts).

The layout is computed in the page by dagre (``@dagrejs/dagre``, vendored minified under
``_vendor/`` with its MIT licence).  Why dagre: it is a maintained layered (Sugiyama) layout
engine, which suits dataflow graphs that run top to bottom; at ~50 kB it can be inlined so the
page stays one file; and it lays out a BERT-sized graph (~1000 nodes) in a few seconds in a
browser, where a Python layout library would add a run-time dependency to the core and make the
command slow.  (elkjs lays out as well but is ~1.5 MB.)

Python builds the picture's data from the public :class:`~onnxplug.PartitionReport`
(:func:`page_data`); the script lays it out and draws an SVG.  Constants and initializers are
never nodes; graph inputs and outputs are small rounded boxes; each inserted copy is a diamond
on the edges it serves.  Nodes are filled with their provider's colour, each fused partition has
an outline colour of its own, and nodes some provider declined carry a red corner mark, their
reasons in the hover box.
"""

from __future__ import annotations

import html
import importlib.resources
import json
from typing import Any

from ..runtime.report import PartitionReport

__all__ = ["page_data", "render_html", "write_html"]

# Provider fills (light enough for dark text) and partition outlines (saturated), cycled.
_PROVIDER_COLOURS = ["#a6cee3", "#fdbf6f", "#b2df8a", "#cab2d6", "#fb9a99", "#ffff99", "#d9d9d9", "#8dd3c7"]
_PARTITION_COLOURS = ["#1f78b4", "#e31a1c", "#33a02c", "#6a3d9a", "#ff7f00", "#b15928", "#00897b", "#c2185b"]


def page_data(report: PartitionReport) -> dict[str, Any]:
    """What the page draws, as JSON-ready data: ``nodes`` (kind ``op``, ``input``, ``output`` or
    ``copy``), ``edges`` (``[source id, target id, value]``), ``providers`` and ``partitions``
    (name → colour) and per-provider ``counts``."""
    providers = list(report.providers) or sorted({n.provider for n in report.nodes})
    for node in report.nodes:  # a provider the session did not list still needs a colour
        if node.provider not in providers:
            providers.append(node.provider)
    provider_colour = {p: _PROVIDER_COLOURS[i % len(_PROVIDER_COLOURS)] for i, p in enumerate(providers)}
    partition_colour = {p: _PARTITION_COLOURS[i % len(_PARTITION_COLOURS)] for i, p in enumerate(report.partitions)}
    declined: dict[str, list[str]] = {}
    for provider, per_node in report.declined.items():
        for name, reasons in per_node.items():
            declined.setdefault(name, []).extend(f"{provider}: {reason}" for reason in reasons)

    nodes: list[dict[str, Any]] = []
    producer: dict[str, str] = {}  # value name -> id of the box that makes it
    provider_of: dict[str, str] = {}
    for name in report.graph_inputs:
        nodes.append({"id": f"in:{name}", "kind": "input", "name": name})
        producer[name] = f"in:{name}"
    for index, node in enumerate(report.nodes):
        node_id = f"n{index}"
        nodes.append(
            {
                "id": node_id,
                "kind": "op",
                "name": node.name,
                "op": node.op_type if not node.domain else f"{node.domain}.{node.op_type}",
                "provider": node.provider,
                "partition": node.partition,
                "outputs": [f"{value}: {type_}" for value, type_ in zip(node.outputs, node.output_types) if value],
                "shape": _shape_of(node.output_types[0]) if node.output_types else "",
                "declined": declined.get(node.name, []),
            }
        )
        provider_of[node_id] = node.provider
        for value in node.outputs:
            if value:
                producer[value] = node_id
    consumers: dict[str, list[str]] = {}
    for index, node in enumerate(report.nodes):
        for value in dict.fromkeys(node.inputs):  # a value read twice is one edge
            if value and value in producer:
                consumers.setdefault(value, []).append(f"n{index}")
    for name in report.graph_outputs:
        nodes.append({"id": f"out:{name}", "kind": "output", "name": name})
        if name in producer:
            consumers.setdefault(name, []).append(f"out:{name}")

    routed: set[tuple[str, str]] = set()  # (value, consumer) pairs drawn through a copy
    edges: list[list[str]] = []
    for index, copy in enumerate(report.copies):
        if copy.value not in producer:
            continue
        copy_id = f"copy{index}"
        nodes.append({"id": copy_id, "kind": "copy", "name": copy.value, "source": copy.source, "target": copy.target})
        edges.append([producer[copy.value], copy_id, copy.value])
        for consumer in _copy_consumers(copy, consumers.get(copy.value, []), provider_of, producer[copy.value]):
            edges.append([copy_id, consumer, copy.value])
            routed.add((copy.value, consumer))
    for value, readers in consumers.items():
        edges.extend([producer[value], reader, value] for reader in readers if (value, reader) not in routed)
    return {
        "nodes": nodes,
        "edges": edges,
        "providers": provider_colour,
        "partitions": partition_colour,
        "counts": report.counts,
        "copies": len(report.copies),
    }


def _copy_consumers(copy: Any, readers: list[str], provider_of: dict[str, str], source_id: str) -> list[str]:
    """The readers of a copied value that read the copy: those on the target provider, or (for a
    copy to host memory) those not on the value's own provider; graph outputs read host copies."""
    if copy.target in provider_of.values():
        return [r for r in readers if provider_of.get(r) == copy.target]
    origin = provider_of.get(source_id)
    return [r for r in readers if provider_of.get(r, "host") != origin]


def _shape_of(type_string: str) -> str:
    """``[1,64,111,111]`` from ``FLOAT[1,64,111,111]`` (empty when the shape is unknown)."""
    start = type_string.find("[")
    return type_string[start:] if start >= 0 else ""


def _json_for_script(data: Any) -> str:
    """JSON safe inside ``<script>``: ``</`` cannot end the element, U+2028/9 cannot end a line."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_html(report: PartitionReport, title: str = "onnxplug partition") -> str:
    """The page as text."""
    vendor = importlib.resources.files("onnxplug.cli") / "_vendor" / "dagre.min.js"
    return (
        _TEMPLATE.replace("@TITLE@", html.escape(title))
        .replace("@DATA@", _json_for_script(page_data(report)))
        .replace("@DAGRE@", vendor.read_text(encoding="utf-8"))
        .replace("@SCRIPT@", _SCRIPT)
    )


def write_html(report: PartitionReport, path: str, title: str = "onnxplug partition") -> None:
    """Write :func:`render_html`'s page to ``path``."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(render_html(report, title))


_TEMPLATE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>@TITLE@</title>
<style>
html, body { margin: 0; height: 100%; font-family: sans-serif; overflow: hidden; }
header { position: relative; z-index: 1; padding: 6px 12px; background: #f4f4f4; border-bottom: 1px solid #ccc;
  font-size: 13px; }
header span { margin-right: 14px; white-space: nowrap; }
header i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px;
  border: 1px solid #555; }
#view { position: absolute; top: 0; left: 0; right: 0; bottom: 0; cursor: grab; }
#view.dragging { cursor: grabbing; }
#tip { position: fixed; display: none; background: #fff; border: 1px solid #888; padding: 6px 8px;
  font-size: 12px; max-width: 520px; box-shadow: 2px 2px 6px rgba(0,0,0,.3); pointer-events: none;
  white-space: pre-wrap; }
svg text { font-size: 12px; pointer-events: none; }
.edge { fill: none; stroke: #777; stroke-width: 1; }
</style></head>
<body>
<div id="view"><svg id="svg" xmlns="http://www.w3.org/2000/svg" width="100%" height="100%">
<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7"
orient="auto"><path d="M0,0L10,5L0,10z" fill="#777"/></marker></defs><g id="root"></g></svg></div>
<header id="legend"><b>@TITLE@</b> </header>
<div id="tip"></div>
<script type="application/json" id="onnxplug-data">@DATA@</script>
<script>@DAGRE@</script>
<script>@SCRIPT@</script>
</body></html>
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("onnxplug-data").textContent);
  var svgNS = "http://www.w3.org/2000/svg";
  var root = document.getElementById("root"), view = document.getElementById("view");
  var svg = document.getElementById("svg"), tip = document.getElementById("tip");
  var legend = document.getElementById("legend");
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) {
    return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; }); }

  // Legend: providers with their node counts, fused partitions, copies, how to navigate.
  var parts = [];
  Object.keys(data.providers).forEach(function (p) {
    parts.push('<span><i style="background:' + data.providers[p] + '"></i>' + esc(p) + ": " +
      (data.counts[p] || 0) + " nodes</span>");
  });
  Object.keys(data.partitions).forEach(function (p) {
    parts.push('<span><i style="background:#fff;border:3px solid ' + data.partitions[p] + '"></i>' +
      esc(p) + "</span>");
  });
  parts.push('<span>&#9670; copies: ' + data.copies + '</span>');
  parts.push('<span style="color:#c00">&#9698; declined by a provider</span>');
  parts.push('<span style="color:#666">wheel: zoom &middot; drag: pan &middot; hover: details &middot; ' +
    "f: fit all</span>");
  legend.insertAdjacentHTML("beforeend", parts.join(""));

  // Layout with dagre: top to bottom, box sizes from their labels.
  var g = new dagre.graphlib.Graph({multigraph: true});
  g.setGraph({rankdir: "TB", nodesep: 18, ranksep: 32, edgesep: 8, marginx: 20, marginy: 20});
  g.setDefaultEdgeLabel(function () { return {}; });
  var byId = {};
  data.nodes.forEach(function (n) {
    byId[n.id] = n;
    var w, h;
    if (n.kind === "op") {
      n.label = n.op; n.sub = n.shape;
      w = Math.max(n.label.length, n.sub.length) * 7 + 16; h = n.sub ? 34 : 24;
    } else if (n.kind === "copy") { n.label = "copy"; w = 44; h = 28; }
    else { n.label = n.name; w = n.name.length * 7 + 16; h = 22; }
    n.w = Math.min(Math.max(w, 44), 260); n.h = h;
    g.setNode(n.id, {width: n.w, height: n.h});
  });
  data.edges.forEach(function (e, i) { g.setEdge(e[0], e[1], {}, "e" + i); });
  dagre.layout(g);

  // Draw: edges first, boxes on top.
  var out = [];
  g.edges().forEach(function (e) {
    var pts = g.edge(e).points;
    if (!pts || !pts.length) return;
    var d = "M" + pts[0].x + "," + pts[0].y;
    for (var i = 1; i < pts.length; i++) d += "L" + pts[i].x + "," + pts[i].y;
    out.push('<path class="edge" marker-end="url(#arrow)" d="' + d + '"/>');
  });
  data.nodes.forEach(function (n) {
    var p = g.node(n.id), x = p.x - n.w / 2, y = p.y - n.h / 2;
    var s = '<g data-id="' + esc(n.id) + '">';
    if (n.kind === "copy") {
      s += '<path d="M' + p.x + "," + y + "L" + (x + n.w) + "," + p.y + "L" + p.x + "," + (y + n.h) + "L" + x +
        "," + p.y + 'z" fill="#fff" stroke="#000" stroke-width="1.5"/>';
    } else if (n.kind === "op") {
      var stroke = n.partition ? data.partitions[n.partition] : "#444";
      s += '<rect x="' + x + '" y="' + y + '" width="' + n.w + '" height="' + n.h + '" rx="4" fill="' +
        (data.providers[n.provider] || "#ccc") + '" stroke="' + stroke + '" stroke-width="' +
        (n.partition ? 3 : 1) + '"/>';
      if (n.declined.length) {
        s += '<path d="M' + (x + n.w - 12) + "," + y + "L" + (x + n.w) + "," + y + "L" + (x + n.w) + "," +
          (y + 12) + 'z" fill="#c00"/>';
      }
    } else {
      s += '<rect x="' + x + '" y="' + y + '" width="' + n.w + '" height="' + n.h + '" rx="11" fill="#fff"' +
        ' stroke="#444" stroke-dasharray="' + (n.kind === "input" ? "0" : "4 2") + '"/>';
    }
    var ty = n.sub ? p.y - 3 : p.y + 4;
    s += '<text x="' + p.x + '" y="' + ty + '" text-anchor="middle" font-weight="' +
      (n.kind === "op" ? "bold" : "normal") + '">' + esc(n.label) + "</text>";
    if (n.sub) s += '<text x="' + p.x + '" y="' + (p.y + 12) + '" text-anchor="middle" fill="#333"' +
      ' font-size="10">' + esc(n.sub) + "</text>";
    out.push(s + "</g>");
  });
  root.innerHTML = out.join("");

  // View: opens fitted to the window; the wheel zooms at the cursor; drag pans.
  var graph = g.graph(), scale = 1, tx = 0, ty0 = 0;
  function apply() { root.setAttribute("transform", "translate(" + tx + "," + ty0 + ") scale(" + scale + ")"); }
  // Fitting a deep graph (hundreds of ranks) whole would shrink boxes to hairlines, so the opening
  // fit stops at MIN_FIT (boxes stay visible, coloured) and shows the graph's start; "f" fits it all.
  var MIN_FIT = 0.25;
  function fit(whole) {
    var top = legend.offsetHeight, W = view.clientWidth, H = view.clientHeight - top;
    var all = Math.min(W / graph.width, H / graph.height, 2);
    scale = whole ? all : Math.max(all, MIN_FIT);
    tx = (W - graph.width * scale) / 2;
    ty0 = top + Math.max((H - graph.height * scale) / 2, 0); apply();
  }
  window.addEventListener("keydown", function (e) { if (e.key === "f") { fit(true); fitted = false; } });
  // "#node=NAME" in the address opens centred on that node, readable, instead of fitted.
  function focus(name) {
    var n = data.nodes.filter(function (m) { return m.name === name; })[0];
    if (!n) return false;
    var p = g.node(n.id), top = legend.offsetHeight;
    scale = 1.5; tx = view.clientWidth / 2 - p.x * scale; ty0 = top + (view.clientHeight - top) / 2 - p.y * scale;
    apply(); return true;
  }
  var wanted = /^#node=(.*)$/.exec(location.hash);
  var fitted = !(wanted && focus(decodeURIComponent(wanted[1])));
  if (fitted) fit();
  window.addEventListener("resize", function () { if (fitted) fit(); });  // keep a view the user chose
  view.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = svg.getBoundingClientRect(), cx = e.clientX - r.left, cy = e.clientY - r.top;
    var f = Math.exp(-e.deltaY * 0.0015);
    tx = cx - (cx - tx) * f; ty0 = cy - (cy - ty0) * f; scale *= f; fitted = false; apply();
  }, {passive: false});
  var drag = null;
  view.addEventListener("mousedown", function (e) { drag = [e.clientX - tx, e.clientY - ty0];
    view.classList.add("dragging"); });
  window.addEventListener("mouseup", function () { drag = null; view.classList.remove("dragging"); });
  window.addEventListener("mousemove", function (e) {
    if (drag) { tx = e.clientX - drag[0]; ty0 = e.clientY - drag[1]; fitted = false; apply(); }
  });

  // Hover: name, op, provider, partition, output types, declined reasons.
  root.addEventListener("mouseover", function (e) {
    var el = e.target.closest("g[data-id]"); if (!el) return;
    var n = byId[el.getAttribute("data-id")], lines;
    if (n.kind === "op") {
      lines = ["<b>" + esc(n.name) + "</b> (" + esc(n.op) + ")", "provider: " + esc(n.provider)];
      if (n.partition) lines.push("fused partition: " + esc(n.partition));
      n.outputs.forEach(function (o) { lines.push("out " + esc(o)); });
      if (n.declined.length) lines.push('<span style="color:#c00">declined:\n  ' +
        n.declined.map(esc).join("\n  ") + "</span>");
    } else if (n.kind === "copy") {
      lines = ["<b>copy</b> of " + esc(n.name), esc(n.source) + " &rarr; " + esc(n.target)];
    } else { lines = ["graph " + n.kind + " <b>" + esc(n.name) + "</b>"]; }
    tip.innerHTML = lines.join("\n"); tip.style.display = "block";
  });
  root.addEventListener("mousemove", function (e) {
    tip.style.left = (e.clientX + 14) + "px"; tip.style.top = (e.clientY + 14) + "px"; });
  root.addEventListener("mouseout", function () { tip.style.display = "none"; });
  document.body.setAttribute("data-rendered", String(data.nodes.length));
})();
"""
