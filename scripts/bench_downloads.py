"""Artifacts back through the lanpool protocol, against `scp` from a loopback OpenSSH
server, on this machine, alternating (--pairs N):

1. pull: a job that ended while detached, its artifact (--size-mb, default 1024)
   streamed into the controller's artifact store by `status` (one process: start-up,
   connect, status, pull) vs `scp` of the same file (one process: start-up, connect,
   copy). Both ciphers are aes128-gcm.
2. path: the whole "detached run -> status until DONE -> artifacts download" through
   the CLI, vs that one scp.

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
    """An OpenSSH server on 127.0.0.1 with its own host key and one authorized key."""

    def __init__(self, tmp: Path) -> None:
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
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.dir / 'host'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\nPasswordAuthentication no\n"
            f"StrictModes no\nPidFile {self.dir / 'pid'}\nCiphers {CIPHER}\nUsePAM no\n"
            "Subsystem sftp internal-sftp\n"
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation dir sshd insists on
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
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
            f"{os.environ.get('USER', 'root')}@127.0.0.1:{remote}",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-downloads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="lanpool-bench-down-"))
    state: dict = {}

    def work() -> dict:
        env = harness.lanpool_env(tmp / "controller", LANPOOL_DOWNLOADS=str(tmp / "downloads"))
        say("starting a loopback sshd and a lanpool agent…")
        state["sshd"] = sshd = Sshd(tmp)
        state["agent"] = agent = harness.start_agent(tmp / "agent", tmp / "controller", env=env, app=APP, name="bench")
        src = tmp / "src.bin"
        _make_file(src, args.size_mb << 20)
        workflows = (
            f'workflows:\n  - name: big\n    commands: ["mkdir -p out", "ln {src} out/big.bin"]\n    artifacts: [out]\n'
        )
        project = harness.write_project(tmp / "project", workflows)
        _app(["runners", "add", agent.address], project, env)
        pull, path, scp = [], [], []
        cpu: dict[str, list[float]] = {"scp": [], "controller": [], "agent": []}
        for i in range(args.pairs):
            say(f"pair {i + 1}/{args.pairs}")
            back = tmp / "scp.bin"
            before = _children_cpu()
            scp.append(_timed(lambda back=back: subprocess.run(sshd.scp_args(src, back), check=True)))
            cpu["scp"].append(_children_cpu() - before)
            back.unlink()
            # pull alone: the job ended while detached; `status` brings it (and its artifact) back
            run = _run_detached(project, env)
            _ended_on_runner(agent.data_dir, run)
            before, agent_before = _children_cpu(), _proc_cpu(agent.proc.pid)
            pull.append(_timed(lambda run=run: _status(project, env, run)))
            cpu["controller"].append(_children_cpu() - before)
            cpu["agent"].append(_proc_cpu(agent.proc.pid) - agent_before)
            stored = list((tmp / "controller" / "artifacts").glob("*/out/big.bin"))
            if not stored or stored[-1].stat().st_size != src.stat().st_size:
                raise BenchError("the artifact did not arrive whole")
            # the whole path, as a user would: run -d, status until DONE, download
            started = time.perf_counter()
            run = _run_detached(project, env)
            while not _status(project, env, run).startswith("DONE"):
                time.sleep(0.05)
            _app(["artifacts", "download", run, "-o", str(tmp / f"dl-{i}")], project, env)
            path.append(time.perf_counter() - started)
            if (tmp / f"dl-{i}" / "out" / "big.bin").stat().st_size != src.stat().st_size:
                raise BenchError("the download is not whole")
            _app(["prune", "--older-than", "0s"], project, env)  # keep the disk in check
        return {
            "size_mb": args.size_mb,
            "scp_s": summary(scp),
            "pull_s": summary(pull),
            "path_s": summary(path),
            "pull_ratio": med(scp) / med(pull),
            "path_ratio": med(scp) / med(path),
            "pull_mb_s": args.size_mb / med(pull),
            "scp_mb_s": args.size_mb / med(scp),
            "cpu_s": {side: med(v) for side, v in cpu.items()},
            "load": os.getloadavg()[0],
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
        print(
            f"  lanpool pull (`status` of a detached job): {res['pull_s']['median']:.2f} s "
            f"= {res['pull_ratio']:.2f}x scp (target >= 0.8x)",
            file=out,
        )
        print(
            f"  run -d -> status -> artifacts download: {res['path_s']['median']:.2f} s "
            f"= {res['path_ratio']:.2f}x scp (target >= 0.7x)",
            file=out,
        )
        c = res["cpu_s"]
        print(
            f"  CPU s: scp client {c['scp']:.2f} (sshd not counted); lanpool pull: controller "
            f"{c['controller']:.2f} + agent {c['agent']:.2f}; load average {res['load']:.1f}",
            file=out,
        )

    from bench_results import pick, recording, row  # docs/bench/NAME.json -> docs/benchmarks.md (scripts/bench-report)

    work = recording(
        "bench-downloads",
        work,
        lambda r: [
            row(
                f"{args.size_mb} MiB artifact back, pull alone, vs scp from a loopback sshd (median)",
                pick(r, "pull_s.median"),
                pick(r, "scp_s.median"),
                target=">= 0.8",
                unit="s",
                ratio=pick(r, "pull_ratio"),
            ),  # type: ignore[arg-type]
            row(
                "`run -d` -> `status` -> `artifacts download`, vs the same scp",
                pick(r, "path_s.median"),
                pick(r, "scp_s.median"),
                target=">= 0.7",
                unit="s",
                ratio=pick(r, "path_ratio"),
            ),  # type: ignore[arg-type]
        ],
    )
    return run_bench("scripts/bench-downloads", work, stop, report, args.json)


if __name__ == "__main__":
    sys.exit(main())
