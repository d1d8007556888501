"""A job's shell through the runner's one-time sshd (agent/shell/sshd.py, app/shell/sshd.py): the
real client on a terminal, then the offer tried by hand from where it must stay shut (another
key, a forwarding, a stranger's connection, a malformed key in the request) and the session's
command script against hostile values.
The part with Docker, Slurm or namespaces (system); the rest: tests/unit/test_shell_sshd.py, tests/integration/test_shell_sshd.py."""

import asyncio
import shutil

import pytest

from tests.integration.test_shell_sshd import _on_the_channel
from tests.integration.test_shell_terminal import _shell
from tests.system.test_docker_executor import _stop, submit, wait_for_line

pytestmark = pytest.mark.skipif(
    shutil.which("sshd", path="/usr/sbin:/usr/local/sbin:/sbin") is None or shutil.which("ssh") is None,
    reason="needs OpenSSH's sshd and ssh (apt-get install openssh-server openssh-client; scripts/test does)",
)


def test_a_container_jobs_shell_is_not_offered_an_sshd_and_goes_on_the_channel(docker_agent, busybox_image):
    submit(docker_agent, "cbox", ["echo ready", "sleep 120"], busybox_image)
    wait_for_line(docker_agent, "cbox", "ready")
    code, out = _shell(docker_agent, "cbox", "echo in-box; exit 5")
    assert (code, b"in-box" in out) == (5, True)
    log = docker_agent.log_path.read_text()
    assert "not offered (a container job" in log and _on_the_channel("cbox", 5) in log
    asyncio.run(_stop(docker_agent, "cbox", abort=True, grace_s=0))
