"""A LAN-shaped link for benchmarks: two network namespaces, a runner's and a controller's,
joined by a veth pair that tc shapes on both ends (rate and one-way delay, netem), so a
figure compares lanpool with a direct connection over what users have (a switched LAN)
rather than over loopback. Needs root (`ip`, `tc`); LanLink.unavailable() says why not.
"""

import os
import shutil
import subprocess
from pathlib import Path

RUN_NS, CTL_NS = "lpbench-run", "lpbench-ctl"
RUN_IP, CTL_IP = "10.79.0.1", "10.79.0.2"
RATE = "1gbit"
DELAY = "100us"  # each way: a 0.2 ms round trip, as a ping across one switch
# netem shapes rate and delay; a kernel without sch_netem (this VM's) has tbf: the rate only.
NETEM = ["netem", "rate", RATE, "delay", DELAY, "limit", "10000"]
TBF = ["tbf", "rate", RATE, "burst", "128kb", "latency", "2ms"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


class LanLink:
    """The two namespaces, made afresh (a previous run's are deleted first) and deleted on exit;
    `shape` says what the link is."""

    shape = ""

    @staticmethod
    def unavailable() -> str | None:
        if os.geteuid() != 0:
            return "needs root (network namespaces)"
        missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
        return f"needs {', '.join(missing)} (iproute2)" if missing else None

    def __enter__(self) -> "LanLink":
        self.down()
        for ns in (RUN_NS, CTL_NS):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", RUN_NS, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", CTL_NS)
        for ns, addr in ((RUN_NS, RUN_IP), (CTL_NS, CTL_IP)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            tc = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root"]
            if subprocess.run([*tc, *NETEM], stderr=subprocess.DEVNULL).returncode == 0:
                self.shape = "1 Gbit/s, 0.1 ms each way (netem)"
            else:
                subprocess.run([*tc, *TBF], check=True)
                self.shape = "1 Gbit/s, no added delay (tbf: no netem in this kernel)"
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    @staticmethod
    def down() -> None:
        for ns in (RUN_NS, CTL_NS):
            if Path(f"/run/netns/{ns}").exists():
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
                for pid in pids:
                    subprocess.run(["kill", "-9", pid], check=False)
                subprocess.run(["ip", "netns", "delete", ns], check=False)


def in_runner(argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", RUN_NS, *argv]


def in_controller(argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", CTL_NS, *argv]
