"""Values as JSON types: what the CLI's --json and the web console's API emit."""

from __future__ import annotations

import base64
import dataclasses
import enum
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from ..security.encryption import Encrypted, is_sealed, key_id


def _encrypted(value: Any) -> dict[str, str]:
    if isinstance(value, Encrypted):
        return {"encrypted": value.kid, **({"error": value.reason} if value.reason else {})}
    return {"encrypted": key_id(value)}


def jsonable(value: Any) -> Any:
    """Dataclasses, enums, datetimes and bytes into JSON types: bytes become {"base64": ...},
    datetimes ISO 8601 strings, dict keys strings, an encrypted value the reader cannot open
    {"encrypted": key id}."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Encrypted) or is_sealed(value):  # a value the reader has no key for (docs/encryption.md)
        return _encrypted(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)) or (
            isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray, memoryview))):
        return [jsonable(v) for v in value]
    return value
