"""Artifacts back through the lanpool protocol, against `scp` from a loopback OpenSSH
server, on this machine, alternating (--pairs N):

1. pull: a job that ended while detached, its artifact (--size-mb, default 1024)
   streamed into the controller's artifact store by `status` (one process: start-up,
   connect, status, pull) vs `scp` of the same file (one process: start-up, connect,
   copy). Both ciphers are aes128-gcm.
2. path: the whole "detached run -> status until DONE -> artifacts download" through
   the CLI, vs that one scp.

Each timed part starts after os.sync(): the GiB the part before it wrote is on disk, not
left in dirty pages that the kernel would make the next writer wait on.

The job only hard-links a file made beforehand into its workspace, so the run's
own work is ~0. Prints figures and ratios (scp time / lanpool time: 1.0 = as fast
as scp), and the CPU seconds each side spent (the scp client; lanpool's controller
and agent): on a loaded machine those say more than the times. No pass/fail exit
code. Needs /usr/sbin/sshd (openssh-server).
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
from bench_stats import BenchError, med, run_bench, say, summary  # noqa: E402

from tests import harness  # noqa: E402

APP = list(harness.venv_app())
CIPHER = "aes128-gcm@openssh.com"


class Sshd:
    """An OpenSSH server on `host` (127.0.0.1) with its own host key and one authorized key;
    `wrap` prefixes its command (bench_lan.in_runner: in a network namespace)."""

    def __init__(self, tmp: Path, host: str = "127.0.0.1", wrap: list[str] | None = None) -> None:
        self.host = host
        self.dir = tmp / "sshd"
        self.dir.mkdir()
        if not Path("/usr/sbin/sshd").exists():
            raise BenchError("no /usr/sbin/sshd: apt-get install openssh-server")
        for name in ("host", "client"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / name)], check=True)
        shutil.copy(self.dir / "client.pub", self.dir / "authorized_keys")
        os.chmod(self.dir / "authorized_keys", 0o600)
        self.port = _free_port()
        config = self.dir / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress {host}\nHostKey {self.dir / 'host'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\nPasswordAuthentication no\n"
            f"StrictModes no\nPidFile {self.dir / 'pid'}\nCiphers {CIPHER}\nUsePAM no\n"
            "Subsystem sftp internal-sftp\n"
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation dir sshd insists on
        self.proc = subprocess.Popen(
            [*(wrap or []), "/usr/sbin/sshd", "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._scp_ok():
                return
            time.sleep(0.2)
        raise BenchError("the loopback sshd did not answer")

    def scp_args(self, remote: Path, local: Path) -> list[str]:
        return [
            "scp",
            "-q",
            "-P",
            str(self.port),
            "-i",
            str(self.dir / "client"),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            f"UserKnownHostsFile={self.dir / 'known_hosts'}",
            "-o",
            f"Ciphers={CIPHER}",
            f"{os.environ.get('USER', 'root')}@{self.host}:{remote}",
            str(local),
        ]

    def _scp_ok(self) -> bool:
        probe = self.dir / "probe"
        probe.write_text("x")
        out = self.dir / "probe.back"
        return subprocess.run(self.scp_args(probe, out), capture_output=True).returncode == 0 and out.exists()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _make_file(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        block = os.urandom(8 << 20)
        left = size
        while left:
            n = min(left, len(block))
            fh.write(block[:n])
            left -= n


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the scp, the `status`)."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _proc_cpu(pid: int) -> float:
    """CPU seconds of a running process (the agent), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _app(args: list[str], project: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([*APP, "headless", *args], cwd=project, env=env, capture_output=True, text=True, check=True)


def _timed(fn) -> float:
    os.sync()  # each starts with no dirty pages of the one before it (a GiB each) left to write back
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _status(project: Path, env: dict, run: str) -> str:
    """`status` (which brings every recent run up to date), then the run's job's status."""
    runs = json.loads(_app(["status", "--json"], project, env).stdout)
    return str(next(r for r in runs if r["run"] == run)["jobs"][0]["status"])


def _run_detached(project: Path, env: dict) -> str:
    out = _app(["run", "big", "-d", "--no-cache", "--json"], project, env).stdout
    return str(json.loads(out.splitlines()[-1])["run"])


def _ended_on_runner(agent_dir: Path, run: str) -> None:
    """Wait until the runner's journal says the run's job ended, without asking it (no pull)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for journal in (agent_dir / "jobs").glob("*/job.json"):
            rec = json.loads(journal.read_text())
            if rec.get("run_name") == run and rec.get("state") in ("DONE", "FAILED") and rec.get("artifact_files"):
                return
        time.sleep(0.05)
    raise BenchError(f"run {run} did not end on the runner")


# The controller's environment for each way of bringing the bytes (see --ways), and its words.
_WAY_ENV = {"direct": {}, "channel": {"LANPOOL_DIRECT_TRANSFERS": "0"}}
_WAY_WORDS = {"direct": "direct TLS connection", "channel": "SSH channel"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-downloads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--ways",
        default="direct,channel",
        help="how the bytes come, compared alternating: direct (a TLS connection of its own, the default), "
        "channel (the SSH channel: LANPOOL_DIRECT_TRANSFERS=0); default direct,channel",
    )
    args = parser.parse_args(argv)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    bad = [w for w in ways if w not in _WAY_ENV]
    if bad or not ways:
        parser.error(f"--ways {args.ways!r}: direct or channel, separated by commas")
    tmp = Path(tempfile.mkdtemp(prefix="lanpool-bench-down-"))
    state: dict = {}

    def work() -> dict:
        env = harness.lanpool_env(tmp / "controller", LANPOOL_DOWNLOADS=str(tmp / "downloads"))
        say("starting a loopback sshd and a lanpool agent…")
        state["sshd"] = sshd = Sshd(tmp)
        # Unsandboxed: the job hard-links the bench's file (outside its workspace) instead of
        # writing 1 GiB each run; a sandboxed job sees no host path but its own (docs/security.md).
        state["agent"] = agent = harness.start_agent(
            tmp / "agent", tmp / "controller", env=env, app=APP, name="bench", extra_args=["--job-sandbox", "off"]
        )
        src = tmp / "src.bin"
        _make_file(src, args.size_mb << 20)
        workflows = (
            f'workflows:\n  - name: big\n    commands: ["mkdir -p out", "ln {src} out/big.bin"]\n    artifacts: [out]\n'
        )
        project = harness.write_project(tmp / "project", workflows)
        _app(["runners", "add", agent.address], project, env)
        scp: list[float] = []
        pull: dict[str, list[float]] = {n: [] for n in ways}
        path: dict[str, list[float]] = {n: [] for n in ways}
        cpu: dict[str, list[float]] = {"scp": []}
        for n in ways:
            cpu[f"controller-{n}"], cpu[f"agent-{n}"] = [], []
        for i in range(args.pairs):
            say(f"pair {i + 1}/{args.pairs}")
            back = tmp / "scp.bin"
            before = _children_cpu()
            scp.append(_timed(lambda back=back: subprocess.run(sshd.scp_args(src, back), check=True)))
            cpu["scp"].append(_children_cpu() - before)
            back.unlink()
            for n in ways:  # alternating with scp and with each other: load hits all alike
                envn = dict(env, **_WAY_ENV[n])
                # pull alone: the job ended while detached; `status` brings it (and its artifact) back
                run = _run_detached(project, envn)
                _ended_on_runner(agent.data_dir, run)
                before, agent_before = _children_cpu(), _proc_cpu(agent.proc.pid)
                pull[n].append(_timed(lambda run=run, envn=envn: _status(project, envn, run)))
                cpu[f"controller-{n}"].append(_children_cpu() - before)
                cpu[f"agent-{n}"].append(_proc_cpu(agent.proc.pid) - agent_before)
                stored = list((tmp / "controller" / "artifacts").glob("*/out/big.bin"))
                if not stored or stored[-1].stat().st_size != src.stat().st_size:
                    raise BenchError("the artifact did not arrive whole")
                # the whole path, as a user would: run -d, status until DONE, download
                os.sync()
                started = time.perf_counter()
                run = _run_detached(project, envn)
                while not _status(project, envn, run).startswith("DONE"):
                    time.sleep(0.05)
                _app(["artifacts", "download", run, "-o", str(tmp / f"dl-{i}-{n}")], project, envn)
                path[n].append(time.perf_counter() - started)
                if (tmp / f"dl-{i}-{n}" / "out" / "big.bin").stat().st_size != src.stat().st_size:
                    raise BenchError("the download is not whole")
                _app(["prune", "--older-than", "0s"], project, env)  # keep the disk in check
                shutil.rmtree(tmp / f"dl-{i}-{n}")
        return {
            "size_mb": args.size_mb,
            "scp_s": summary(scp),
            "scp_mb_s": args.size_mb / med(scp),
            "ways": {
                n: {
                    "pull_s": summary(pull[n]),
                    "path_s": summary(path[n]),
                    "pull_ratio": med(scp) / med(pull[n]),
                    "path_ratio": med(scp) / med(path[n]),
                    "pull_mb_s": args.size_mb / med(pull[n]),
                }
                for n in ways
            },
            "cpu_s": {side: med(v) for side, v in cpu.items()},
            "load": os.getloadavg()[0],
            "cpus": os.cpu_count(),
        }

    def stop() -> None:
        if "agent" in state:
            state["agent"].stop(15)
        if "sshd" in state:
            state["sshd"].stop()
        shutil.rmtree(tmp, ignore_errors=True)

    def report(res: dict, out: TextIO) -> None:
        n = res["size_mb"]
        print(f"artifact of {n} MiB, {res['scp_s']['n']} alternating pairs (medians):", file=out)
        print(f"  scp from a loopback sshd ({CIPHER}): {res['scp_s']['median']:.2f} s", file=out)
        c = res["cpu_s"]
        for n, r in res["ways"].items():
            print(
                f"  {_WAY_WORDS[n]}: pull (`status` of a detached job) {r['pull_s']['median']:.2f} s "
                f"= {r['pull_ratio']:.2f}x scp (target >= 0.8x); run -d -> status -> artifacts download "
                f"{r['path_s']['median']:.2f} s = {r['path_ratio']:.2f}x scp (target >= 0.7x); CPU s of the pull: "
                f"controller {c[f'controller-{n}']:.2f} + agent {c[f'agent-{n}']:.2f}",
                file=out,
            )
        print(
            f"  CPU s: scp client {c['scp']:.2f} (sshd not counted); load average {res['load']:.1f}, "
            f"{res['cpus']} CPUs",
            file=out,
        )

    from bench_results import pick, picked, recording, row  # docs/bench/NAME.json -> docs/benchmarks.md

    def rows_of(r: dict) -> list[dict]:
        """A row per figure and way (results nest them under "ways"); the targets are the
        default way's (direct), the others are there to compare."""
        out = []
        for n in ways:
            at = f"ways.{n}"
            words = _WAY_WORDS[n]
            out += [
                picked(
                    r,
                    f"{args.size_mb} MiB artifact back, pull alone, {words}, vs scp from a loopback sshd (median)",
                    f"{at}.pull_s.median",
                    "scp_s.median",
                    target=">= 0.8" if n == "direct" else "",
                    unit="s",
                    ratio=f"{at}.pull_ratio",
                ),
                picked(
                    r,
                    f"`run -d` -> `status` -> `artifacts download`, {words}, vs the same scp",
                    f"{at}.path_s.median",
                    "scp_s.median",
                    target=">= 0.7" if n == "direct" else "",
                    unit="s",
                    ratio=f"{at}.path_ratio",
                ),
                row(
                    f"CPU s of the pull, {words}: controller + agent, vs the scp client",
                    f"{pick(r, f'cpu_s.controller-{n}') or 0:.2f} + {pick(r, f'cpu_s.agent-{n}') or 0:.2f}",
                    pick(r, "cpu_s.scp"),
                ),
            ]
        return out

    work = recording("bench-downloads", work, rows_of)
    return run_bench("scripts/bench-downloads", work, stop, report, args.json)


if __name__ == "__main__":
    sys.exit(main())
