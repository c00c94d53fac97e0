#!/usr/bin/env python3
"""Write docs/protocol-reference.md: the wire protocol's reference, made from the code (issue 47 #1)

- the keys: the global ones (asynqpy/core/spine/keys.py's constants and key functions, with their
  docstrings) and a queue's (``QueueKeys``: each attribute's key, with how the scripts' headers
  describe it, and the key methods);
- the task message's fields: their number, msgpack type, default and protocol version (the codec's
  field table, asynqpy/core/model/codec.py; meanings: asynqpy/core/spine/protocol.py FIELD_MEANINGS);
- every script's contract: its KEYS and ARGV in order (groups expanded, as the loader binds them)
  and its header's text (what it does, its replies, its errors), from lua/*.lua;
- the event stream's event names and the control actions.

``--check``: write nothing, exit 1 if the page is stale (tests/test_protocol_docs.py checks the same).
"""

from __future__ import annotations

import ast
import html
import inspect
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any

import msgpack
from generated_page import write_or_check  # (scripts/ is on sys.path: run as python scripts/...)

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "protocol-reference.md"

HEADER = """# Protocol reference

<!-- made by scripts/protocol_reference.py from the code: do not edit by hand;
python scripts/protocol_reference.py writes it again, tests/test_protocol_docs.py fails when it is stale -->

The exact contract of what asynqpy stores in Redis, made from the code: the keys
(`asynqpy/core/spine/keys.py`), the task message's fields (`asynqpy/core/model/codec.py`), every Lua script's
inputs and replies (the headers of `lua/*.lua`), the event names and the control actions. How to
read it, and what is promised: [Wire protocol](protocol.md).

"""

NOT_KEYS = {"validate_name", "refuse_dot_segment", "validate_group", "validate_worker_name", "validate_queue",
            "is_queue_pattern", "validate_queue_or_pattern", "similar_queue", "known_queues", "queue_keys"}
"""The functions of core/spine/keys.py that make no key (validators and helpers)."""
PLACEHOLDER = {"server_id": "<server id>", "command_id": "<command id>", "name": "<group>", "tag": "<tag>",
               "key": "<key>", "worker": "<worker>", "id": "<task id>", "entry": "<entry>", "day": "<YYYY-MM-DD>",
               "token": "<token>", "inbox_id": "<inbox id>", "digest": "<digest>",
               "run_id": "<run id>"}
"""What a key function's argument is shown as."""


def cell(text: str) -> str:
    """``text`` for a table cell: one line; outside `code spans` HTML escaped and no column break."""
    parts = " ".join(text.split()).split("`")
    return "`".join(html.escape(p, quote=False).replace("|", "\\|") if i % 2 == 0 else p
                    for i, p in enumerate(parts))


def first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").split())
    m = re.match(r"(.+?\.)(\s|$)", text)
    return m.group(1) if m else text


def _call(fn: Callable[..., Any]) -> Any:
    args = [date(2000, 1, 1) if p == "day" else "LIMIT" if fn.__name__ == "limit_keys" else PLACEHOLDER[p]
            for p in inspect.signature(fn).parameters if p != "self"]
    return fn(*args)


def _shown(key: Any) -> str:
    keys = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"`{k.replace('2000-01-01', '<YYYY-MM-DD>').replace('LIMIT', '<limit>')}`" for k in keys)


def global_keys() -> list[tuple[str, str, str]]:
    """(name, key, meaning) of the global keys and channels: core/spine/keys.py's constants with a
    docstring, then its key functions."""
    from asynqpy.core.spine import keys

    tree = ast.parse(Path(keys.__file__).read_text())
    out = []
    body = tree.body
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.Assign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            name = node.targets[0].id  # type: ignore[attr-defined]
            if name.startswith("_") or not isinstance(getattr(keys, name), str):
                continue
            out.append((name, _shown(getattr(keys, name)), str(after.value.value)))
    for name, fn in inspect.getmembers(keys, inspect.isfunction):
        if fn.__module__ != keys.__name__ or name.startswith("_") or name in NOT_KEYS:
            continue
        out.append((f"{name}()", _shown(_call(fn)), first_sentence(fn.__doc__)))
    return out


def header_descriptions() -> dict[str, Counter[str]]:
    """Key name -> how the scripts' headers describe it (a description each header gives)."""
    out: dict[str, Counter[str]] = {}
    for _, script in scripts():
        for kind, name, desc in declarations(script):
            if kind == "KEY" and desc:
                out.setdefault(name, Counter())[desc] += 1
    return out


def queue_keys() -> list[tuple[str, str, str]]:
    """(attribute, key, meaning) of a queue's keys."""
    from asynqpy.core.spine.keys import QueueKeys

    q = QueueKeys("<queue>")
    described = header_descriptions()
    class_doc = " ".join((QueueKeys.__doc__ or "").split())
    out = []
    for attr in QueueKeys.__slots__:
        if attr in ("name", "base"):
            continue
        said = described.get(attr)
        doc = re.search(rf"(?<![\w.]){attr} \(([^()]*(?:\([^()]*\)[^()]*)*)\)", class_doc)
        header = said.most_common(1)[0][0] if said else ""
        meaning = doc.group(1) if doc else header or "(named by no script header)"
        if doc and header and len(meaning.split()) <= 2:  # a bare type ("ZSETs"): what the headers say too
            meaning = f"{meaning}: {header}"
        out.append((attr, _shown(getattr(q, attr)), meaning))
    for name, fn in inspect.getmembers(QueueKeys, inspect.isfunction):
        if not name.startswith("_"):
            out.append((f"{name}()", _shown(_call(getattr(q, name))), first_sentence(fn.__doc__) or "(see its code)"))
    return out


MSGPACK = {str: "str", int: "int", bool: "bool", object: "any", dict: "map", list: "array", type(None): "nil",
           msgpack.ExtType: "ext 69 (encrypted)"}


def fields() -> Iterator[tuple[int, str, str, str, int, str]]:
    """(number, name, msgpack type, default, since, meaning) of each message field."""
    from asynqpy.core.model import codec
    from asynqpy.core.spine import protocol

    for i, (name, types, default) in enumerate(zip(codec._FIELDS, codec._TYPES, codec._DEFAULTS)):
        kind = " or ".join(MSGPACK[t] for t in types)
        shown = "(required)" if i == 0 else "nil" if default is None else str(default).lower() \
            if isinstance(default, bool) else repr(default)
        yield i, name, kind, shown, protocol.FIELD_SINCE.get(name, 1), protocol.FIELD_MEANINGS[name]


def scripts() -> list[tuple[str, Any]]:
    from asynqpy.core.spine.scripts import load_scripts

    return sorted(load_scripts().items())


_DECL = re.compile(r"^(KEY|ARG) (@?\w+)(\.\.\.)?(?: \{([^}]*)\})?(?:\s{2,}(.*))?$")


def header_text(script: Any) -> str:
    m = re.match(r"\A--\[\[(.*?)\]\]", script.source, re.DOTALL)
    assert m is not None
    return m.group(1)


def declarations(script: Any) -> list[tuple[str, str, str]]:
    """(KEY|ARG, name, description) of a header's declarations, as written (a group unexpanded;
    a tail's name with its '...'; indented lines after a declaration go on describing it)."""
    out: list[tuple[str, str, str]] = []
    in_decl = False
    for line in header_text(script).splitlines():
        m = _DECL.match(line.rstrip())
        if m:
            name = m.group(2) + (m.group(3) or "") + (f" {{{m.group(4)}}}" if m.group(4) else "")
            out.append((m.group(1), name, (m.group(5) or "").strip()))
            in_decl = True
        elif in_decl and line.startswith(" ") and line.strip() and out:
            kind, name, desc = out[-1]
            out[-1] = (kind, name, f"{desc} {line.strip()}".strip())
        else:
            in_decl = False
    return out


def prose(script: Any) -> str:
    """A header's text but its declarations: what the script does, what it returns."""
    lines, in_decl = [], False
    for line in header_text(script).splitlines():
        if _DECL.match(line.rstrip()):
            in_decl = True
            continue
        if in_decl and line.startswith(" ") and line.strip():
            continue
        in_decl = False
        lines.append(line.rstrip())
    return "\n".join(lines).strip("\n")


def inputs(script: Any, kind: str) -> list[tuple[str, str, str]]:
    """(position, name, description) of a script's KEYS or ARGV, groups expanded in place (the
    positions bind() gives them), a tail last."""
    from asynqpy.core.spine.scripts import group_keys

    rows: list[tuple[str, str, str]] = []
    for k, name, desc in declarations(script):
        if k != kind:
            continue
        if name.startswith("@"):
            group = name[1:]
            for i, member in enumerate(group_keys(group)):
                said = f" ({desc})" if desc and i == 0 else ""
                rows.append(("", member, f"@{group}{said}: {QUEUE_MEANINGS.get(member, '')}"))
        elif "..." in name:
            rows.append(("…", name, desc))
        else:
            rows.append(("", name, desc))
    n = 0
    out = []
    for pos, name, desc in rows:
        if pos != "…":
            n += 1
            pos = str(n)
        out.append((pos, name, desc))
    fixed = [name for pos, name, _ in out if pos != "…"]
    expected = list(script.keys if kind == "KEY" else script.args)
    assert fixed == expected, (script.name, kind, fixed, expected)  # as the loader binds them
    return out


QUEUE_MEANINGS: dict[str, str] = {}
"""A queue key's meaning (as the queue's key table gives it), for the members of a key group."""


def table(head: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(cell(str(c)) if i else str(c) for i, c in enumerate(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n\n"


def page() -> str:
    from asynqpy.core.model import codec
    from asynqpy.core.results import events
    from asynqpy.core.server import control
    from asynqpy.core.spine import protocol

    parts = [HEADER, f"Protocol version **{protocol.PROTOCOL_VERSION}** (asynqpy {protocol.LIBRARY_VERSION} "
                     f"reads {protocol.OLDEST_READ} to {protocol.PROTOCOL_VERSION}).\n\n"]
    parts.append("## Global keys\n\nNot in any queue's hash slot (each in its own); channels are pub/sub "
                 "channels, not keys.\n\n")
    parts.append(table(("name", "key", "meaning"), [(f"`{n}`", k, m) for n, k, m in global_keys()]))
    parts.append("## A queue's keys\n\nEvery key of queue `<queue>` carries the hash tag `{<queue>}`: one "
                 "queue, one cluster slot. Meaning: how the scripts' headers most often describe the key.\n\n")
    queue = queue_keys()
    QUEUE_MEANINGS.update((a, m) for a, _, m in queue)
    parts.append(table(("attribute", "key", "meaning"), [(f"`{a}`", k, m) for a, k, m in queue]))
    from asynqpy.core.model.task import TaskState
    from asynqpy.core.spine.stored import TOKEN_LEN

    parts.append("## Task states\n\nA task is one field of its queue's `tasks` hash: its id -> its state's code, "
                 f"then for an active task its {TOKEN_LEN}-character lease token, then its message.\n\n")
    parts.append(table(("state", "code"), [(s.value, f"`{s.code}`") for s in TaskState]))
    parts.append("## The task message\n\nA msgpack array of these fields in this order (0-based), trailing "
                 "fields equal to their default left out; a signed message is followed by its tag, a msgpack "
                 f"`bin` of 32 bytes (HMAC-SHA256). The `priority` field's index ({codec.PRIORITY_INDEX}) is "
                 "what a script reads to know a message has a priority other than the default.\n\n")
    parts.append(table(("#", "field", "msgpack type", "default", "since", "meaning"),
                       [(i, f"`{n}`", t, d, s, m) for i, n, t, d, s, m in fields()]))
    parts.append("## Events\n\nThe `e` field of an entry of a queue's event stream (`events` above) is one of: "
                 + ", ".join(f"`{e}`" for e in events.EVENTS) + ".\n\n")
    parts.append("## Control actions\n\nA control command (msgpack `[command id, action]`, pushed to "
                 "`control_list()`) carries one of: " + ", ".join(f"`{a}`" for a in control.ACTIONS)
                 + ", or `concurrency=N` (N from 1 to " + f"{control.MAX_CONCURRENCY}).\n\n")
    parts.append("## Scripts\n\nEach script runs as a Redis Function (FCALL of its library's function; on a "
                 "Redis before 7.0 EVALSHA, then EVAL when the server does not have the script) with its "
                 "KEYS and ARGV in the order below (a tail `name...` takes the rest; a stride tail "
                 "`{a b}` takes items of that many values). Its text is its header, as written.\n\n")
    for name, script in scripts():
        parts.append(f"### {name}\n\n```text\n{prose(script)}\n```\n\n")
        for kind, title in (("KEY", "KEYS"), ("ARG", "ARGV")):
            rows = inputs(script, kind)
            if rows:
                parts.append(table(("#", title, "meaning"), [(p, f"`{n}`", d) for p, n, d in rows]))
    return "".join(parts).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    return write_or_check(PAGE, page(), argv, "scripts/protocol_reference.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
