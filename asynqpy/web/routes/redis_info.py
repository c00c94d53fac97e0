"""The Redis server: INFO's main fields and the slowest recent commands (the API and the Redis
page)."""

from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ...core.text import humanize
from ...core.text.jsontext import jsonable
from . import ConsoleDep

router = APIRouter()
SLOWLOG_TOP = 10
REDIS_FIELDS = ("redis_version", "redis_mode", "role", "uptime_in_seconds", "used_memory", "used_memory_human",
                "used_memory_peak_human", "maxmemory", "maxmemory_human", "maxmemory_policy", "mem_fragmentation_ratio",
                "connected_clients", "blocked_clients", "maxclients", "total_commands_processed",
                "instantaneous_ops_per_sec", "keyspace_hits", "keyspace_misses", "evicted_keys", "expired_keys")


@router.get("/api/redis", tags=["redis"])
async def redis_info(console: ConsoleDep) -> Any:
    """The Redis server: version, uptime, memory, clients, and the slowest recent commands
    (``slowlog``: the top 10 of SLOWLOG GET, slowest first; null where Redis refuses it)."""
    return await _redis_summary(console.inspector.redis)


@router.get("/redis", response_class=HTMLResponse, include_in_schema=False)
async def redis_page(console: ConsoleDep, request: Request) -> Any:
    r = await _redis_summary(console.inspector.redis)
    up = r.get("uptime_in_seconds")
    return console.page(request, "redis.html",
                        r={**r, "uptime": humanize.duration(float(up)) if up is not None else ""})


async def _redis_summary(redis: Any) -> dict[str, Any]:
    """What the Redis page shows: INFO's main fields (of the first node, on a Cluster) and the
    slowest recent commands (SLOWLOG GET: the top 10, slowest first; arguments cut to 200
    characters; null where Redis refuses SLOWLOG)."""
    from redis.exceptions import ResponseError

    out = await _redis_info(redis)
    try:
        raw = await redis.slowlog_get(128)
    except ResponseError:
        out["slowlog"] = None
        return out
    if isinstance(raw, dict):  # (a Cluster client: node -> its log)
        raw = [e for entries in raw.values() for e in entries]
    entries = sorted((_slowlog_entry(e) for e in raw), key=lambda e: -e["duration_us"])
    out["slowlog"] = jsonable(entries[:SLOWLOG_TOP])
    return out


async def _redis_info(redis: Any) -> dict[str, Any]:
    """INFO's fields of :data:`REDIS_FIELDS` (of the first node, on a Cluster); None for each
    where the server refuses INFO (renamed on a managed Redis: the page shows blanks)."""
    from redis.exceptions import ResponseError

    try:
        info = await redis.info()
    except ResponseError:
        info = {}
    if info and "redis_version" not in info:  # a Cluster client: node -> its INFO
        info = next((v for v in info.values() if isinstance(v, dict)), {})
    return {k: info.get(k) for k in REDIS_FIELDS}


def _slowlog_entry(e: dict[str, Any]) -> dict[str, Any]:
    """One SLOWLOG entry as the page shows it: when, how long, the command cut to 200
    characters, and the client's address."""
    command = e.get("command", b"")
    text = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
    client = e.get("client_address") or ""
    return {"id": e.get("id"), "at": datetime.fromtimestamp(int(e.get("start_time", 0)), timezone.utc),
            "duration_us": int(e.get("duration", 0)),
            "command": text[:200] + ("…" if len(text) > 200 else ""),
            "client": client.decode(errors="replace") if isinstance(client, bytes) else str(client)}
