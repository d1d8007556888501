"""Pulling images: a real dockerd pulls from a registry served here on loopback.

No public registry is reachable, so the test runs the smallest registry that
dockerd accepts (the Docker Registry HTTP API V2, read-only: one image,
lanpool/busybox, served over plain HTTP, which dockerd allows for 127.0.0.0/8), plus one that never
answers, to stop a job while its image is still being pulled.
"""

import asyncio
import gzip
import hashlib
import json
import secrets
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import lanpool.agent.jobs.manager as manager_module
from lanpool.agent.executors import ExecutorChoice, ProcessExecutor
from lanpool.agent.executors.docker import DockerExecutor
from lanpool.agent.home import AgentHome
from lanpool.agent.jobs.manager import JobManager
from lanpool.protocol import JobState, SubmitJob
from tests.docker_harness import busybox_rootfs_tar, remove_agent_containers
from tests.system.test_docker_executor import _lines, follow, submit

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _Registry(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RegistryHandler)
        # A file of its own makes a layer that the engine does not have yet, so it is downloaded.
        rootfs = busybox_rootfs_tar({"etc/lanpool-registry": secrets.token_hex(16).encode()})
        layer = gzip.compress(rootfs, mtime=0)
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {},
                "rootfs": {"type": "layers", "diff_ids": [_digest(rootfs)]},
                "history": [{"created_by": "lanpool tests"}],
            }
        ).encode()
        self.manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "size": len(config),
                    "digest": _digest(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                        "size": len(layer),
                        "digest": _digest(layer),
                    }
                ],
            }
        ).encode()
        self.blobs = {_digest(config): config, _digest(layer): layer}
        self.release = threading.Event()  # frees requests held by the "hang/" repository
        self.manifest_requests = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _RegistryHandler(BaseHTTPRequestHandler):
    server: _Registry

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        path = self.path.split("?")[0]
        if path == "/v2/":
            return self._send(200, b"{}", "application/json", body)
        if path.startswith("/v2/hang/"):
            self.server.release.wait(60)  # a registry that never answers
            return self._send(503, b"{}", "application/json", body)
        if path.startswith("/v2/lanpool/busybox/manifests/"):
            self.server.manifest_requests += 1
            return self._send(200, self.server.manifest, MANIFEST_TYPE, body, _digest(self.server.manifest))
        if "/blobs/" in path:
            blob = self.server.blobs.get(path.rsplit("/", 1)[1])
            if blob is not None:
                return self._send(200, blob, "application/octet-stream", body, _digest(blob))
        self._send(404, b'{"errors":[{"code":"NOT_FOUND","message":"not here"}]}', "application/json", body)

    def _send(self, code: int, data: bytes, ctype: str, body: bool, digest: str = "") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        if digest:
            self.send_header("Docker-Content-Digest", digest)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def registry(docker_client):
    server = _Registry()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    for image in docker_client.images.list():
        for tag in image.tags:
            if tag.startswith(server.address + "/"):
                docker_client.images.remove(tag, force=True)


def test_pull_missing_then_never_again_and_always(docker_agent, registry):
    image = f"{registry.address}/lanpool/busybox:1"
    submit(docker_agent, "pull1", ["echo pulled and ran"], image)  # pull: missing
    chunks, final = follow(docker_agent, "pull1")
    assert final.state == JobState.DONE, chunks
    assert _lines(chunks, "out") == ["pulled and ran"]
    sys_lines = _lines(chunks, "sys")
    assert sys_lines[0] == f"lanpool: pulling image {image}"
    assert any(line.endswith(": Pull complete") for line in sys_lines), sys_lines
    assert sys_lines[-1] == f"lanpool: pulled image {image}"

    asked = registry.manifest_requests
    submit(docker_agent, "pull2", ["echo present"], image)  # pull: missing, and it is there now
    chunks, final = follow(docker_agent, "pull2")
    assert final.state == JobState.DONE and _lines(chunks, "sys") == [] and registry.manifest_requests == asked

    submit(docker_agent, "pull3", ["echo again"], image, pull="always")
    chunks, final = follow(docker_agent, "pull3")
    assert final.state == JobState.DONE and _lines(chunks, "sys")[0] == f"lanpool: pulling image {image}"
    assert registry.manifest_requests > asked


def test_image_the_registry_does_not_have(docker_agent, registry):
    image = f"{registry.address}/nothing/here:1"
    submit(docker_agent, "nope1", ["echo never"], image)
    _chunks, final = follow(docker_agent, "nope1")
    assert final.state == JobState.FAILED
    assert final.error.startswith(f"image '{image}' not found locally and could not be pulled: "), final.error


def test_stop_while_the_image_is_being_pulled(registry, docker_client, monkeypatch):
    """In-process JobManager with the real DockerExecutor: the submit's wait for
    the start is cut short here, so that the job is still pulling when stopped."""
    monkeypatch.setattr(manager_module, "START_WAIT_S", 0.5)
    image = f"{registry.address}/hang/busybox:1"

    async def scenario(root: Path):
        home = AgentHome(root)
        home.create()
        manager = JobManager(home, ExecutorChoice("docker", ProcessExecutor(), DockerExecutor.connect(str(root))))
        await manager.load_journal()
        job = await manager.submit(
            SubmitJob(
                job_id="slow1", run_name="r", workflow="w", commands=["echo never"], image=image, artifacts=["out"]
            ),
            None,
        )
        assert job.record.state == JobState.SUBMITTED
        manager.stop("slow1", abort=False, grace_s=5, owner=None)
        await asyncio.wait_for(manager.wait_terminal(job), 10)
        return job

    with tempfile.TemporaryDirectory() as tmp:
        job = asyncio.run(scenario(Path(tmp)))
        try:
            assert job.record.state == JobState.STOPPED and job.record.exit_code is None
            assert job.record.error == "stopped before the job started"
            assert job.record.artifact_files == []
            lines = [r.data.decode() for r in job.spool.read(0)]
            assert lines[0].startswith(f"lanpool: pulling image {image}")
            assert "lanpool: stop requested before the job started" in "".join(lines)
            assert docker_client.containers.list(all=True, filters={"label": "lanpool.job=slow1"}) == []
        finally:
            remove_agent_containers(docker_client, Path(tmp))
