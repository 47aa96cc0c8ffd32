"""The web view for people: pages over the same ``Service`` the HTTP API answers through,
served by the one FastAPI app (``agentlog.streams.api.http.build_app``) at ``/``.

- ``routes``   the page routes, the login that turns the API token into a cookie, the
               static files and the thread page's live-update poll;
- ``queries``  what a page reads: the ``Service`` and, for timelines, pairs and charts, SQL
               through the same sandbox as ``agentlog sql``;
- ``pages``    each page as HTML (server-rendered, readable without JavaScript);
- ``html``     escaping, layout, tables and the inline SVG charts;
- ``static/``  one stylesheet and one small script (no build step, nothing from a CDN).
"""
