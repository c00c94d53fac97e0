"""The loader rules docs/protocol.md writes out for clients in other languages ("Loading a script,
exactly") and the Node client's own tables (clients/node/src/) are the Python loader's and codec's:
a change on the Python side that the page or the Node client does not follow fails here, in the
fast tier (the Node client's own tests, tests/test_node_client.py, need node and a real Redis)."""

from __future__ import annotations

import json
import re

from helpers import ROOT

from asynqpy.core.model import codec
from asynqpy.core.model.checks import DEFAULT_UNIQUE_KEY_TTL
from asynqpy.core.spine import protocol, scripts

PAGE = " ".join((ROOT / "docs" / "protocol.md").read_text().split())
NODE = ROOT / "clients" / "node" / "src"


def test_the_page_quotes_the_loaders_patterns() -> None:
    for pattern in (scripts._INCLUDE, scripts._DOC_LINE, scripts._COMMENT, scripts._LOCAL_FUNCTION):
        assert f"`{pattern.pattern}`" in PAGE, pattern.pattern


def test_the_page_lists_the_key_groups_and_the_unique_key_ttl() -> None:
    for group, members in scripts.KEY_GROUPS.items():
        assert f"`@{group}` = `{' '.join(members)}`" in PAGE, group
    assert f"a `unique_key` alone: {DEFAULT_UNIQUE_KEY_TTL})" in PAGE


def test_the_node_client_has_the_field_table_and_the_key_groups() -> None:
    source = (NODE / "codec.ts").read_text()
    rows = re.findall(r'\{ name: "(\w+)", dflt: ([^,]+), type:', source)
    assert [name for name, _ in rows] == list(codec.FIELD_INDEX)
    defaults = [None if d == "undefined" else json.loads(d) for _, d in rows]
    assert defaults[1:] == [f.default for f in codec.Message.__dataclass_fields__.values()][1:]
    groups = (NODE / "scripts.ts").read_text()
    for group, members in scripts.KEY_GROUPS.items():
        assert f"{group}: {json.dumps(list(members))}," in groups, group


def test_the_node_client_speaks_this_protocol_version() -> None:
    """A new protocol version (docs/releases.md) is one the Node client must be brought to as well."""
    source = (NODE / "client.ts").read_text()
    assert f"export const PROTOCOL_VERSION = {protocol.PROTOCOL_VERSION};" in source
    assert f"export const OLDEST_READ = {protocol.OLDEST_READ};" in source
