"""`ide: jupyter` (#38): a dev environment that serves a real JupyterLab (installed by the runner
from the job's requirements, from the machine's package index), forwarded by `app headless dev`,
which prints its URL with its token. JupyterLab runs in the job: its files are the job's
workspace. The doors that stay shut: no token or a wrong one is refused by JupyterLab; the token is
never in the job's log nor in what `status` shows of its environment; JupyterLab listens on the
runner's loopback only, at a port declared for the job (so only its owner's forwards reach it:
tests/integration/test_port_forward.py). The failure path and the idle rule: tests/integration/test_dev_env.py."""

import json
import signal
import subprocess
import urllib.error
import urllib.request

from tests.integration.test_daily_use import _read_until
from tests.integration.test_dev_env import runner  # noqa: F401 (the fixture: an agent, added)

NOTEBOOK = """
workflows:
  - name: nb
    ide: jupyter
    requirements: requirements.txt
    commands: ["echo setting up in $PWD"]
"""


def _get(url: str, token: str | None = None, data: bytes | None = None, method: str = "GET") -> tuple[int, bytes]:
    headers = {"Authorization": f"token {token}"} if token is not None else {}
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_ide_jupyter_serves_jupyterlab_in_the_job_with_its_token_forwarded(runner, cli, make_project):
    project = make_project(NOTEBOOK, files={"requirements.txt": "jupyterlab\n"})
    dev = cli.popen("headless", "dev", "nb", cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Installing JupyterLab (~30 packages from the local index) is most of the wait.
        said = _read_until(dev.stdout, "jupyter: http://", timeout=600)
        url = said.rsplit("jupyter: ", 1)[1].strip()
        base, _, token = url.partition("/lab?token=")
        run = said.split("dev environment ready: run ", 1)[1].split()[0]
        assert base.startswith("http://127.0.0.1:") and len(token) >= 32, said
        status, body = _get(f"{base}/api/status", token)
        assert status == 200 and "started" in json.loads(body), body
        assert _get(f"{base}/api/status")[0] == 403  # no token
        assert _get(f"{base}/api/status", token[:-1] + ("x" if token[-1] != "x" else "y"))[0] == 403
        # It serves the job's workspace: a file written through it is there for the job.
        note = json.dumps({"type": "file", "format": "text", "content": "written through jupyter"}).encode()
        assert _get(f"{base}/api/contents/hello.txt", token, note, "PUT")[0] in (200, 201)
        inside = cli("headless", "exec", run, "--", "sh", "-c", "cat hello.txt; echo; python -c 'import jupyterlab'")
        assert inside.returncode == 0 and "written through jupyter" in inside.stdout, inside.stderr
        # Its kernel is the job's own interpreter (kernelspecs name python3, which runs the server's).
        status, body = _get(f"{base}/api/kernelspecs", token)
        assert status == 200 and "python3" in json.loads(body)["kernelspecs"], body
        # It listens on the runner's loopback alone, at the port the job's log names.
        logs = cli("headless", "logs", run, check=True).stdout
        port = int(logs.split("lanpool: jupyter listens on port ", 1)[1].split()[0])
        listening = cli("headless", "exec", run, "--", "cat", "/proc/net/tcp", check=True).stdout
        bound = {row.split()[1] for row in listening.splitlines()[1:] if row.split()[3] == "0A"}
        assert f"0100007F:{port:04X}" in bound and f"00000000:{port:04X}" not in bound, (port, bound)
        # The token reaches the job only: not its log, not what status shows of its environment.
        shown = cli("headless", "status", run, "--json", check=True).stdout + cli("headless", "logs", run).stdout
        assert token not in shown and "LANPOOL_JUPYTER_TOKEN" in shown
        # Ctrl-C ends the forward, not the environment; `ports` forwards it again with the same token.
        dev.send_signal(signal.SIGINT)
        dev.wait(60)
        assert json.loads(cli("headless", "status", run, "--json", check=True).stdout)["jobs"][0]["status"] == "RUNNING"
        again = cli.popen("headless", "ports", run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            url2 = _read_until(again.stdout, "jupyter: http://").rsplit("jupyter: ", 1)[1].strip()
            assert url2.endswith(f"/lab?token={token}")
            assert _get(f"{url2.partition('/lab?')[0]}/api/status", token)[0] == 200
        finally:
            again.kill()
            again.wait(30)
        cli("headless", "stop", run, check=True)
    finally:
        dev.kill()
        dev.wait(30)
