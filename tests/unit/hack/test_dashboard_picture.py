"""The picture of the pool dashboard in docs/ (hack/dashboard_picture.py): drawn panel by panel as the dashboard
defines them, and kept in step with the dashboard."""

from __future__ import annotations

import importlib.util
import json
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("dashboard_picture", ROOT / "hack" / "dashboard_picture.py")
picture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(picture)

SVG = "{http://www.w3.org/2000/svg}"


def _dashboard() -> dict:
    return json.loads(picture.DASHBOARD.read_text())


def _texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def test_every_panel_is_drawn_with_its_title_and_its_series():
    dashboard = _dashboard()
    answers = {p["id"]: [(f"series of {p['id']}", [(0.0, 0.25), (10.0, 0.5), (20.0, float("nan")), (30.0, 1.0)])]
               for p in dashboard["panels"] if p["type"] != "row"}
    texts = _texts(picture.render(dashboard, answers))
    for panel in dashboard["panels"]:
        assert panel["title"] in texts, panel["title"]
        if panel["type"] != "row":
            assert any(t.startswith(f"series of {panel['id']}") for t in texts), panel["title"]


def test_a_panel_without_series_says_so():
    dashboard = {"title": "t", "panels": [{"id": 1, "type": "timeseries", "title": "empty",
                                            "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8}}]}
    assert "No data" in _texts(picture.render(dashboard, {}))


def test_queries_are_sent_with_every_variable_at_all():
    expr = 'rate(x{namespace=~"$namespace", pool=~"${pool}", kind=~"$kind", job=~"$job"}[$__rate_interval])'
    assert picture.expression(expr, "30s") == 'rate(x{namespace=~".*", pool=~".*", kind=~".*", job=~".*"}[30s])'


def test_legends_follow_the_panels_format():
    assert picture.legend({"namespace": "racks", "pool": "a", "kind": "IPPool"},
                          "{{namespace}}/{{pool}} ({{kind}})") == "racks/a (IPPool)"
    assert picture.legend({"__name__": "up", "job": "j"}, None) == "job=j"


def test_the_picture_in_the_docs_shows_every_panel_of_the_dashboard():
    """A panel added to (or renamed in) the dashboard is missing from the picture until it is drawn again:
    ``python hack/dashboard_picture.py``."""
    texts = set(_texts(picture.OUT.read_text()))
    missing = [p["title"] for p in _dashboard()["panels"] if p["title"] not in texts]
    assert not missing, f"not in {picture.OUT.relative_to(ROOT)}: {missing}; draw it again"
