"""The web console (``asynqpy web``; the ``web`` extra: FastAPI, uvicorn, Jinja2): a REST API
under ``/api`` (OpenAPI at ``/api/openapi.json``) and pages over it, live without reloading.
:func:`create_app` builds the ASGI application (``app.py``) from one router per resource
(``routes/``) and what they share (``shared.py``: the guard, the errors, the ``Console`` every
route gets); :class:`Auth` is its access control. A facade: it reads and acts through
:class:`~asynqpy.AsyncInspector`."""

from __future__ import annotations

from .app import Auth, create_app

__all__ = ["Auth", "create_app"]
