"""docs/protocol-reference.md is made from the code (scripts/protocol_reference.py) and says all of
it: every key, every message field, every script with its inputs in the order they are sent
(issue 47 #1). A key, a field or a script header changed without making the page again fails here."""

from __future__ import annotations

import re
import subprocess
import sys

from helpers import ROOT

from asynqpy.core.model import codec
from asynqpy.core.spine import keys, protocol
from asynqpy.core.spine.scripts import load_scripts

PAGE = ROOT / "docs" / "protocol-reference.md"


def test_the_protocol_reference_is_current() -> None:
    res = subprocess.run([sys.executable, "scripts/protocol_reference.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_it_names_every_key_field_and_script() -> None:
    page = PAGE.read_text()
    for name in ("ALL_QUEUES", "SERVERS", "PROTOCOL", "CRON_QUEUES"):
        assert f"| `{name}` | `{getattr(keys, name)}` |" in page, name
    q = keys.QueueKeys("<queue>")
    for attr in keys.QueueKeys.__slots__:
        if attr not in ("name", "base"):
            assert f"| `{attr}` | `{getattr(q, attr)}` |" in page, attr
    for name, i in codec.FIELD_INDEX.items():
        assert re.search(rf"^\| {i} \| `{name}` \| [^|]+ \| [^|]+ \| {protocol.FIELD_SINCE.get(name, 1)} \| ", page,
                         re.MULTILINE), name
    for name, script in load_scripts().items():
        section = page.split(f"\n### {name}\n", 1)[1].split("\n### ", 1)[0]
        rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", section, re.MULTILINE)
        key_rows = [n for _, n in rows[:len(script.keys)]]
        arg_rows = [n for _, n in rows[len(script.keys):len(script.keys) + len(script.args)]]
        assert key_rows == list(script.keys) and arg_rows == list(script.args), name
        assert "Returns" in section or "returns" in section or "Reply" in section or "reply" in section, name


def test_every_field_has_a_meaning_and_a_version_this_release_speaks() -> None:
    assert set(protocol.FIELD_MEANINGS) == set(codec.FIELD_INDEX)
    assert all(1 <= v <= protocol.PROTOCOL_VERSION for v in protocol.FIELD_SINCE.values())
    assert set(protocol.FIELD_SINCE) <= set(codec.FIELD_INDEX)


def test_the_hand_written_page_links_the_reference_and_stays_short() -> None:
    text = (ROOT / "docs" / "protocol.md").read_text()
    assert "(protocol-reference.md)" in text and "`asynqpy:protocol`" in text
    assert len(text.splitlines()) <= 400
