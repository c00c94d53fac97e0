"""The rules engine (docs/rules.md): configuration checks (one line each, with the place in the
file), Resc's README examples run unchanged (the simple regex rule; propagation to children via a
fetch, against a local HTTP server), make_task's asynqpy tasks, the dead list, recovery of the
taken list, several instances sharing the work; on redis-server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from helpers import until

from asynqpy import Inspector, InvalidArgumentError, TaskState
from asynqpy.cli.main import main
from asynqpy.rules import ConfigError, Rules, load_config, parse_config, parse_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "rules"

CHILDREN = {
    "5ab7342600000040": [{"processId": 634876914, "productId": "5ab7e7dc00000040"},
                         {"processId": 634876914, "productId": "5ab7ebe800000040"}],
    "1111111111111111": {"processId": 7, "productId": "2222222222222222"},  # an object: one child
}


@pytest.fixture
def web() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server answering /products/<id>/direct-children (also as a proxy, for
    URLs naming another host): ids in CHILDREN answer their JSON, 'fail...' 500, others 404."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("://", 1)[-1]
            path = path[path.index("/"):] if "://" in self.path else path
            seen.append(path)
            parts = path.strip("/").split("/")
            if len(parts) == 3 and parts[0] == "products" and parts[2] == "direct-children":
                if parts[1] in CHILDREN:
                    body = json.dumps(CHILDREN[parts[1]]).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(500 if parts[1].startswith("fail") else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        t.join(5)


def _run(rules: Rules, done: Any, timeout: float = 20) -> None:
    """Run the engine in a new event loop until ``done()``, then stop it."""
    async def main_() -> None:
        task = asyncio.create_task(rules.arun())
        try:
            await until(done, timeout)
        finally:
            rules.stop()
            await asyncio.wait_for(task, 10)

    asyncio.run(main_())


def _empty(r: redis.Redis, *lists: str) -> bool:
    return all(r.llen(x) == 0 for x in lists)


# -- configuration checks -----------------------------------------------------------------------


def _check(tmp_path: Path, text: str, name: str = "c.hjson") -> str:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    return str(e.value)


BASE = """{
  watchers: [
    {
      input_queue: in
      rules: [
        {
          name: r1
          on: "^a/(?P<x>\\\\w+)$"
          %s
        }
      ]
    }
  ]
}
"""


def test_the_examples_and_resc_configs_check(tmp_path: Path) -> None:
    for f in sorted(EXAMPLES.iterdir()):
        conf = load_config(f)
        assert conf.watchers
    conf = load_config(EXAMPLES / "propagation.json")
    w2 = conf.watchers[1]
    assert w2.taken_queue == "global/to-propagate/taken" and w2.dead_queue == "global/to-propagate/dead"
    assert conf.watchers[0].rules[1].make[0].task.src == "${input_task}"  # Resc's default task


@pytest.mark.parametrize("body,message,line", [
    ('make: { queue: "q/${y}" }', "${y} is not a variable of this rule (it has: input_task, x)", 9),
    ('make: { queue: "q", sett: "s" }', "unknown key 'sett'", 9),
    ('make_task: { type: "t", queue: "bad queue" }', "queue", 9),
    ('fetch: [{ url: "http://h/${x}" }] make: { queue: "q" }', "returns: must be a non-empty string", 9),
    ('fetch: [{ url: "http://h/${x}", returns: "r" }] make: { queue: "${r.id}", task: "${z.id}" }',
     "${z.id} is not a variable", 9),
    ('', "a rule needs make (or todo) or make_task", 7),
    ('make: { queue: "q" } make_task: { type: "t", priority: 12 }', "priority: must be an integer from 0 to 9", 9),
])
def test_config_problems_name_the_place(tmp_path: Path, body: str, message: str, line: int) -> None:
    err = _check(tmp_path, BASE % body)
    assert message in err, err
    assert err.startswith(f"{tmp_path / 'c.hjson'}:{line}: watchers[0].rules[0]"), err
    assert "\n" not in err


def test_more_config_problems(tmp_path: Path) -> None:
    assert "not a valid regular expression" in _check(tmp_path, BASE.replace("(?P<x>", "(?P<x") % 'make: {queue: "q"}')
    err = _check(tmp_path, '{ "watchers": [ { "input_queue": "a"\n "rules": [ \n')
    assert "not valid Hjson/JSON" in err and err.startswith(f"{tmp_path / 'c.hjson'}:")
    assert "unknown key 'watcher'" in _check(tmp_path, "{ watcher: [] }")
    assert "must be a non-empty list of watchers" in _check(tmp_path, "{ watchers: [] }")
    two = ('{ "watchers": [ { "input_queue": "a", "taken_queue": "t", "rules": [ { "on": "x", "make": { "queue": "q" } '
           '} ] }, { "input_queue": "b", "taken_queue": "t", "rules": [ { "on": "x", "make": { "queue": "q" } } ] } ] }')
    assert "needs a taken list of its own" in _check(tmp_path, two)
    toml = _check(tmp_path, '[[watchers]]\ninput_queue = "a"\n[[watchers.rules]]\non = "x"\n', "c.toml")
    assert "a rule needs make" in toml
    assert "not valid TOML" in _check(tmp_path, "[[watchers]\n", "c.toml")


def test_toml_and_json_configs_parse() -> None:
    toml = ('[[watchers]]\ninput_queue = "in"\n[[watchers.rules]]\nname = "r"\non = "^a/(?P<x>\\\\w+)$"\n'
            '[watchers.rules.make]\nqueue = "out/${x}"\n')
    conf = parse_config(parse_text(toml, "c.toml"), toml, "c.toml")
    assert conf.watchers[0].rules[0].make[0].queue.src == "out/${x}"
    data = {"watchers": [{"input_queue": "in", "rules": [{"on": "x", "todo": {"queue": "q"}}]}]}
    assert parse_config(data).watchers[0].rules[0].make[0].queue.src == "q"  # Resc's older name


def test_cli_check_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.hjson"
    bad.write_text(BASE % 'make: { queue: "q/${nope}" }')
    res = CliRunner().invoke(main, ["rules", "--check", str(bad)])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert f"{bad}:9: watchers[0].rules[0].make.queue: ${{nope}} is not a variable" in res.stderr
    res = CliRunner().invoke(main, ["rules", "--check", str(EXAMPLES / "simple.hjson")])
    assert res.exit_code == 0 and "ok (1 watcher(s), 1 rule(s))" in res.stdout
    res = CliRunner().invoke(main, ["rules", "--check", str(tmp_path / "missing.hjson")])
    assert res.exit_code == 2 and "cannot read it" in res.stderr


# -- running ---------------------------------------------------------------------------------------


@pytest.mark.real
def test_resc_simple_example_runs_unchanged(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.lpush("global/events", "acq/123/456", "acq/123/456", "nothing/to/do", "acq/9/x")
    rules = Rules(EXAMPLES / "simple.hjson", redis_url)
    _run(rules, lambda: rules.handled == 4)
    assert r.lrange("trt/123/todo-queue", 0, -1) == ["trt/123/456"]  # the set kept the second one out
    assert r.lrange("trt/9/todo-queue", 0, -1) == ["trt/9/x"]
    assert r.zscore("trt/123/todo-set", "trt/123/456") is not None  # scored with the time, as Resc does
    assert _empty(r, "global/events", "global/taken", "global/events/dead")


@pytest.mark.real
def test_resc_propagation_example_runs_unchanged(redis_url: str, web: tuple[str, list[str]]) -> None:
    """The config names http://my-web-service: HTTP_PROXY points httpx at the local server."""
    url, seen = web
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.lpush("global/events", "acq/634876914/1", "trt/634876914/5ab7342600000040", "trt/1/failfailfailfail",
            "trt/1/1111111111111111")
    cmd = [sys.executable, "-m", "asynqpy.cli.main", "rules", str(EXAMPLES / "propagation.json"),
           "--redis-url", redis_url]
    env = {"HTTP_PROXY": url, "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        asyncio.run(until(lambda: r.llen("global/to-propagate/dead") == 1 and r.llen("trt/7/todo-queue") == 1
                          and _empty(r, "global/events", "global/taken", "global/to-propagate",
                                     "global/to-propagate/taken"), 30))
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert r.lrange("trt/634876914/todo-queue", 0, -1) == ["trt/634876914/5ab7ebe800000040",
                                                           "trt/634876914/5ab7e7dc00000040", "trt/634876914/1"]
    assert r.lrange("trt/7/todo-queue", 0, -1) == ["trt/7/2222222222222222"]
    dead = json.loads(r.lindex("global/to-propagate/dead", 0))
    assert dead["event"] == "trt/1/failfailfailfail" and "HTTP 500" in dead["error"] and "after 4 attempt" in \
        dead["error"] and dead["rule"] == "TRT propagation to children : make child tasks"
    assert seen.count("/products/failfailfailfail/direct-children") == 4  # retried with backoff
    assert "goes to global/to-propagate/dead" in err.decode()


@pytest.mark.real
def test_make_task_enqueues_asynqpy_tasks_and_dedups(redis_url: str, tmp_path: Path) -> None:
    conf = tmp_path / "t.hjson"
    conf.write_text((EXAMPLES / "tasks.hjson").read_text().replace(
        "max_retry: 5", "max_retry: 5\n set: \"{shop}/made\"") + "\n")
    bad = tmp_path / "bad.hjson"
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.lpush("{shop}/events", "order/1/paid", "order/2/paid", "order/1/paid", "order/x/paid")
    rules = Rules(conf, redis_url)
    _run(rules, lambda: rules.handled == 4)
    with Inspector(redis_url) as insp:
        tasks = insp.list_tasks("billing", TaskState.PENDING)
        assert sorted(t.payload["order"] for t in tasks) == ["1", "2"]  # the repeat dropped
        assert tasks[0].type == "invoice:create" and tasks[0].max_retry == 5
        assert {t.payload["source"] for t in tasks} == {"order/1/paid", "order/2/paid"}
    assert r.zcard("{shop}/made") == 2
    # a rendered queue name asynqpy refuses: the event goes to the dead list, nothing is lost
    bad.write_text('{ "watchers": [ { "input_queue": "{shop}/events", "rules": [ { "on": "^q/(?P<q>.*)$", '
                   '"make_task": { "type": "t", "queue": "${q}" } } ] } ] }')
    r.lpush("{shop}/events", "q/ok-queue", "q/bad queue")
    rules = Rules(bad, redis_url)
    _run(rules, lambda: rules.handled == 2)
    dead = [json.loads(x) for x in r.lrange("{shop}/events/dead", 0, -1)]
    assert [d["event"] for d in dead] == ["q/bad queue"] and "queue" in dead[0]["error"]
    with Inspector(redis_url) as insp:
        assert len(insp.list_tasks("ok-queue", TaskState.PENDING)) == 1


@pytest.mark.real
def test_events_left_in_the_taken_list_are_handled_first(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.lpush("global/taken", "acq/1/a", "acq/1/b")  # a crashed run's (b taken last)
    r.lpush("global/events", "acq/1/c")
    rules = Rules(EXAMPLES / "simple.hjson", redis_url)
    _run(rules, lambda: rules.handled == 3)
    order = r.lrange("trt/1/todo-queue", 0, -1)[::-1]
    assert order == ["trt/1/a", "trt/1/b", "trt/1/c"], order
    assert _empty(r, "global/taken", "global/events")


@pytest.mark.real
def test_instances_share_the_work_each_with_its_taken_list(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.lpush("global/events", *[f"acq/5/p{i}" for i in range(2000)])
    engines = [Rules(EXAMPLES / "simple.hjson", redis_url, instance=name, batch=20) for name in ("a", "b")]

    async def main_() -> None:
        tasks = [asyncio.create_task(e.arun()) for e in engines]
        await until(lambda: sum(e.handled for e in engines) == 2000, 30)
        for e in engines:
            e.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)

    asyncio.run(main_())
    assert all(e.handled > 0 for e in engines), [e.handled for e in engines]  # both worked
    assert r.llen("trt/5/todo-queue") == 2000 and r.zcard("trt/5/todo-set") == 2000
    assert _empty(r, "global/events", "global/taken/a", "global/taken/b")


@pytest.mark.real
def test_dead_events_are_sent_back_by_redrive(redis_url: str, tmp_path: Path) -> None:
    from asynqpy.rules import redrive

    conf = tmp_path / "r.json"
    conf.write_text(json.dumps({"watchers": [{"input_queue": "in", "rules": [
        {"name": "needs y", "on": "^(?P<x>a)(?P<y>b)?$", "make": {"queue": "out", "task": "${x}${y}"}}]}]}))
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.lpush("in", "ab", "a", "a")  # 'a' leaves group y unset: no value for ${y}
    rules = Rules(conf, redis_url)
    _run(rules, lambda: rules.handled == 3)
    assert r.lrange("out", 0, -1) == ["ab"]
    dead = [json.loads(x) for x in r.lrange("in/dead", 0, -1)]
    assert [d["event"] for d in dead] == ["a", "a"] and "no value for ${y}" in dead[0]["error"]
    assert dead[0]["rule"] == "needs y" and dead[0]["watcher"] == "in"
    res = CliRunner().invoke(main, ["rules", str(conf), "--redrive", "--redis-url", redis_url])
    assert res.exit_code == 0 and "in: 2 dead event(s) moved back" in res.stdout, res.output
    assert r.lrange("in", 0, -1) == ["a", "a"] and r.llen("in/dead") == 0
    assert redrive(conf, redis_url) == {"in": 0}


@pytest.mark.real
def test_rules_metrics(redis_url: str) -> None:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    from redisproc import free_port

    r = redis.Redis.from_url(redis_url)
    r.lpush("global/events", "acq/1/a", "acq/1/a", "other")
    port = free_port()
    rules = Rules(EXAMPLES / "simple.hjson", redis_url, metrics_port=port)
    got: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def scraped() -> bool:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            return False  # not serving yet
        got.update({(s.name, tuple(sorted(s.labels.items()))): s.value
                    for fam in text_string_to_metric_families(text) for s in fam.samples})
        return rules.handled == 3

    _run(rules, scraped)
    w = (("watcher", "global/events"),)
    rule = "TRT computation on data acquisition"
    assert got[("asynqpy_rules_events_total", w)] == 3
    assert got[("asynqpy_rules_matched_total", tuple(sorted(w + (("rule", rule),))))] == 2
    assert got[("asynqpy_rules_tasks_total", tuple(sorted(w + (("rule", rule), ("kind", "pushed")))))] == 1
    assert got[("asynqpy_rules_tasks_total", tuple(sorted(w + (("rule", rule), ("kind", "duplicate")))))] == 1


def test_the_readme_and_docs_configs_check(tmp_path: Path) -> None:
    import re

    for page in (ROOT / "docs" / "rules.md",):  # (the README's example moved there: issue 44)
        blocks = re.findall(r"^```hjson\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL)
        assert blocks, page
        for i, text in enumerate(blocks):
            p = tmp_path / f"{page.stem}-{i}.hjson"
            p.write_text(text)
            assert load_config(p).watchers


def test_the_engine_on_every_backend(backend: Any) -> None:
    """fakeredis, redis-server and the cluster (lists with one hash tag share a slot)."""
    import uuid

    tag = "{" + uuid.uuid4().hex[:8] + "}"
    conf = parse_config({"watchers": [{"input_queue": f"{tag}/in", "rules": [
        {"name": "push", "on": r"^p/(?P<n>\d+)$", "make": {"task": "t/${n}", "queue": f"{tag}/out",
                                                            "set": f"{tag}/set"}},
        {"name": "task", "on": r"^t/(?P<n>\d+)$", "make_task": {"type": "job", "payload": {"n": "${n}"},
                                                               "queue": "rq" + tag[1:-1]}},
        {"name": "cross", "on": "^x$", "make": {"queue": "elsewhere/{other}", "set": "sets/{third}"}},
    ]}]})
    r = backend.sync
    r.lpush(f"{tag}/in/taken", "p/0")  # left by a crashed run
    r.lpush(f"{tag}/in", "p/1", "p/1", "t/7", "nothing")
    if backend.kind != "fake":
        r.lpush(f"{tag}/in", "x")  # on the cluster: a list and a set in two slots (refused); one server: fine
    n = 6 if backend.kind != "fake" else 5

    async def main_() -> None:
        client = backend.new_async()
        rules = Rules(conf, client)
        task = asyncio.create_task(rules.arun())
        await until(lambda: rules.handled == n, 20)
        rules.stop()
        await asyncio.wait_for(task, 10)
        await client.aclose()  # the engine leaves a client it was given open

    asyncio.run(main_())
    assert sorted(r.lrange(f"{tag}/out", 0, -1)) == [b"t/0", b"t/1"]
    assert r.llen(f"{tag}/in") == 0 and r.llen(f"{tag}/in/taken") == 0
    with Inspector(r) as insp:
        [t] = insp.list_tasks("rq" + tag[1:-1], TaskState.PENDING)
        assert t.type == "job" and t.payload == {"n": "7"}
    if backend.kind == "cluster":
        dead = [json.loads(x) for x in r.lrange(f"{tag}/in/dead", 0, -1)]
        assert [d["event"] for d in dead] == ["x"] and dead[0]["rule"] == "cross", dead
    elif backend.kind == "real":
        assert r.lrange("elsewhere/{other}", 0, -1) == [b"x"]



def _engine(conf: Any, client: Any, done: Any, timeout: float = 20) -> Rules:
    """Run the engine on ``client`` (an asyncio redis client) until ``done(rules)``."""
    rules = Rules(conf, client)

    async def main_() -> None:
        task = asyncio.create_task(rules.arun())
        try:
            await until(lambda: done(rules), timeout)
        finally:
            rules.stop()
            await asyncio.wait_for(task, 10)
            await client.aclose()

    asyncio.run(main_())
    return rules


def _engine(conf: Any, client: Any, done: Any, timeout: float = 20) -> Rules:
    """Run the engine on ``client`` (an asyncio redis client) until ``done(rules)``."""
    rules = Rules(conf, client)

    async def main_() -> None:
        task = asyncio.create_task(rules.arun())
        try:
            await until(lambda: done(rules), timeout)
        finally:
            rules.stop()
            await asyncio.wait_for(task, 10)
            await client.aclose()

    asyncio.run(main_())
    return rules


@pytest.mark.real
def test_a_fetch_failure_counts_the_attempts_it_made(redis_url: str, web: tuple[str, list[str]]) -> None:
    """A 404 is not asked again: the reason said 'after 2 attempt(s)' (retries + 1) for one."""
    url, seen = web
    conf = parse_config({"watchers": [{"input_queue": "in", "rules": [
        {"name": "kids", "on": "^p/(?P<id>.+)$", "fetch": [{"url": url + "/products/${id}/direct-children",
                                                              "returns": "c", "retries": 1}],
         "make": {"queue": "out"}}]}]})
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.lpush("in", "p/missing")
    _engine(conf, redis.asyncio.Redis.from_url(redis_url), lambda rules: rules.handled == 1)
    [dead] = [json.loads(x) for x in r.lrange("in/dead", 0, -1)]
    assert seen == ["/products/missing/direct-children"]
    assert "(HTTP 404) after 1 attempt(s)" in dead["error"], dead


def test_a_non_utf8_event_goes_to_the_dead_list_with_its_bytes(backend: Any) -> None:
    """It used to raise UnicodeEncodeError out of the engine (the dead record, the listener's
    PUBLISH), at every start: the event stayed taken and nothing else was handled."""
    import uuid

    from asynqpy.rules import redrive

    tag = "{" + uuid.uuid4().hex[:8] + "}"
    queue = "rq" + tag[1:-1]
    conf = parse_config({"listener_channel": f"{tag}/news", "watchers": [{"input_queue": f"{tag}/in", "rules": [
        {"name": "plain", "on": "^plain/(?P<x>.+)$",
         "make_task": {"type": "plain:${x}", "queue": queue, "payload": {"x": "${x}"}},
         "make": {"queue": f"{tag}/out"}}]}]})
    r = backend.sync
    r.lpush(f"{tag}/in/taken", b"plain/\xfe")  # a crashed run's
    r.lpush(f"{tag}/in", b"plain/\xff", b"plain/ok", b"plain/\xc3(")
    _engine(conf, backend.new_async(), lambda rules: rules.handled == 4)
    dead = [json.loads(x) for x in r.lrange(f"{tag}/in/dead", 0, -1)][::-1]
    assert [d["event"] for d in dead] == ["plain/\\xfe", "plain/\\xff", "plain/\\xc3("], dead
    assert [bytes.fromhex(d["event_hex"]) for d in dead] == [b"plain/\xfe", b"plain/\xff", b"plain/\xc3("]
    assert "not UTF-8 text" in dead[0]["error"] and dead[0]["rule"] == ""
    assert r.lrange(f"{tag}/out", 0, -1) == [b"plain/ok"]
    assert r.llen(f"{tag}/in") == 0 and r.llen(f"{tag}/in/taken") == 0
    with Inspector(r) as insp:
        [t] = insp.list_tasks(queue, TaskState.PENDING)
        assert t.type == "plain:ok"
    assert redrive(conf, r) == {f"{tag}/in": 3}  # the very bytes go back
    assert r.lrange(f"{tag}/in", 0, -1) == [b"plain/\xc3(", b"plain/\xff", b"plain/\xfe"]


def test_oversized_and_slow_events_go_to_the_dead_list(backend: Any) -> None:
    """An event over max_event_bytes is not matched; one whose search takes over match_timeout
    is stopped there; both go to the dead list with the reason, and the batch goes on."""
    import uuid

    tag = "{" + uuid.uuid4().hex[:8] + "}"
    conf = parse_config({"max_event_bytes": 64, "match_timeout": 0.05, "watchers": [
        {"input_queue": f"{tag}/in", "rules": [
            {"name": "slow", "on": "^(a|a)*$", "make": {"queue": f"{tag}/out"}},
            {"name": "rest", "on": "^[b-z]", "make": {"queue": f"{tag}/out"}}]}]})
    r = backend.sync
    evil, big, edge = "a" * 45 + "!", "b" * 65, "c" * 64
    r.lpush(f"{tag}/in", evil, "aaaa", big, edge, "done")
    _engine(conf, backend.new_async(), lambda rules: rules.handled == 5)
    assert r.lrange(f"{tag}/out", 0, -1)[::-1] == [b"aaaa", edge.encode(), b"done"]
    dead = {d["event"]: d for d in (json.loads(x) for x in r.lrange(f"{tag}/in/dead", 0, -1))}
    assert sorted(dead) == [evil, big]
    assert "took over match_timeout (0.05 s)" in dead[evil]["error"] and dead[evil]["rule"] == "slow"
    assert dead[big]["error"] == "the event is 65 bytes, over max_event_bytes (64)" and "event_hex" not in dead[big]
    assert r.llen(f"{tag}/in/taken") == 0


@pytest.mark.real
def test_a_slow_event_holds_up_only_its_own_watcher(redis_url: str) -> None:
    """Its search runs off the event loop: the other watcher handles its event meanwhile (the
    slow one then goes to the dead list at match_timeout)."""
    conf = parse_config({"match_timeout": 3, "watchers": [
        {"input_queue": "a/in", "rules": [{"name": "slow", "on": "^(a|a)*$", "make": {"queue": "a/out"}}]},
        {"input_queue": "b/in", "rules": [{"name": "any", "on": ".", "make": {"queue": "b/out"}}]}]})
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    rules = Rules(conf, redis_url)
    order: list[str] = []

    async def main_() -> None:
        task = asyncio.create_task(rules.arun())
        try:
            r.lpush("a/in", "a" * 60 + "!")
            await until(lambda: r.llen("a/in/taken") == 1, 10)
            r.lpush("b/in", "hello")
            await until(lambda: r.llen("b/out") == 1 and order.append("b") is None, 10)
            await until(lambda: r.llen("a/in/dead") == 1 and order.append("a") is None, 20)
        finally:
            rules.stop()
            await asyncio.wait_for(task, 10)

    asyncio.run(main_())
    assert order == ["b", "a"]
    assert "took over match_timeout (3 s)" in json.loads(r.lindex("a/in/dead", 0))["error"]


def test_fetch_url_templates_encode_variables() -> None:
    from asynqpy.core.rules.config import RuleError, UrlTemplate

    u = UrlTemplate.of("http://h:8080/a/${x}/b?q=${x}&n=${n}#${x}")
    assert u.render({"x": "1/../../admin?all=1#", "n": 5}) == (
        "http://h:8080/a/1%2F..%2F..%2Fadmin%3Fall%3D1%23/b?q=1%2F..%2F..%2Fadmin%3Fall%3D1%23&n=5"
        "#1%2F..%2F..%2Fadmin%3Fall%3D1%23")
    assert u.render({"x": "a b&c=d", "n": "é"}) == "http://h:8080/a/a%20b%26c%3Dd/b?q=a%20b%26c%3Dd&n=%C3%A9#a%20b%26c%3Dd"
    for up in (".", ".."):
        with pytest.raises(RuleError, match="a move up the path"):
            u.render({"x": up, "n": 1})
    host = UrlTemplate.of("https://api-${region}.internal/v1")
    assert host.render({"region": "eu-west_1"}) == "https://api-eu-west_1.internal/v1"
    for bad in ("x@127.0.0.1:80/", "evil.com", "a:1", "a/b", ""):
        with pytest.raises(RuleError, match="in a URL's host"):
            host.render({"region": bad})
    raw = UrlTemplate.of("http://h/a/${x}", escape=False)  # Resc's way, asked for
    assert raw.render({"x": "b/c?d=1"}) == "http://h/a/b/c?d=1"
    with pytest.raises(RuleError, match="in a URL's host"):
        UrlTemplate.of("http://${h}/a", escape=False).render({"h": "x.y"})


@pytest.mark.parametrize("url,message", [
    ("${x}/a", "must start with http:// or https://"),
    ("ftp://h/${x}", "must start with http:// or https://"),
    ("http://${x}@h/a", "not in the user info or the port"),
    ("http://h:${x}/a", "not in the user info or the port"),
    ("http:///a/${x}", "names no host"),
])
def test_fetch_urls_a_variable_could_move_are_refused(tmp_path: Path, url: str, message: str) -> None:
    err = _check(tmp_path, BASE % f'fetch: [{{ url: "{url}", returns: "r" }}] make: {{ queue: "q" }}')
    assert "watchers[0].rules[0].fetch[0].url: " in err and message in err, err
    err = _check(tmp_path, BASE % 'fetch: [{ url: "http://h/${x}", returns: "r", redirects: "all" }] make: { queue: "q" }')
    assert "redirects: must be one of same-origin, none, any" in err, err


@pytest.fixture
def two_hosts() -> Iterator[tuple[str, str, list[str]]]:
    """Two loopback HTTP servers (two origins): the first redirects /here to its own /data and
    /away to the second's /data; /data answers JSON, /lone a string with a lone surrogate. The
    list records the second's requests."""
    other: list[str] = []

    def handler(seen: list[str] | None, away: str) -> type[BaseHTTPRequestHandler]:
        class H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if seen is not None:
                    seen.append(self.path)
                if self.path in ("/here", "/away"):
                    self.send_response(302)
                    self.send_header("Location", "/data" if self.path == "/here" else f"{away}/data")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b'{"customer": "\\ud800"}' if self.path == "/lone" else b'{"customer": "c1"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return H

    b = ThreadingHTTPServer(("127.0.0.1", 0), handler(other, ""))
    b_url = f"http://127.0.0.1:{b.server_address[1]}"
    a = ThreadingHTTPServer(("127.0.0.1", 0), handler(None, b_url))
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (a, b)]
    for t in threads:
        t.start()
    try:
        yield f"http://127.0.0.1:{a.server_address[1]}", b_url, other
    finally:
        for s in (a, b):
            s.shutdown()
            s.server_close()
        for t in threads:
            t.join(5)


@pytest.mark.real
def test_fetches_follow_redirects_to_another_host_only_when_configured(
        redis_url: str, two_hosts: tuple[str, str, list[str]]) -> None:
    a, _, other = two_hosts
    rules = [{"name": name, "on": f"^{name}$", "fetch": [{"url": f"{a}/{path}", "returns": "o", **extra}],
              "make": {"queue": "out", "task": f"{name}/${{o.customer}}"}}
             for name, path, extra in [("same", "here", {}), ("away", "away", {}), ("away-any", "away",
                                       {"redirects": "any"}), ("here-none", "here", {"redirects": "none"}),
                                       ("lone", "lone", {})]]
    conf = parse_config({"watchers": [{"input_queue": "in", "rules": rules}]})
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.lpush("in", "same", "away", "away-any", "here-none", "lone")
    _engine(conf, redis.asyncio.Redis.from_url(redis_url), lambda rules: rules.handled == 5)
    assert sorted(r.lrange("out", 0, -1)) == ["away-any/c1", "same/c1"]
    assert other == ["/data"]  # only the fetch that allows any host went there
    dead = {d["event"]: d for d in map(json.loads, r.lrange("in/dead", 0, -1))}
    assert sorted(dead) == ["away", "here-none", "lone"]
    assert "HTTP 302: a redirect to" in dead["away"]["error"] and "not followed (redirects: same-origin)" in \
        dead["away"]["error"] and "after 1 attempt(s)" in dead["away"]["error"]
    assert "not followed (redirects: none)" in dead["here-none"]["error"]
    assert "not valid Unicode" in dead["lone"]["error"] and dead["lone"]["rule"] == "lone"


@pytest.mark.real
def test_fetch_url_variables_cannot_leave_the_path(redis_url: str, web: tuple[str, list[str]]) -> None:
    url, seen = web
    conf = parse_config({"watchers": [{"input_queue": "in", "rules": [
        {"name": "kids", "on": "^p/(?P<id>.+)$", "fetch": [{"url": url + "/products/${id}/direct-children",
                                                              "returns": "c"}],
         "make": {"queue": "out", "task": "${c.productId}"}},
        {"name": "region", "on": "^region/(?P<region>.+)$",
         "fetch": [{"url": "http://api-${region}.internal/v1", "returns": "c"}], "make": {"queue": "out"}}]}]})
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    r.lpush("in", "p/1111111111111111", "p/../../products/1111111111111111", "p/..",
            f"region/x@{url.split('//')[1]}/hijacked?")
    _engine(conf, redis.asyncio.Redis.from_url(redis_url), lambda rules: rules.handled == 4)
    assert r.lrange("out", 0, -1) == ["2222222222222222"]
    assert sorted(seen) == ["/products/..%2F..%2Fproducts%2F1111111111111111/direct-children",
                            "/products/1111111111111111/direct-children"]  # fetched concurrently: any order
    dead = {d["event"]: d["error"] for d in map(json.loads, r.lrange("in/dead", 0, -1))}
    assert "HTTP 404" in dead["p/../../products/1111111111111111"]
    assert "a move up the path" in dead["p/.."]
    assert "in a URL's host" in dead[f"region/x@{url.split('//')[1]}/hijacked?"]


def test_the_engine_serves_health_probes(redis_url: str) -> None:
    """``asynqpy rules --health-port P`` (Rules(health_port=)): /livez while its loop runs,
    /readyz once a PING reached Redis (docs/deploy.md); bad ports refused."""
    import urllib.request

    from redisproc import free_port

    port = free_port()
    rules = Rules(EXAMPLES / "simple.hjson", redis_url, health_port=port)
    seen: dict[str, Any] = {}

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as res:
                seen.update(json.loads(res.read()), code=res.status)
        except OSError:
            return False  # not serving yet, or not ready (503)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5) as res:
            seen["live_code"] = res.status
        return True

    _run(rules, ready)
    assert seen["code"] == 200 and seen["live_code"] == 200 and seen["redis"] is True, seen
    with pytest.raises(OSError):  # closed with the engine
        urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=2)
    with pytest.raises(InvalidArgumentError, match="health_port must be a port number"):
        Rules(EXAMPLES / "simple.hjson", redis_url, health_port=70000)
    res = CliRunner().invoke(main, ["rules", str(EXAMPLES / "simple.hjson"), "--health-port", "x",
                                    "--redis-url", redis_url])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "--health-port" in res.stderr, res.output
