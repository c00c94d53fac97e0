"""The console's routes, one router per resource (each module's ``router``, an ``APIRouter``):
``queues`` (the overview too), ``tasks`` (lists, one task, search, actions), ``enqueue`` (enqueue,
duplicate, edit), ``processes``, ``tenants``, ``servers``, ``cron`` (the periodic task entries),
``redis_info`` (the Redis page), ``probes`` (``/livez``, ``/readyz``) and ``metrics``
(``/metrics``). :func:`asynqpy.web.create_app` includes them in that order. Every route gets the
application's :class:`~asynqpy.web.shared.Console` through :data:`ConsoleDep`.

Needs the ``web`` extra (FastAPI): imported by ``create_app`` once it has checked the extra."""

from typing import Annotated

from fastapi import Depends, Request

from ..shared import Console


async def get_console(request: Request) -> Console:
    """The console of the application the request came to (``app.state.console``)."""
    console: Console = request.app.state.console
    return console


ConsoleDep = Annotated[Console, Depends(get_console)]
"""A route's parameter that receives the application's :class:`~asynqpy.web.shared.Console`."""
