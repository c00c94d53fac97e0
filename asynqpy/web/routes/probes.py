"""Health probes for an orchestrator, answered whatever the ``Host`` and without credentials
(:data:`asynqpy.web.shared.PROBES`): ``/livez`` (the console answers) and ``/readyz`` (it
reaches Redis)."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ...redisio.connection import REDIS_ERRORS
from . import ConsoleDep

router = APIRouter()


@router.get("/livez", include_in_schema=False)
async def livez() -> Any:
    """The console answers (its event loop runs)."""
    return {"live": True}


@router.get("/readyz", include_in_schema=False)
async def readyz(console: ConsoleDep) -> Any:
    """The console reaches Redis (one PING): 200, else 503."""
    try:
        await console.inspector.redis.ping()
    except REDIS_ERRORS:
        return JSONResponse({"ready": False, "redis": False}, 503)
    return {"ready": True, "redis": True}
