#!/usr/bin/env python3
"""The picture of the pool dashboard in docs/: its panels drawn from a real Prometheus while pools fill.

    python hack/dashboard_picture.py [--out docs/images/pool-dashboard.svg] [--minutes 3]

A local control plane and the controller run, a real Prometheus (Debian's package) scrapes the controller
every second, and pools of three kinds fill, run out (claims wait), and are partly released; a NetBox pool
points at a server that does not answer. Then every panel of ``config/grafana/metal3-ipam-pools.json`` is
drawn as the dashboard defines it (its place on the grid, its queries with every variable at "All", its unit)
from ``query_range`` answers of that Prometheus, into one SVG. Grafana itself is not run here: the picture is
drawn by :func:`render`, panel by panel, from the same queries Grafana sends.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "config" / "grafana" / "metal3-ipam-pools.json"
OUT = ROOT / "docs" / "images" / "pool-dashboard.svg"

# -- drawing (pure) -------------------------------------------------------------------------------------------

CELL_W, CELL_H, PAD = 54, 30, 6            # one grid unit of the 24 columns, and of a row
COLOURS = ("#3274d9", "#e0752d", "#56a64b", "#a352cc", "#f2cc0c", "#e02f44", "#19a3b3", "#8f3bb8", "#ff9830",
           "#73bf69")
Series = list[tuple[str, list[tuple[float, float]]]]  # (legend, [(time, value)])


def expression(expr: str, rate_interval: str = "30s") -> str:
    """A panel's query with every template variable at "All", as Grafana sends it."""
    expr = expr.replace("$__rate_interval", rate_interval)
    return re.sub(r"\$\{?(job|namespace|kind|pool)\}?", ".*", expr)


def legend(labels: dict[str, str], fmt: str | None) -> str:
    """Grafana's legend format (``{{label}}``), or the labels written out."""
    shown = {k: v for k, v in labels.items() if k != "__name__"}
    if fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: shown.get(m.group(1), ""), fmt)
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or labels.get("__name__", "value")


def fmt_value(value: float, unit: str | None) -> str:
    if value is None or math.isnan(value):
        return "–"
    if unit == "percentunit":
        return f"{value * 100:.0f}%"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.1f} s"
    if unit == "ops":
        return f"{value:.2f}/s"
    if unit == "bytes" or abs(value) >= 10_000_000:
        for size in ("B", "KiB", "MiB", "GiB"):
            if abs(value) < 1024 or size == "GiB":
                return f"{value:.0f} {size}"
            value /= 1024
    return f"{value:.3g}"


def _text(x: float, y: float, body: str, size: int = 11, anchor: str = "start", fill: str = "#d8d9da",
          weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}">{html.escape(body)}</text>')


def _timeseries(x: float, y: float, w: float, h: float, series: Series, unit: str | None) -> list[str]:
    out = []
    points = [p for _, values in series for p in values if not math.isnan(p[1])]
    legend_rows = min(len(series), 4)
    plot_x, plot_y, plot_w, plot_h = x + 52, y + 8, w - 60, h - 26 - 13 * legend_rows
    if not points:
        return [_text(x + w / 2, y + h / 2, "No data", 13, "middle", "#8e8e8e")]
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    lo, hi = min(0.0, min(p[1] for p in points)), max(p[1] for p in points)
    if unit == "percentunit":
        hi = max(hi, 1.0)
    hi = hi if hi > lo else lo + 1
    span_t = (t1 - t0) or 1

    def at(t: float, v: float) -> tuple[float, float]:
        return plot_x + (t - t0) / span_t * plot_w, plot_y + plot_h - (v - lo) / (hi - lo) * plot_h

    for i in range(3):
        v = lo + (hi - lo) * i / 2
        _, gy = at(t0, v)
        out.append(f'<line x1="{plot_x:.1f}" y1="{gy:.1f}" x2="{plot_x + plot_w:.1f}" y2="{gy:.1f}" '
                   'stroke="#2f3136" stroke-width="1"/>')
        out.append(_text(plot_x - 4, gy + 4, fmt_value(v, unit), 9, "end", "#8e8e8e"))
    for i, (_, values) in enumerate(series):
        run: list[str] = []
        for t, v in values + [(math.nan, math.nan)]:
            if math.isnan(v):
                if len(run) > 1:
                    out.append(f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="1.6" '
                               f'points="{" ".join(run)}"/>')
                run = []
                continue
            px, py = at(t, v)
            run.append(f"{px:.1f},{py:.1f}")
    for i, (name, values) in enumerate(series[:legend_rows]):
        ly = plot_y + plot_h + 16 + 13 * i
        out.append(f'<rect x="{plot_x:.1f}" y="{ly - 7:.1f}" width="10" height="3" fill="{COLOURS[i % len(COLOURS)]}"/>')
        last = next((v for _, v in reversed(values) if not math.isnan(v)), math.nan)
        out.append(_text(plot_x + 14, ly - 3, f"{name[:70]}  {fmt_value(last, unit)}", 9, fill="#c7d0d9"))
    if len(series) > legend_rows:
        out.append(_text(x + w - 8, y + h - 4, f"+{len(series) - legend_rows} more", 9, "end", "#8e8e8e"))
    return out


def _bars(x: float, y: float, w: float, h: float, series: Series, unit: str | None) -> list[str]:
    rows = [(name, next((v for _, v in reversed(values) if not math.isnan(v)), math.nan)) for name, values in series]
    rows = sorted((r for r in rows if not math.isnan(r[1])), key=lambda r: -r[1])
    if not rows:
        return [_text(x + w / 2, y + h / 2, "No data", 13, "middle", "#8e8e8e")]
    out, bar_h = [], min(22.0, (h - 12) / len(rows) - 4)
    top = max(1.0, max(v for _, v in rows)) if unit == "percentunit" else max(v for _, v in rows) or 1
    for i, (name, value) in enumerate(rows):
        by = y + 6 + i * (bar_h + 4)
        colour = "#e02f44" if unit == "percentunit" and value >= 0.95 else \
            "#f2cc0c" if unit == "percentunit" and value >= 0.8 else "#56a64b"
        out.append(_text(x + 8, by + bar_h * 0.7, name[:40], 10, fill="#c7d0d9"))
        bx, bw = x + w * 0.45, w * 0.42
        out.append(f'<rect x="{bx:.1f}" y="{by:.1f}" width="{bw:.1f}" height="{bar_h:.1f}" fill="#22252b"/>')
        out.append(f'<rect x="{bx:.1f}" y="{by:.1f}" width="{bw * min(value / top, 1):.1f}" height="{bar_h:.1f}" '
                   f'fill="{colour}"/>')
        out.append(_text(x + w - 6, by + bar_h * 0.7, fmt_value(value, unit), 10, "end", fill=colour))
    return out


def render(dashboard: dict[str, Any], answers: dict[int, Series]) -> str:
    """The dashboard as one SVG: each panel at its grid place, drawn from ``answers`` (panel id -> series)."""
    panels = dashboard["panels"]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    width, height = 24 * CELL_W, bottom * CELL_H + 44
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Inter, Helvetica, Arial, sans-serif">',
           f'<rect width="{width}" height="{height}" fill="#111217"/>',
           _text(PAD + 4, 26, dashboard["title"], 17, weight="bold")]
    for panel in panels:
        grid = panel["gridPos"]
        x, y = grid["x"] * CELL_W + PAD, grid["y"] * CELL_H + 40
        w, h = grid["w"] * CELL_W - 2 * PAD, grid["h"] * CELL_H - PAD
        if panel["type"] == "row":
            out.append(_text(x + 2, y + 20, panel["title"], 14, weight="bold"))
            continue
        out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="3" fill="#181b1f" stroke="#2f3136"/>')
        out.append(_text(x + 8, y + 18, panel["title"], 12, weight="bold"))
        unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
        series = answers.get(panel["id"], [])
        draw = _bars if panel["type"] == "bargauge" else _timeseries
        out.extend(draw(x, y + 26, w, h - 28, series, unit))
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- the data (a control plane, the controller, Prometheus) ------------------------------------------------------


def answers_of(prometheus: Any, dashboard: dict[str, Any], start: float, end: float, step: float = 2.0
               ) -> dict[int, Series]:
    """Each panel's series from ``query_range`` over [start, end]."""
    out: dict[int, Series] = {}
    for panel in dashboard["panels"]:
        series: Series = []
        for target in panel.get("targets") or []:
            data = prometheus.api("query_range", query=expression(target["expr"]), start=f"{start:.3f}",
                                  end=f"{end:.3f}", step=f"{step:g}")
            for result in data["result"]:
                values = [(float(t), float(v)) for t, v in result["values"]]
                series.append((legend(result["metric"], target.get("legendFormat")), values))
        out[panel["id"]] = series
    return out


def _fill(api: Any, minutes: float) -> None:
    """Pools that fill at different paces, one that runs out (claims wait), releases, a NetBox pool that
    cannot be reached."""
    from kubernetes import client

    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    ns = "racks"
    core.create_namespace({"metadata": {"name": ns}})
    metal3, capi = ("ipam.metal3.io", "v1alpha1"), ("ipam.cluster.x-k8s.io", "v1beta2")
    incluster = ("ipam.cluster.x-k8s.io", "v1alpha2")

    def pool(name: str, first: str, last: str) -> None:
        custom.create_namespaced_custom_object(*metal3, ns, "ippools", {
            "apiVersion": "/".join(metal3), "kind": "IPPool", "metadata": {"name": name},
            "spec": {"namePrefix": name, "prefix": 24, "pools": [{"start": first, "end": last}]}})

    pool("rack-a", "10.10.1.10", "10.10.1.29")   # 20
    pool("rack-b", "10.10.2.10", "10.10.2.59")   # 50
    custom.create_cluster_custom_object(*incluster, "globalinclusterippools", {
        "apiVersion": "/".join(incluster), "kind": "GlobalInClusterIPPool", "metadata": {"name": "workers-v6"},
        "spec": {"addresses": ["fd00:10::10-fd00:10::2d"], "prefix": 64}})   # 30
    core.create_namespaced_secret(ns, {"metadata": {"name": "netbox"}, "stringData": {"token": "x" * 40}})
    custom.create_namespaced_custom_object("netbox.metal3-ipam.io", "v1alpha1", ns, "netboxippools", {
        "apiVersion": "netbox.metal3-ipam.io/v1alpha1", "kind": "NetBoxIPPool", "metadata": {"name": "dc-east"},
        "spec": {"server": {"url": "http://127.0.0.1:9", "tokenSecretRef": {"name": "netbox"}},
                 "source": {"prefix": "10.20.0.0/24"}}})

    def claim(name: str, target: str) -> None:
        if target in ("rack-a", "rack-b"):
            custom.create_namespaced_custom_object(*metal3, ns, "ipclaims", {
                "apiVersion": "/".join(metal3), "kind": "IPClaim", "metadata": {"name": name},
                "spec": {"pool": {"name": target}}})
            return
        group, kind = (("ipam.cluster.x-k8s.io", "GlobalInClusterIPPool") if target == "workers-v6"
                       else ("netbox.metal3-ipam.io", "NetBoxIPPool"))
        custom.create_namespaced_custom_object(*capi, ns, "ipaddressclaims", {
            "apiVersion": "/".join(capi), "kind": "IPAddressClaim", "metadata": {"name": name},
            "spec": {"poolRef": {"apiGroup": group, "kind": kind, "name": target}}})

    steps = max(12, int(minutes * 60 / 5))
    for step in range(steps):
        started = time.monotonic()
        if step < steps * 2 // 3:
            claim(f"a-{step:03d}", "rack-a")        # runs out half way, then claims wait
            claim(f"a-{step:03d}x", "rack-a")
            if step % 2 == 0:
                claim(f"b-{step:03d}", "rack-b")
            claim(f"w-{step:03d}", "workers-v6")
            if step % 6 == 0:
                claim(f"nb-{step:03d}", "dc-east")
        elif step == steps * 2 // 3 + 2:
            for n in range(0, 8):                   # a machine set scaled down in rack-a: the waiting claims served
                custom.delete_namespaced_custom_object(*metal3, ns, "ipclaims", f"a-{n:03d}")
        time.sleep(max(0.0, 5.0 - (time.monotonic() - started)))  # the pace of the picture, not a wait for state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--keep", type=Path, default=None, help="a folder to keep the controller's log in")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from metal3_ipam import observability
    from metal3_ipam.testing.controlplane import ControlPlane, default_crd_paths, ensure_binaries
    from metal3_ipam.testing.processes import stop_group
    from metal3_ipam.testing.prometheus import Prometheus, static_job
    from metal3_ipam.testing.waiting import eventually

    import socket

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    dashboard = json.loads(DASHBOARD.read_text())
    ensure_binaries()
    with ControlPlane(crd_paths=default_crd_paths()) as plane, tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        log = open((args.keep or Path(tmp)) / "controller.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "metal3_ipam.cli", "run", "--kubeconfig", str(plane.kubeconfig),
                                 "-A", "--no-leader-elect", "--health-address", f"127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
        rules = Path(tmp) / "rules.yaml"
        rules.write_text(json.dumps(observability.rules_file(observability.RuleSettings())))
        prometheus = Prometheus([static_job("metal3-ipam", f"127.0.0.1:{port}",
                                            labels={"namespace": "metal3-ipam-system"})], [rules], directory=tmp)
        try:
            prometheus.start()
            eventually(prometheus.targets_up, timeout=120, what="the controller scraped")
            start = time.time()
            with plane.api_client() as api:
                _fill(api, args.minutes)
            end = time.time()
            picture = render(dashboard, answers_of(prometheus, dashboard, start, end))
        finally:
            prometheus.stop()
            stop_group(proc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(picture)
    print(f"{args.out}: {len(dashboard['panels'])} panels, {end - start:.0f} s of data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
