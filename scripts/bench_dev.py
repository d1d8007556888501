"""A dev environment over OpenSSH (`app headless dev`, `ssh-config`), against plain OpenSSH to
a loopback sshd in the same run (bench_downloads.Sshd; both on aes128-gcm), alternating:

1. `ssh HOST true`: cold (a ProxyCommand each time: app/shell/ssh_hop.py, the system ssh to the
   agent for the offer, a dev sshd) and warm (the entry's ControlMaster is up), vs `ssh` to the sshd;
   and cold with a terminal (`-tt`, as a prompt has), vs the same to the sshd.
2. `rsync -a` of a directory (--files files of 1 MiB, default 100) into the job, vs into a
   directory through the loopback sshd; the target emptied before each.

Medians of --repeat (default 9 for ssh, 3 for rsync). Needs /usr/sbin/sshd and rsync.
    scripts/bench-dev [--record] [--files N] [--repeat N]"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
from bench_downloads import CIPHER, Sshd  # noqa: E402
from bench_stats import med  # noqa: E402

from tests import harness  # noqa: E402

DEV = """
workflows:
  - name: box
    dev: true
    idle: off
    commands: ["true"]
"""


def _timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lanpool-bench-dev-") as tmp_dir:
        tmp = Path(tmp_dir)
        home = tmp / "controller"
        env = harness.lanpool_env(home)
        app = [*harness.venv_app()]
        agent = harness.start_agent(tmp / "agent", home, verbose=False)
        sshd = Sshd(tmp)
        try:
            subprocess.run(
                [*app, "headless", "runners", "add", agent.address], env=env, check=True, capture_output=True
            )
            project = harness.write_project(tmp / "project", DEV)
            dev = subprocess.run(
                [*app, "headless", "dev", "--json"], cwd=project, env=env, check=True, capture_output=True, text=True
            )
            run = json.loads(dev.stdout)["run"]
            host = f"lanpool-{run}"
            config = home / "ssh" / "config"
            subprocess.run(
                [*app, "headless", "ssh-config", "--no-control-master"], env=env, check=True, capture_output=True
            )
            cold_config = tmp / "cold-config"
            shutil.copy(config, cold_config)
            subprocess.run([*app, "headless", "ssh-config"], env=env, check=True, capture_output=True)
            lanpool_ssh = ["ssh", "-o", f"Ciphers={CIPHER}"]
            plain_ssh = [
                "ssh",
                "-p",
                str(sshd.port),
                "-i",
                str(sshd.dir / "client"),
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                f"UserKnownHostsFile={sshd.dir / 'known_hosts'}",
                "-o",
                f"Ciphers={CIPHER}",
            ]
            target = f"{os.environ.get('USER', 'root')}@127.0.0.1"
            subprocess.run(
                [*lanpool_ssh, "-F", str(config), host, "true"], check=True, capture_output=True
            )  # master up
            cold, warm, plain, cold_tty, plain_tty = [], [], [], [], []
            for _ in range(args.repeat):  # alternated: the machine's load weighs on all alike
                cold.append(_timed([*lanpool_ssh, "-F", str(cold_config), host, "true"]))
                warm.append(_timed([*lanpool_ssh, "-F", str(config), host, "true"]))
                plain.append(_timed([*plain_ssh, target, "true"]))
                # With a terminal (what a prompt needs: ssh turns Nagle off itself then).
                cold_tty.append(_timed([*lanpool_ssh, "-tt", "-F", str(cold_config), host, "true"]))
                plain_tty.append(_timed([*plain_ssh, "-tt", target, "true"]))
            print(
                f"ssh HOST true: cold {med(cold) * 1000:.0f} ms, warm {med(warm) * 1000:.0f} ms; "
                f"plain OpenSSH {med(plain) * 1000:.0f} ms (median of {args.repeat}); with a terminal (-tt): "
                f"cold {med(cold_tty) * 1000:.0f} ms, plain {med(plain_tty) * 1000:.0f} ms"
            )
            data = tmp / "data"
            data.mkdir()
            for k in range(args.files):
                (data / f"f{k:04d}").write_bytes(os.urandom(1 << 20))
            into = tmp / "plain-copy"
            rsync_dev, rsync_cold, rsync_plain = [], [], []

            def into_job(ssh_config: Path) -> float:
                subprocess.run([*lanpool_ssh, "-F", str(config), host, "rm -rf copy"], check=True, capture_output=True)
                os.sync()
                shell = f"ssh -F {ssh_config} -o Ciphers={CIPHER}"
                return _timed(["rsync", "-a", "-e", shell, f"{data}/", f"{host}:copy/"])

            for _ in range(max(3, args.repeat // 3)):
                rsync_dev.append(into_job(config))  # the entry's connection up (ControlMaster)
                rsync_cold.append(into_job(cold_config))  # a proxy and a dev sshd for this rsync
                shutil.rmtree(into, ignore_errors=True)
                os.sync()
                rsync_plain.append(_timed(["rsync", "-a", "-e", " ".join(plain_ssh), f"{data}/", f"{target}:{into}/"]))
            mb = args.files
            print(
                f"rsync -a of {mb} MiB: into the dev environment {med(rsync_dev):.2f} s warm, {med(rsync_cold):.2f} s "
                f"cold; plain OpenSSH {med(rsync_plain):.2f} s (median of {len(rsync_dev)})"
            )
        finally:
            sshd.stop()
            subprocess.run([*app, "headless", "stop", "--all", "--yes", "--grace", "0"], env=env, capture_output=True)
            agent.stop()

    from bench_results import record, row

    record(
        "bench-dev",
        [
            row(
                "`ssh HOST true`, warm (ControlMaster), vs plain OpenSSH",
                round(med(warm) * 1000),
                round(med(plain) * 1000),
                target="<= 1.2x",
                unit="ms",
            ),
            row(
                "`ssh HOST true`, cold (a proxy each time), vs plain OpenSSH",
                round(med(cold) * 1000),
                round(med(plain) * 1000),
                target="<= 1.2x",
                unit="ms",
            ),
            row(
                "`ssh -tt HOST true` (a terminal, as for a prompt), cold, vs plain OpenSSH",
                round(med(cold_tty) * 1000),
                round(med(plain_tty) * 1000),
                target="<= 1.2x",
                unit="ms",
            ),
            row(
                f"`rsync -a` of {mb} MiB into the job, cold (a proxy), vs plain OpenSSH",
                round(med(rsync_cold), 2),
                round(med(rsync_plain), 2),
                target="<= 1.2x",
                unit="s",
            ),
            row(
                f"`rsync -a` of {mb} MiB into the job, warm (ControlMaster), vs plain OpenSSH",
                round(med(rsync_dev), 2),
                round(med(rsync_plain), 2),
                target="<= 1.2x",
                unit="s",
            ),
        ],
    )


if __name__ == "__main__":
    main()
