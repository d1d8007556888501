"""A container job as a dev environment (#38): `app headless dev` of a workflow with an image, then
the real `ssh`, `scp` (sftp), `rsync` and `-W` through `app headless ssh-config`'s entry. Every
session is a `docker exec` into the job's container (agent/shell/dev_sshd.py,
dev_container_script): in its filesystem, as its user, in /workspace. The doors that stay shut:
a forward to a port the job did not declare (another controller's key is refused before a
job's kind matters: tests/integration/test_dev_ssh.py).
The same for process jobs: tests/integration/test_dev_ssh.py."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.docker_harness import busybox_rootfs_tar, host_program_files
from tests.harness import lanpool_env
from tests.integration.test_job_shell import _free_port

SSH_IMAGE = "lanpool-test/busybox-ssh:1"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"

pytestmark = pytest.mark.skipif(
    shutil.which("sshd", path="/usr/sbin:/usr/local/sbin:/sbin") is None
    or shutil.which("ssh") is None
    or shutil.which("rsync") is None
    or shutil.which("docker") is None
    or not Path(SFTP_SERVER).exists(),
    reason="needs OpenSSH (sshd, ssh, sftp-server), rsync and the docker CLI (scripts/test installs them)",
)


@pytest.fixture
def ssh_image(docker_client) -> str:
    """busybox with this machine's sftp-server and rsync (and their libraries): an image where
    sftp and rsync have their server side, as a user's image would."""
    import docker.errors

    try:
        docker_client.images.get(SSH_IMAGE)
    except docker.errors.ImageNotFound:
        repo, _, tag = SSH_IMAGE.partition(":")
        rootfs = busybox_rootfs_tar(programs=host_program_files([SFTP_SERVER, shutil.which("rsync") or ""]))
        docker_client.api.import_image_from_data(rootfs, repository=repo, tag=tag)
    return SSH_IMAGE


def _ssh(config: Path, env: dict, *argv: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ssh", "-F", str(config), "-o", "BatchMode=yes", *argv],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=timeout,
    )


def test_a_container_job_is_a_dev_environment_for_ssh_sftp_rsync_and_its_port(
    docker_agent, ssh_image, cli, make_project, controller_home, tmp_path
):
    cli("headless", "runners", "add", docker_agent.address, check=True)
    port = _free_port()
    project = make_project(
        f"""
        workflows:
          - name: box
            dev: true
            image: {ssh_image}
            ports: [{port}]
            commands:
              - mkdir -p /tmp/www && echo served-from-the-box > /tmp/www/index.html
              - httpd -p 127.0.0.1:{port} -h /tmp/www
        """
    )
    res = cli("headless", "dev", "box", "--runner", docker_agent.address, "--json", cwd=project, check=True)
    ready = json.loads(res.stdout.strip().splitlines()[-1])
    assert ready["workdir"] == "/workspace", ready
    host = ready["host"]
    try:
        cli("headless", "ssh-config", "--no-control-master", check=True)
        config, env = controller_home / "ssh" / "config", lanpool_env(controller_home)

        # In the container: its stdio mount, none of the host's Debian, /workspace, the job's env.
        got = _ssh(
            config, env, host, 'test -d /.lanpool-stdio && test ! -e /etc/debian_version && pwd; echo "$LANPOOL_JOB_ID"'
        )
        assert got.returncode == 0, got.stderr
        assert got.stdout.decode().split() == ["/workspace", ready["job_id"]]
        assert _ssh(config, env, host, "exit 7").returncode == 7
        # A shell with no command (stdin, no terminal), and one on a terminal.
        assert _ssh(config, env, host, stdin=b"echo $((6*7))\n").stdout.decode().split() == ["42"]
        on_tty = _ssh(config, env, "-tt", host, "test -t 0 && echo has-a-tty")
        assert "has-a-tty" in on_tty.stdout.decode(), on_tty

        # scp (sftp: the image's sftp-server, run in the container) and rsync of a directory.
        src = tmp_path / "data"
        (src / "sub").mkdir(parents=True)
        (src / "a.bin").write_bytes(bytes(range(256)) * 4096)
        (src / "sub" / "b.txt").write_text("b\n" * 1000)
        scp = ["scp", "-F", str(config), "-o", "BatchMode=yes"]
        done = subprocess.run([*scp, str(src / "a.bin"), f"{host}:by-sftp.bin"], capture_output=True, env=env)
        assert done.returncode == 0, done.stderr
        rsh = f"ssh -F {config} -o BatchMode=yes"
        done = subprocess.run(["rsync", "-a", "-e", rsh, f"{src}/", f"{host}:synced/"], capture_output=True, env=env)
        assert done.returncode == 0, done.stderr
        there = _ssh(config, env, host, "cmp by-sftp.bin synced/a.bin && wc -l < synced/sub/b.txt && ls /workspace")
        assert there.returncode == 0, there.stderr
        lines = there.stdout.decode().split()
        assert lines[0] == "1000" and "by-sftp.bin" in lines and "synced" in lines
        # What reached /workspace is in the job's workspace on the runner (the bind mount).
        assert any((docker_agent.data_dir / "jobs").glob("*/workspace/synced/sub/b.txt"))

        # -W to the job's declared port reaches its server; to the agent's own port it is refused.
        request = b"GET /index.html HTTP/1.0\r\n\r\n"
        page = _ssh(config, env, "-W", f"127.0.0.1:{port}", host, stdin=request)
        assert b"served-from-the-box" in page.stdout, page
        refused = _ssh(config, env, "-W", f"127.0.0.1:{docker_agent.port}", host, stdin=request)
        assert refused.returncode != 0 and b"SSH-2.0" not in refused.stdout

    finally:
        cli("headless", "stop", ready["run"], "--abort")
