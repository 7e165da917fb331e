"""LIST answers served from their JSON text, and listings read whole, for tests and benchmarks.

A listing served here goes through what the controller does with the API
server's pages (``decode_list``, ``page_of``), in the thread ``Listing.pages``
fetches them in; only the HTTP request is left out.
"""

from __future__ import annotations

import json

from ..controller.operator import PAGE, Listing, Page, page_of
from ..controller.wire import decode_list


def answers(items: list[dict], version: str, page: int = PAGE) -> list[bytes]:
    """The JSON text of a LIST's pages, as the API server sends them (``continue`` is the page's number)."""
    count = max(1, -(-len(items) // page))
    return [json.dumps({"apiVersion": "v1", "kind": "List",
                        "metadata": {"resourceVersion": version, **({"continue": str(n + 1)} if n + 1 < count else {})},
                        "items": items[n * page:(n + 1) * page]}).encode() for n in range(count)]


def at_hand(kind: tuple[str, str], namespace: str | None, items: list[dict], version: str | None,
            page: int = PAGE) -> Listing:
    """A listing of objects made by a test, paged as the API server pages (``continue``: the next index)."""
    def fetch(token: str | None) -> Page:
        start = int(token or 0)
        more = start + page < len(items)
        return Page(items[start:start + page], version, str(start + page) if more else None)
    return Listing(kind, namespace, fetch)


def served(kind: tuple[str, str], api_version: str, pages: list[bytes], namespace: str | None = None) -> Listing:
    """A listing whose pages are ``pages``, each decoded when it is fetched."""
    def fetch(token: str | None) -> Page:
        return page_of(decode_list(pages[int(token or 0)]), kind, api_version)
    return Listing(kind, namespace, fetch)


def read(listing: Listing) -> tuple[list[dict], str | None]:
    """Every page of ``listing`` at once, blocking, and the version it was taken at."""
    page = listing.fetch(None)
    items, version = list(page.items), page.resource_version
    while page.token:
        page = listing.fetch(page.token)
        items += page.items
    return items, version
