"""What the kit's tests share: a real nats-server, a stand-in for kube2nats' mirror writer, a TCP
gate to cut a client's connection, and asyncio test functions without a plugin. The harness'
sim-cluster (the real kube2nats) is in sim_cluster.py."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import nats
import pytest
from nats.js import api

import sim_cluster
from kube2nats import object_key

#: How long one test may run at most.
TEST_TIMEOUT = 90.0
#: How long a delete marker lives, and then the marker the server leaves in its place.
MARKER_TTL = 1

KIT = Path(__file__).resolve().parents[1]
KEY_VECTORS = KIT.parent / "key-vectors.json"


def aio(fn):
    """Runs an async test function in a fresh event loop, bounded by TEST_TIMEOUT."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), TEST_TIMEOUT))

    return wrapper


def nats_server_bin() -> str:
    try:
        return sim_cluster.nats_server_bin()
    except sim_cluster.Missing as exc:
        pytest.fail(str(exc), pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    """A nats-server with JetStream on a file store in a temp dir, on a fixed loopback port so
    that it can be restarted with its data."""

    def __init__(self) -> None:
        self.bin = nats_server_bin()
        self.dir = tempfile.mkdtemp(prefix="kube2nats-py-")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: Optional[subprocess.Popen] = None
        self.log = Path(self.dir) / "server.log"

    def start(self) -> None:
        log = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [self.bin, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", os.path.join(self.dir, "js")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nats-server did not start: {self.log.read_text()[-2000:]}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            sim_cluster.terminate(self.proc)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


async def connect(url: str, errors: Optional[List[BaseException]] = None, **options: Any) -> Any:
    """A client that reconnects quickly and forever; its errors collected in ``errors``."""

    async def error_cb(exc: BaseException) -> None:
        if errors is not None:
            errors.append(exc)

    opts: Dict[str, Any] = dict(
        max_reconnect_attempts=-1, reconnect_time_wait=0.1, connect_timeout=2, error_cb=error_cb
    )
    opts.update(options)
    return await nats.connect(url, **opts)


async def jetstream_ready(nc: Any, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            await nc.jsm().account_info()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def pod(namespace: str, name: str, rv: Any, labels: Optional[Dict[str, str]] = None, api_version: str = "v1") -> Dict[str, Any]:
    meta: Dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}", "resourceVersion": str(rv)}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": api_version, "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


class Mirror:
    """The stand-in writer: the bucket created as kube2nats creates it, puts with the ``Kube-*``
    headers, deletes with TTL'd markers, purges (tests/common/mirror.rs does the same)."""

    def __init__(self, nc: Any, bucket: str = "kube-objects") -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.bucket = bucket

    async def create(self) -> "Mirror":
        await jetstream_ready(self.nc)
        await self.js.create_key_value(
            api.KeyValueConfig(bucket=self.bucket, history=1, storage=api.StorageType.FILE, limit_marker_ttl=MARKER_TTL)
        )
        return self

    def key(self, obj: Dict[str, Any], plural: str = "pods", group: str = "", version: str = "v1") -> str:
        meta = obj["metadata"]
        return object_key(group, version, plural, meta.get("namespace"), meta["name"])

    async def publish(self, key: str, payload: bytes, headers: Optional[Dict[str, str]] = None) -> int:
        ack = await self.js.publish(f"$KV.{self.bucket}.{key}", payload, headers=headers)
        return ack.seq

    async def put(self, obj: Dict[str, Any], plural: str = "pods", group: str = "", version: str = "v1", ttl: Optional[str] = None) -> str:
        meta = obj["metadata"]
        headers = {
            "Kube-Resource-Version": meta["resourceVersion"],
            "Kube-Uid": meta.get("uid", ""),
            "Kube-Kind": obj.get("kind", ""),
            "Kube-Api-Version": obj.get("apiVersion", ""),
            "Kube-Name": meta["name"],
            "Kube-Event-Type": "ADDED",
        }
        if meta.get("namespace"):
            headers["Kube-Namespace"] = meta["namespace"]
        if ttl:
            headers["Nats-TTL"] = ttl
        key = self.key(obj, plural, group, version)
        await self.publish(key, json.dumps(obj).encode(), headers)
        return key

    async def delete(self, key: str, rv: str = "") -> None:
        headers = {"KV-Operation": "DEL", "Nats-TTL": f"{MARKER_TTL}s"}
        if rv:
            headers["Kube-Resource-Version"] = rv
        await self.publish(key, b"", headers)

    async def purge(self, key: str) -> None:
        await self.publish(key, b"", {"KV-Operation": "PURGE", "Nats-Rollup": "sub", "Nats-TTL": f"{MARKER_TTL}s"})

    async def messages(self) -> int:
        info = await self.nc.jsm().stream_info(f"KV_{self.bucket}")
        return info.state.messages


class Gate:
    """A TCP proxy in front of nats-server whose connections the test cuts (and refuses while
    cut), as a network outage of one client."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.open = True
        self.server: Any = None
        self.port = 0
        self.conns: List[Any] = []

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> "Gate":
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: Any, writer: Any) -> None:
        if not self.open:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        self.conns += [writer, up_writer]

        async def pump(src: Any, dst: Any) -> None:
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def cut(self) -> None:
        self.open = False
        for w in self.conns:
            w.transport.abort()
        self.conns = []

    def restore(self) -> None:
        self.open = True

    async def close(self) -> None:
        self.cut()
        self.server.close()


async def eventually(check, within: float = 15, what: str = "") -> Any:
    """Polls ``check()`` until it returns something true; fails after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what or check}")
        await asyncio.sleep(0.05)


class Recorder:
    """A handler recording ``(type, ns/name, rv)`` lines, and the errors."""

    def __init__(self) -> None:
        self.lines: List[str] = []
        self.errors: List[BaseException] = []

    @staticmethod
    def _id(obj: Any) -> str:
        m = obj["metadata"]
        return f"{m.get('namespace', '')}/{m['name']} {m['resourceVersion']}"

    def on_add(self, obj: Any) -> None:
        self.lines.append(f"ADDED {self._id(obj)}")

    def on_update(self, old: Any, new: Any) -> None:
        self.lines.append(f"MODIFIED {self._id(new)} (was {old['metadata']['resourceVersion']})")

    def on_delete(self, obj: Any) -> None:
        self.lines.append(f"DELETED {self._id(obj)}")

    def on_error(self, exc: BaseException) -> None:
        self.errors.append(exc)


class Process:
    """A program of this kit run as a process, its stdout collected line by line."""

    def __init__(self, args: List[str], env: Optional[Dict[str, str]] = None, stdin: bool = False) -> None:
        import sys
        import threading

        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
            text=True,
            bufsize=1,
        )
        self.lines: List[str] = []
        self.errors: List[str] = []

        def collect(pipe: Any, into: List[str]) -> None:
            for line in pipe:
                into.append(line.rstrip("\n"))

        self.readers = [
            threading.Thread(target=collect, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=collect, args=(self.proc.stderr, self.errors), daemon=True),
        ]
        for r in self.readers:
            r.start()

    def transcript(self) -> str:
        return "--- stdout\n" + "\n".join(self.lines) + "\n--- stderr\n" + "\n".join(self.errors)

    async def wait_for(self, line: str, within: float = 20) -> int:
        try:
            await eventually(lambda: line in self.lines, within=within, what=line)
        except AssertionError:
            raise AssertionError(f"no line {line!r}\n{self.transcript()}") from None
        return self.lines.index(line)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    async def exit_code(self, within: float = 15) -> int:
        deadline = time.monotonic() + within
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"the process did not exit\n{self.transcript()}")
            await asyncio.sleep(0.05)
        for r in self.readers:
            r.join(5)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
