"""``/metrics``: the queue metrics for Prometheus, read at each scrape (the ``metrics`` extra
too)."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from . import ConsoleDep

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(console: ConsoleDep) -> Any:
    """The queue metrics for Prometheus (needs the metrics extra too)."""
    from ...metrics import families
    from ...worker.metrics import prometheus

    pc = prometheus()
    import prometheus_client.core

    class Snapshot:
        def __init__(self, infos: Any) -> None:
            self.infos = infos

        def collect(self) -> Any:
            return families(prometheus_client.core, self.infos)

    registry = pc.CollectorRegistry()
    registry.register(Snapshot(await console.inspector.all_queue_info()))
    return Response(pc.generate_latest(registry), media_type=pc.CONTENT_TYPE_LATEST)
