"""Offloaded payloads (claim check, docs/offload.md): the reference a message carries in place of
a large payload or result, the blobs' names and the orphan sweep's decision (``refs``)."""
