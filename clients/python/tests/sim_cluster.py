"""The harness' ``sim-cluster`` (tests/harness/src/bin/sim_cluster.rs) driven from Python: the
simulated API server, a real nats-server and the real kube2nats mirroring every namespace's pods
into bucket ``kube-objects`` (delete markers of 1 s), with a TCP gate in front of NATS for
subscribers. Used by the end-to-end tests and by bench/measure.py; needs nothing but the
standard library."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

REPO = Path(__file__).resolve().parents[3]
BUILD_HINT = "build it: cargo build -p kube2nats-harness --bin sim-cluster && cargo build"

#: How long the stores may take to equal the API server after the last change.
SETTLE = 30.0


class Missing(RuntimeError):
    """sim-cluster, kube2nats or nats-server is not there (the message says what to do)."""


def terminate(proc: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM, then SIGKILL if ``proc`` has not exited within ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def sim_cluster_bin() -> str:
    """``K2N_SIM_CLUSTER``, else ``<repo>/target/debug/sim-cluster``, with kube2nats beside it."""
    path = os.environ.get("K2N_SIM_CLUSTER") or str(REPO / "target" / "debug" / "sim-cluster")
    if not os.path.isfile(path):
        raise Missing(f"no sim-cluster at {path} (or set K2N_SIM_CLUSTER): {BUILD_HINT}")
    daemon = os.path.join(os.path.dirname(path), "kube2nats")
    if not os.path.isfile(daemon):
        raise Missing(f"no kube2nats beside sim-cluster ({daemon}): {BUILD_HINT}")
    return path


def nats_server_bin() -> str:
    """``NATS_SERVER_BIN``, else ``nats-server`` on PATH."""
    path = os.environ.get("NATS_SERVER_BIN") or shutil.which("nats-server")
    if not path:
        raise Missing(
            "no nats-server: set NATS_SERVER_BIN or put nats-server on PATH "
            "(run scripts/install-test-tools nats-server and export the line it prints)"
        )
    return path


class SimCluster:
    """A running sim-cluster. ``info`` is its first line, ``{api_url, api_token, nats_url,
    bucket}``, printed once the bucket equals the API server; ``pods`` more pods of a production
    size in namespace ``bench`` (for measurements)."""

    def __init__(self, pods: int = 0) -> None:
        path = sim_cluster_bin()
        env = {**os.environ, "NATS_SERVER_BIN": nats_server_bin()}
        args = [path, "--pods", str(pods)] if pods > 0 else [path]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1, env=env
        )
        try:
            self.info: Dict[str, str] = self._read()
        except BaseException:
            self.close()
            raise

    def _read(self) -> Dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"sim-cluster ended ({self.proc.wait()}):\n{self.stderr()}")
        return json.loads(line)

    def stderr(self, last: int = 3000) -> str:
        """The end of what sim-cluster (and kube2nats in it) logged."""
        self.log.seek(0)
        return self.log.read()[-last:]

    def command(self, line: str) -> Dict[str, Any]:
        """One command and its answer (blocking); an ``{"error"}`` answer raises."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise RuntimeError(f"sim-cluster {line!r}: {answer['error']}")
        return answer

    async def run(self, line: str) -> Dict[str, Any]:
        """A command, answered off the event loop (the informers run on it)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.command, line)

    async def pods(self) -> Dict[str, str]:
        """The API server's pods: ``{"ns/name": rv}``."""
        return (await self.run("pods"))["pods"]

    async def line(self, command: str) -> str:
        """``create``/``update``/``delete``: the line a handler prints for the change."""
        return (await self.run(command))["line"]

    def close(self) -> None:
        """Stops it all (end of input: sim-cluster stops kube2nats and nats-server)."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                terminate(self.proc)
        self.log.close()


async def stores_equal_pods(
    cluster: SimCluster,
    stores: Callable[[], Dict[str, Optional[Dict[str, str]]]],
    when: str,
    transcript: Callable[[], str] = lambda: "",
) -> None:
    """Waits until every store of ``stores()`` (``{side: {"ns/name": rv}}``, ``None`` while that
    side has not synced) equals the API server's pods; fails after SETTLE seconds."""
    deadline = time.monotonic() + SETTLE
    while True:
        want = await cluster.pods()
        have = stores()
        if all(store == want for store in have.values()):
            return
        if time.monotonic() > deadline:
            lines: List[str] = [f"{when}: the stores differ from the API server after {SETTLE:.0f}s", f"api    {want}"]
            lines += [f"{side:<6} {store}" for side, store in have.items()]
            raise AssertionError("\n".join(lines) + "\n" + transcript())
        await asyncio.sleep(0.2)
