"""Blob stores of offloaded payloads (docs/offload.md): the :class:`BlobStore` interface, a
filesystem store (:class:`FileBlobStore`: a directory, on a volume every producer and worker
shares) and an S3 store (:class:`S3BlobStore`: boto3, the optional extra ``asynqpy[s3]``).

Stores are synchronous (boto3 is); the worker calls them in a thread. Every method is safe to
call again: ``put`` of a name never seen before (names carry a nonce), ``delete`` of a blob that is
gone does nothing.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..core.model.errors import BlobError, BlobNotFoundError, InvalidArgumentError
from ..core.offload.refs import DEFAULT_THRESHOLD


@runtime_checkable
class BlobStore(Protocol):
    """Where offloaded payloads and results live. ``threshold``: values encoded larger than this
    many bytes are offloaded."""

    threshold: int

    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` as blob ``name``, whole or not at all (a reader never sees a part)."""

    def get(self, name: str) -> bytes:
        """Blob ``name``'s content; :class:`~asynqpy.BlobNotFoundError` when there is none."""

    def delete(self, name: str) -> None:
        """Remove blob ``name``; nothing when it is gone already."""

    def list(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        """(name, unix time it was written) of every blob whose name starts with ``prefix``."""


def check_store(store: Any) -> BlobStore | None:
    """``store`` if it is a blob store (or None), else InvalidArgumentError."""
    if store is None:
        return None
    if not isinstance(store, BlobStore):
        raise InvalidArgumentError(f"offload= takes a blob store (FileBlobStore, S3BlobStore), got {store!r}")
    if isinstance(store.threshold, bool) or not isinstance(store.threshold, int) or store.threshold < 0:
        raise InvalidArgumentError(f"a blob store's threshold must be an int >= 0, got {store.threshold!r}")
    return store


def _threshold(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"threshold must be an int >= 0 (bytes), got {value!r}")
    return value


CHUNK = 200
"""The longest folder name :class:`FileBlobStore` makes of a task id (file systems allow 255 bytes)."""


class FileBlobStore:
    """Blobs as files under ``root`` (made if missing), one file a blob. A write goes to a
    temporary file in the same directory, is flushed to disk, then renamed into place (atomic on
    POSIX): a reader sees the whole blob or none, and a writer killed midway leaves only a
    ``.tmp`` file, which :meth:`list` does not show and the sweep of a later run removes."""

    def __init__(self, root: str | os.PathLike[str], *, threshold: int = DEFAULT_THRESHOLD) -> None:
        self.root = Path(root)
        self.threshold = _threshold(threshold)
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"FileBlobStore({str(self.root)!r}, threshold={self.threshold})"

    def _path(self, name: str) -> Path:
        """``root/<queue>/<task id>/<nonce>``, a task id longer than a file name may be (a quoted
        id reaches 768 characters) cut into folders of :data:`CHUNK` characters (``list`` joins
        them again: a quoted id has no ``/``)."""
        parts = name.split("/")
        if len(parts) != 3 or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            raise InvalidArgumentError(f"not a blob name: {name!r}")
        queue, id, nonce = parts
        return self.root.joinpath(queue, *[id[i:i + CHUNK] for i in range(0, len(id), CHUNK)], nonce)

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def get(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            raise BlobNotFoundError(f"blob {name!r} is not in {self!r}") from None
        except OSError as exc:
            raise BlobError(f"blob {name!r} cannot be read: {exc}") from exc

    def delete(self, name: str) -> None:
        path = self._path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        for parent in path.parents:  # (empty task and queue folders go too)
            if parent == self.root:
                break
            try:
                parent.rmdir()
            except OSError:
                break

    def list(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        now = time.time()
        for dirpath, _dirs, files in os.walk(self.root):
            for f in files:
                path = Path(dirpath, f)
                parts = path.relative_to(self.root).parts
                rel = f"{parts[0]}/{''.join(parts[1:-1])}/{parts[-1]}" if len(parts) >= 3 else "/".join(parts)
                try:
                    mtime = path.stat().st_mtime
                except FileNotFoundError:
                    continue
                if f.startswith("."):  # a writer's temporary file: removed once it is a day old
                    if now - mtime > 86400:
                        path.unlink(missing_ok=True)
                    continue
                if rel.startswith(prefix):
                    yield rel, mtime


class S3BlobStore:
    """Blobs as objects of an S3 bucket (or any S3-compatible server: ``endpoint_url``), under
    ``prefix``. ``client``: a boto3 S3 client to use (else one is made from ``**client_options``:
    region_name, aws_access_key_id, ...). A PUT is atomic in S3: a reader sees the whole object or
    none. Needs boto3 (``pip install 'asynqpy[s3]'``)."""

    def __init__(self, bucket: str, *, prefix: str = "asynqpy/", threshold: int = DEFAULT_THRESHOLD,
                 endpoint_url: str | None = None, client: Any = None, **client_options: Any) -> None:
        if not isinstance(bucket, str) or not bucket:
            raise InvalidArgumentError(f"bucket must be a non-empty str, got {bucket!r}")
        self.bucket = bucket
        self.prefix = prefix
        self.threshold = _threshold(threshold)
        if client is None:
            try:
                import boto3
            except ImportError:
                raise InvalidArgumentError("S3BlobStore needs boto3: pip install 'asynqpy[s3]'") from None
            client = boto3.client("s3", endpoint_url=endpoint_url, **client_options)
        self.client = client

    def __repr__(self) -> str:
        return f"S3BlobStore({self.bucket!r}, prefix={self.prefix!r}, threshold={self.threshold})"

    def put(self, name: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=data)
        except Exception as exc:
            raise BlobError(f"blob {name!r} cannot be stored in {self!r}: {exc}") from exc

    def get(self, name: str) -> bytes:
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise BlobNotFoundError(f"blob {name!r} is not in {self!r}") from None
            raise BlobError(f"blob {name!r} cannot be read from {self!r}: {exc}") from exc
        return bytes(got["Body"].read())

    def delete(self, name: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + name)
        except Exception as exc:
            raise BlobError(f"blob {name!r} cannot be deleted from {self!r}: {exc}") from exc

    def list(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + prefix)
        for page in pages:
            for obj in page.get("Contents", ()):
                yield obj["Key"][len(self.prefix):], obj["LastModified"].timestamp()
