"""The in-process store (fakeredis) compiles each script once, as Redis does
(asynqpy/redisio/memory.py), and a script still behaves as on Redis: fresh locals, KEYS and ARGV
of its own call, errors and the no-globals rule as before."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
import redis

from asynqpy.redisio import memory


def _runtime(r: Any) -> Any:
    return r.connection_pool.connection_kwargs["server"]._lua_runtime


def test_a_script_is_compiled_once_and_each_call_sees_its_own_keys_and_args(monkeypatch: pytest.MonkeyPatch) -> None:
    assert memory.install()
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    script = "local n = 0\nn = n + 1\nredis.call('SET', KEYS[1], ARGV[1] .. n)\nreturn KEYS[1]"
    sha = r.script_load(script)
    r.eval("return 1", 0)  # (the store's Lua runtime is made at its first script)
    runtime = _runtime(r)
    assert isinstance(runtime, memory._CompilingRuntime)
    compiled: list[Any] = []
    real_compile = runtime._runtime.compile
    monkeypatch.setattr(runtime, "_runtime", type("Spy", (), {
        "compile": staticmethod(lambda src: compiled.append(src) or real_compile(src)),
        "__getattr__": lambda self, name: getattr(real_compile.__self__, name)})())
    for i in range(5):
        assert r.evalsha(sha, 1, f"k{i}", f"v{i}") == f"k{i}".encode()
    assert [r.get(f"k{i}") for i in range(5)] == [f"v{i}1".encode() for i in range(5)]  # locals fresh per call
    assert compiled == [script.encode()]


def test_errors_and_the_no_globals_rule_are_kept() -> None:
    assert memory.install()
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    with pytest.raises(redis.ResponseError):
        r.eval("return redis.call('NOSUCHCOMMAND')", 0)
    with pytest.raises(redis.ResponseError):
        r.eval("return redis.call('NOSUCHCOMMAND')", 0)  # the cached chunk fails the same way
    with pytest.raises(redis.ResponseError):
        r.eval("this is not lua", 0)
    assert r.eval("return ARGV[1]", 0, "still works") == b"still works"
    with pytest.raises(redis.ResponseError, match="global"):
        r.eval("x = 1", 0)  # a global written by a script
