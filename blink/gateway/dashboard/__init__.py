"""The live dashboard at ``/dashboard``: one static page, its assets, and a stats feed.

Everything is served from the package (no CDN), so the page works offline. The page reads
``/dashboard/events`` (Server-Sent Events, one snapshot per second) and falls back to polling
``/dashboard/stats`` (the same JSON) where EventSource is unavailable. All viewers share one
snapshot a second (``feed.py``); with API keys on, all of it needs the ``dashboard`` scope
(``access.py``).
"""

from blink.gateway.dashboard.access import DashboardAccess
from blink.gateway.dashboard.routes import build_dashboard_feed, build_dashboard_router

__all__ = ["DashboardAccess", "build_dashboard_feed", "build_dashboard_router"]
