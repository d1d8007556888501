"""Into a running job: exec, a shell on a PTY, forwarded ports. Real agents, real asyncssh
clients and the real `app` CLI; each door is tried from where it must stay shut too
(a pairing connection, a job that ended, an undeclared port, a plain exec).
The part with Docker, Slurm or namespaces (system); the rest: tests/unit/test_job_shell.py, tests/integration/test_job_shell.py."""

import asyncio

from lanpool.protocol.wire import exec_command
from tests.integration.test_job_shell import (
    _connect,
    _exec,
    _wait_running,
    agent,  # noqa: F401 (fixtures, used by name)
)
from tests.system.test_docker_executor import _stop, submit


def test_exec_and_a_pty_shell_in_a_container_job(docker_agent, busybox_image):
    submit(docker_agent, "boxed", ["echo ready", "sleep 60"], busybox_image, env={"MY_VAR": "in-box"})
    _wait_running(docker_agent, "boxed")
    done = asyncio.run(_exec(docker_agent, "boxed", ["sh", "-c", "echo $MY_VAR; echo oops >&2; exit 6"]))
    assert (done.exit_status, done.stdout, done.stderr) == (6, "in-box\n", "oops\n")

    async def shell() -> tuple[str, int | None]:
        async with _connect(docker_agent) as conn:
            proc = await conn.create_process(exec_command("boxed", []), term_type="xterm", term_size=(90, 20))
            proc.stdin.write("echo box-$((40+2)); exit 3\n")
            seen = ""
            while "box-42" not in seen:
                seen += await asyncio.wait_for(proc.stdout.read(4096), 20)
            await asyncio.wait_for(proc.wait_closed(), 20)
            return seen, proc.exit_status

    seen, code = asyncio.run(shell())
    assert code == 3 and "box-42" in seen
    asyncio.run(_stop(docker_agent, "boxed", abort=True, grace_s=0))
