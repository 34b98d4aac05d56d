"""``goondan studio``: a local web page over the stores ``inspect``, ``status`` and ``approvals``
read (docs/studio.md).

* :mod:`goondan.studio.data` — the JSON documents of the API (overview, conversations, traces,
  approvals), built with the same readers the commands use and masked like their output.
* :mod:`goondan.studio.live` — the server-sent event streams (a conversation, the overview).
* :mod:`goondan.studio.server` — the stdlib HTTP server: routing, token, static files.

The page itself (``static/``: index.html, app.css, app.js) has no build step and loads nothing
from the network.
"""
