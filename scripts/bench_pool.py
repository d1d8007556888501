"""lanpool pool benchmark: how fast a runner becomes usable, how fast a dead one is
noticed, and what discovering many runners costs.

Everything runs on 127.0.0.1 in a temp dir: controller homes (LANPOOL_HOME), agent
data dirs, real `app agent serve --host 127.0.0.1 --port 0` processes that announce
with mDNS on 127.0.0.1 only, and a controller that browses 127.0.0.1 only
(LANPOOL_MDNS_INTERFACES=127.0.0.1, and explicit interfaces in-process). Every
process started is killed by PID at the end, also on Ctrl-C. Prints figures; the
exit code says only whether the benchmark could run.

    scripts/bench-pool [--agents N] [--repeat K] [--json] [--poll S] [--mdns-watch S] [--batch B] [--keep]

1. spawn -> LIVE: an agent (authorized beforehand) is spawned while an in-process
   controller browses (app.runners.discovery.Browser), trusts (as a user adding it would) and
   probes (Pool.probe) each new advert at once; parts: spawn -> agent.json (listening), -> "mDNS: announced"
   (agent stdout), -> advert seen by the browser, -> LIVE in the store.
2. SIGKILL -> OFFLINE: a loop probes every known runner every --poll seconds (what a
   long-running controller does); the same browser is watched for a Removed event.
   A control agent stopped with SIGTERM shows that the watcher does see goodbyes.
3. N agents at once (bench-TAG-001..): started in batches, then `app headless runners
   --json --wait W` (W = 3, and 6 if not all were found) as a subprocess, each with a
   fresh store: how many found, states, wall time, CPU and peak RSS (wait4); then the
   same with --wait 0 on the filled store (probes only). Agents' RSS/PSS and CPU.
"""

import argparse
import asyncio
import collections
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_stats import BenchError, proc_cpu, run_bench
from bench_stats import say as _say
from bench_stats import summary as stats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # app, agent, protocol of this checkout; tests.harness
from tests import harness  # noqa: E402

PY = harness.venv_python()
APP = list(harness.venv_app())
MDNS_IFACE = harness.LOOPBACK  # the only interface anything here announces or browses on
# Names of this run's agents (a random tag: two runs on one machine share 127.0.0.1's mDNS);
# runners of other processes seen on 127.0.0.1 are left alone.
PREFIX = f"bench-{secrets.token_hex(2)}-"
LIVE_TARGET_S = 2.0
OFFLINE_TARGET_S = 10.0
CONTROL_WATCH_S = 5.0  # how long the SIGTERMed control agent's Removed event is waited for
now = time.monotonic


def say(text: str) -> None:
    _say(text, prefix="bench-pool: ")


# -- processes: every one started is kept here and killed by PID at the end ----------


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def spawn(self, argv: list[str], **kw) -> subprocess.Popen:
        # Own session: a Ctrl-C reaches the bench only, which then stops everything by PID.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, **kw)
        self.procs.append(proc)
        return proc

    def stop_all(self, grace_s: float = 8.0) -> dict:
        alive = [p for p in self.procs if p.returncode is None and p.poll() is None]
        for p in alive:
            _signal(p, signal.SIGTERM)  # agents unregister from mDNS on SIGTERM
        deadline = now() + grace_s
        killed = 0
        for p in alive:
            try:
                p.wait(max(0.0, deadline - now()))
            except subprocess.TimeoutExpired:
                _signal(p, signal.SIGKILL)
                killed += 1
                p.wait()
        return {"stopped": len(alive), "sigkilled_after_grace": killed}


def _signal(proc: subprocess.Popen, sig: int) -> None:
    if proc.returncode is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def proc_mem_kib(pid: int) -> dict:
    out = {"rss": 0, "pss": 0, "hwm": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                out["hwm"] = int(line.split()[1])
    except OSError:
        pass
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                out["pss"] = int(line.split()[1])
    except OSError:
        pass
    return out


def announced(log: Path) -> bool:
    try:
        return b"mDNS: announced" in log.read_bytes()
    except OSError:
        return False


def tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


# -- the bench --------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="lanpool-bench-pool-"))
        self.procs = Procs()
        self.results: dict = {
            "config": {
                "agents": args.agents,
                "repeat": args.repeat,
                "poll_s": args.poll,
                "mdns_watch_s": args.mdns_watch,
                "batch": args.batch,
                "cpus": os.cpu_count(),
                "python": PY,
                "mdns_interface": MDNS_IFACE,
            }
        }

    def cli(self, *args: str, env: dict, timeout: float = 60) -> str:
        p = self.procs.spawn([*APP, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise BenchError(f"app {' '.join(args)} timed out after {timeout} s") from None
        if p.returncode != 0:
            raise BenchError(f"app {' '.join(args)} exited {p.returncode}:\n{err[-2000:]}")
        return out

    def spawn_agent(self, name: str, data_dir: Path, env: dict) -> harness.AgentProc:
        agent = harness.spawn_agent(
            data_dir,
            env,
            name=name,
            host=MDNS_IFACE,
            grace=1,
            verbose=False,
            app=APP,
            log_path=data_dir.parent / f"{name}.log",
            new_session=True,
        )
        self.procs.procs.append(agent.proc)  # stopped by PID at the end, with the rest
        return agent

    def stop(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        self.results["cleanup"] = self.procs.stop_all()
        if self.args.keep:
            say(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- 1 and 2: one long-running in-process controller -----------------------------

    async def live_and_dead(self) -> None:
        from lanpool.app.controller import Controller
        from lanpool.app.home import ControllerHome
        from lanpool.app.runners import adverts
        from lanpool.app.runners.discovery import Browser
        from lanpool.app.runners.pool import RunnerState

        args = self.args
        home = self.tmp / "controller-live"
        env = harness.lanpool_env(home)
        pub = (await asyncio.to_thread(self.cli, "headless", "key", env=env)).strip()
        ctl = Controller(ControllerHome(home))
        rng = random.Random(20240601)

        seen_at: dict[str, float] = {}
        service_of: dict[str, str] = {}
        gone_at: dict[str, float] = {}  # service name -> first Removed event
        live_at: dict[str, float] = {}
        killed_at: dict[str, float] = {}
        offline_at: dict[str, float] = {}
        probe_s: dict[str, list[float]] = collections.defaultdict(list)
        probing: set[str] = set()
        tasks: set[asyncio.Task] = set()
        cycles = [0]
        foreign: set[str] = set()

        async def probe_timed(row: dict) -> str:
            t = now()
            state = await ctl.pool.probe(row)
            end = now()
            probe_s[str(state)].append(end - t)
            name = row["name"]
            if state == RunnerState.LIVE and name not in killed_at:
                live_at.setdefault(name, end)
            if state == RunnerState.OFFLINE and name in killed_at:
                offline_at.setdefault(name, end)
            return state

        async def probe_new(name: str) -> None:
            # What a controller does with a fresh advert: check it now, not at the next poll.
            deadline = now() + 10
            try:
                while name not in live_at and name not in killed_at and now() < deadline:
                    row = ctl.store.runner(name)
                    if row is not None:
                        await probe_timed(row)
                    if name not in live_at:
                        await asyncio.sleep(0.05)
            finally:
                probing.discard(name)

        def on_seen(advert) -> None:
            if not advert.name.startswith(PREFIX):
                foreign.add(advert.name)  # another process's runner on 127.0.0.1: left alone
                return
            seen_at.setdefault(advert.name, now())
            service_of.setdefault(advert.name, advert.service)
            adverts.record_advert(ctl.store, advert)
            # The user trusts each bench runner as it appears (pairing is measured elsewhere):
            # found by mDNS alone, a runner is never LIVE (app/runners/pool.py).
            ctl.store.set_runner(advert.name, trusted=1)
            if advert.name not in live_at and advert.name not in killed_at and advert.name not in probing:
                probing.add(advert.name)
                task = asyncio.ensure_future(probe_new(advert.name))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

        def on_gone(service: str) -> None:
            if not service.startswith(PREFIX):
                return
            gone_at.setdefault(service, now())

        async def monitor() -> None:
            # Fixed rate: a cycle starts every `poll` seconds and probes every known runner.
            while True:
                start = now()
                await asyncio.gather(
                    *(probe_timed(row) for row in ctl.store.runners() if row["name"].startswith(PREFIX))
                )
                cycles[0] += 1
                await asyncio.sleep(max(0.0, args.poll - (now() - start)))

        browser = Browser([MDNS_IFACE], on_seen, on_gone)
        await browser.start()
        mon = asyncio.ensure_future(monitor())
        reps: list[dict] = []
        control: dict = {}
        try:
            await asyncio.sleep(1.0)  # the controller runs before any runner appears
            for i in range(args.repeat):
                name = f"{PREFIX}live-{i + 1}"
                data_dir = self.tmp / "agents-live" / name
                await asyncio.to_thread(self.cli, "agent", "authorize", pub, "--data-dir", str(data_dir), env=env)
                rep = await self._spawn_until_live(name, data_dir, env, seen_at, live_at)
                reps.append(rep)
                proc = rep.pop("_proc")
                if rep["live_s"] is None:
                    say(f"{name} was not LIVE within 20 s; skipping its kill measurement")
                    continue
                # 2. SIGKILL at a random phase of the poll loop.
                await asyncio.sleep(0.3 + rng.uniform(0, args.poll))
                killed_at[name] = now()
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                deadline = killed_at[name] + 30
                while name not in offline_at and now() < deadline:
                    await asyncio.sleep(0.005)
                rep["kill_to_offline_s"] = offline_at[name] - killed_at[name] if name in offline_at else None

            # Control: a SIGTERMed agent unregisters, and the same browser sees Removed at once.
            name = f"{PREFIX}live-term"
            data_dir = self.tmp / "agents-live" / name
            await asyncio.to_thread(self.cli, "agent", "authorize", pub, "--data-dir", str(data_dir), env=env)
            rep = await self._spawn_until_live(name, data_dir, env, seen_at, live_at)
            proc = rep.pop("_proc")
            control = {"live_s": rep["live_s"]}
            if rep["live_s"] is not None and name in service_of:
                t = now()
                proc.send_signal(signal.SIGTERM)
                while service_of[name] not in gone_at and now() < t + CONTROL_WATCH_S:
                    await asyncio.sleep(0.005)
                control["watched_s"] = now() - t
                control["sigterm_to_removed_s"] = gone_at[service_of[name]] - t if service_of[name] in gone_at else None
                await asyncio.to_thread(proc.wait, 15)

            # Watch the browser until the first kill is --mdns-watch seconds old.
            if killed_at:
                first = min(killed_at.values())
                await asyncio.sleep(max(0.0, first + args.mdns_watch - now()))
            watch_end = now()
        finally:
            mon.cancel()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(mon, *tasks, return_exceptions=True)
            await browser.close()
            ctl.close()

        watched = []
        for name, t in killed_at.items():
            service = service_of.get(name, "")
            watched.append(
                {
                    "name": name,
                    "watched_s": watch_end - t,
                    "removed": service in gone_at,
                    "removed_after_s": gone_at[service] - t if service in gone_at else None,
                }
            )
        self.results["spawn_to_live"] = {
            "runs": reps,
            **{
                k: stats([r[k] for r in reps])
                for k in ("listening_s", "announced_s", "advert_s", "live_s", "advert_to_live_s")
            },
        }
        self.results["kill_to_offline"] = {
            "poll_s": args.poll,
            "runs": [{"name": r["name"], "kill_to_offline_s": r.get("kill_to_offline_s")} for r in reps],
            "kill_to_offline_s": stats([r.get("kill_to_offline_s") for r in reps]),
            "probe_s_by_result": {k: stats(v) for k, v in probe_s.items()},
            "monitor_cycles": cycles[0],
            "mdns_after_sigkill": watched,
            "mdns_control_sigterm": control,
            "foreign_runners_seen": sorted(foreign),
        }

    async def _spawn_until_live(self, name: str, data_dir: Path, env: dict, seen_at: dict, live_at: dict) -> dict:
        t0 = now()
        agent = self.spawn_agent(name, data_dir, env)
        proc, log = agent.proc, agent.log_path
        marks: dict[str, float] = {}
        deadline = t0 + 20
        while now() < deadline:
            t = now()
            if "listening" not in marks and agent.listening():
                marks["listening"] = t
            if "announced" not in marks and announced(log):
                marks["announced"] = t
            if name in live_at and len(marks) == 2:
                break
            if proc.poll() is not None:
                raise BenchError(f"agent {name} exited {proc.returncode}:\n{tail(log)}")
            await asyncio.sleep(0.005)
        rel = lambda t: t - t0 if t is not None else None  # noqa: E731
        rep = {
            "name": name,
            "listening_s": rel(marks.get("listening")),
            "announced_s": rel(marks.get("announced")),
            "advert_s": rel(seen_at.get(name)),
            "live_s": rel(live_at.get(name)),
            "_proc": proc,
        }
        rep["advert_to_live_s"] = (live_at[name] - seen_at[name]) if name in live_at and name in seen_at else None
        return rep

    # -- 3: N agents at once, `app headless runners` as a subprocess -------------------

    def many(self) -> None:
        args = self.args
        n = args.agents
        home = self.tmp / "controller-n"
        env = harness.lanpool_env(home)
        pub = self.cli("headless", "key", env=env).strip()
        names = [f"{PREFIX}{i:03d}" for i in range(1, n + 1)]
        dirs = {name: self.tmp / "agents-n" / name for name in names}

        t = now()
        width = max(2, 2 * (os.cpu_count() or 1))
        for i in range(0, n, width):
            batch = [
                self.procs.spawn(
                    [*APP, "agent", "authorize", pub, "--data-dir", str(dirs[name])],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
                for name in names[i : i + width]
            ]
            for p in batch:
                _, err = p.communicate(timeout=60)
                if p.returncode != 0:
                    raise BenchError(f"app agent authorize exited {p.returncode}: {err.decode(errors='replace')}")
        authorize_s = now() - t

        # Start in batches: each batch must listen before the next one is spawned.
        agents: dict[str, harness.AgentProc] = {}
        listening: dict[str, float] = {}
        t0 = now()
        for i in range(0, n, args.batch):
            batch = names[i : i + args.batch]
            for name in batch:
                agents[name] = self.spawn_agent(name, dirs[name], env)
            deadline = now() + 60
            while any(name not in listening for name in batch):
                for name in batch:
                    if name not in listening and agents[name].listening():
                        listening[name] = now() - t0
                    if agents[name].proc.poll() is not None:
                        raise BenchError(
                            f"agent {name} exited {agents[name].proc.returncode}:\n{agents[name].log_tail(1500)}"
                        )
                if now() > deadline:
                    raise BenchError(f"agents of batch {batch[0]}.. did not listen within 60 s")
                time.sleep(0.01)
        all_listening_s = now() - t0
        announced_at: dict[str, float] = {}
        deadline = now() + 60
        while len(announced_at) < n and now() < deadline:
            for name in names:
                if name not in announced_at and announced(agents[name].log_path):
                    announced_at[name] = now() - t0
            time.sleep(0.02)
        all_announced_s = now() - t0 if len(announced_at) == n else None
        startup_cpu = sum(proc_cpu(agents[name].proc.pid)[0] for name in names)

        time.sleep(1.0)  # let the announcement bursts (~1 s after registering) settle
        pids = [agents[name].proc.pid for name in names]
        cpu0 = sum(proc_cpu(pid)[0] for pid in pids)
        idle_window = 3.0
        time.sleep(idle_window)
        idle_cpu = sum(proc_cpu(pid)[0] for pid in pids) - cpu0
        mem = [proc_mem_kib(pid) for pid in pids]

        runs = []
        last_env = env
        for wait in (3.0, 6.0):
            fresh = self.tmp / f"controller-n-wait{wait:g}"
            fresh.mkdir()
            for f in ("id_ed25519", "id_ed25519.pub"):
                shutil.copy2(home / f, fresh / f)  # the authorized key, an empty store
            last_env = harness.lanpool_env(fresh)
            runs.append(self.timed_runners(last_env, wait, pids, names))
            if runs[-1]["found"] == n:
                break
        warm = self.timed_runners(last_env, 0.0, pids, names)
        warm["note"] = "store filled by the run above; no browsing, probes only"

        self.results["many"] = {
            "agents": n,
            "batch": args.batch,
            "authorize_all_s": authorize_s,
            "all_listening_s": all_listening_s,
            "all_announced_s": all_announced_s,
            "listening_s_per_agent": stats(list(listening.values())),
            "agents_startup_cpu_s": startup_cpu,
            "agents_idle_cpu_pct_of_one_core": 100 * idle_cpu / idle_window,
            "agents_rss_mib_sum": sum(m["rss"] for m in mem) / 1024,
            "agents_pss_mib_sum": sum(m["pss"] for m in mem) / 1024 if all(m["pss"] for m in mem) else None,
            "agents_rss_mib_each": stats([m["rss"] / 1024 for m in mem]),
            "runners": runs,
            "runners_warm": warm,
        }

    def timed_runners(self, env: dict, wait: float, agent_pids: list[int], names: list[str]) -> dict:
        """`app headless runners --json --wait W`: wall time, CPU and peak RSS (wait4, and VmHWM polled)."""
        argv = [*APP, "headless", "runners", "--json", "--wait", f"{wait:g}"]
        err_path = self.tmp / f"runners-wait{wait:g}-{len(list(self.tmp.glob('runners-*')))}.err"
        agents_cpu0 = sum(proc_cpu(pid)[0] for pid in agent_pids)
        with open(err_path, "wb") as err:
            t0 = now()
            p = self.procs.spawn(argv, env=env, stdout=subprocess.PIPE, stderr=err)
        hwm = [0]
        done = threading.Event()

        def poll_hwm() -> None:
            while not done.is_set():
                hwm[0] = max(hwm[0], proc_mem_kib(p.pid)["hwm"])
                done.wait(0.02)

        poller = threading.Thread(target=poll_hwm, daemon=True)
        poller.start()
        killer = threading.Timer(120, lambda: _signal(p, signal.SIGKILL))
        killer.start()
        try:
            out = p.stdout.read()
            _, status, usage = os.wait4(p.pid, 0)
            wall = now() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
        finally:
            killer.cancel()
            done.set()
            poller.join(1)
        agents_cpu = sum(proc_cpu(pid)[0] for pid in agent_pids) - agents_cpu0
        if p.returncode != 0:
            raise BenchError(f"{' '.join(argv[-4:])} exited {p.returncode}:\n{tail(err_path)}")
        rows = json.loads(out)
        ours = {r["name"]: r for r in rows if r["name"] in set(names)}
        foreign = [r["name"] for r in rows if r["name"] not in ours]
        return {
            "wait_s": wait,
            "wall_s": wall,
            "found": len(ours),
            "states": dict(collections.Counter(r["state"] for r in ours.values())),
            "missing": [name for name in names if name not in ours][:10],
            "other_runners_listed": len(foreign),
            "controller_cpu_s": usage.ru_utime + usage.ru_stime,
            "controller_user_s": usage.ru_utime,
            "controller_sys_s": usage.ru_stime,
            "controller_peak_rss_mib": usage.ru_maxrss / 1024,
            "controller_vmhwm_polled_mib": hwm[0] / 1024,
            "agents_cpu_s_meanwhile": agents_cpu,
        }


# -- report -------------------------------------------------------------------------------


def report(res: dict, out) -> None:
    def p(text: str = "") -> None:
        print(text, file=out)

    def s(x: float | None, unit: str = " s") -> str:
        return "-" if x is None else f"{x:.2f}{unit}"

    cfg = res["config"]
    p(
        f"lanpool pool bench: {cfg['repeat']} repeats, {cfg['agents']} agents, {cfg['cpus']} CPUs, mDNS on "
        f"{cfg['mdns_interface']} only, {cfg['python']}"
    )
    sl = res.get("spawn_to_live")
    if sl:
        p()
        p("1. `app agent serve` spawn -> LIVE in the controller's store (Browser + probe on each new advert)")
        p(f"   {'':34} {'median':>8} {'min':>8} {'max':>8}")
        for key, label in (
            ("listening_s", "spawn -> agent.json (listening)"),
            ("announced_s", "spawn -> 'mDNS: announced' (agent)"),
            ("advert_s", "spawn -> advert seen (browser)"),
            ("live_s", "spawn -> LIVE"),
            ("advert_to_live_s", "advert seen -> LIVE (probe)"),
        ):
            x = sl[key]
            p(f"   {label:34} {s(x['median']):>8} {s(x['min']):>8} {s(x['max']):>8}")
        for r in sl["runs"]:
            p(
                f"     {r['name']}: listening {s(r['listening_s'])}, announced {s(r['announced_s'])}, "
                f"advert {s(r['advert_s'])}, LIVE {s(r['live_s'])}"
            )
        med = sl["live_s"]["median"]
        p(
            f"   target <= {LIVE_TARGET_S:g} s (median): "
            f"{'-' if med is None else ('within' if med <= LIVE_TARGET_S else 'OVER')}"
        )
    kd = res.get("kill_to_offline")
    if kd:
        p()
        p(
            f"2. SIGKILL of a LIVE agent -> OFFLINE (loop probing every known runner every {kd['poll_s']:g} s, "
            f"killed at a random phase)"
        )
        x = kd["kill_to_offline_s"]
        p(
            f"   kill -> OFFLINE: median {s(x['median'])}, min {s(x['min'])}, max {s(x['max'])} "
            f"(worst case ~ poll interval + one probe); target <= {OFFLINE_TARGET_S:g} s: "
            f"{'-' if x['max'] is None else ('within' if x['max'] <= OFFLINE_TARGET_S else 'OVER')}"
        )
        p(
            "   one probe takes (median): "
            + ", ".join(
                f"{k} {v['median'] * 1000:.0f} ms (n={v['n']})" for k, v in sorted(kd["probe_s_by_result"].items())
            )
        )
        for w in kd["mdns_after_sigkill"]:
            p(
                f"   mDNS browser alone, {w['name']}: watched {w['watched_s']:.1f} s after SIGKILL, Removed event: "
                + (f"yes, after {w['removed_after_s']:.2f} s" if w["removed"] else "none")
            )
        c = kd["mdns_control_sigterm"]
        if c:
            gone = c.get("sigterm_to_removed_s")
            p(
                "   control, SIGTERM (the agent unregisters on the way out): Removed event "
                + (f"after {gone:.2f} s" if gone is not None else f"none within {c.get('watched_s', 0):.0f} s")
            )
        if kd["foreign_runners_seen"]:
            p(
                f"   (ignored {len(kd['foreign_runners_seen'])} runner(s) of other processes advertising on 127.0.0.1: "
                f"{', '.join(kd['foreign_runners_seen'][:5])})"
            )
    m = res.get("many")
    if m:
        p()
        p(f"3. {m['agents']} agents advertising at once on {cfg['mdns_interface']} (started {m['batch']} at a time)")
        p(
            f"   authorize all (app agent authorize, {2 * (cfg['cpus'] or 1)} at a time): {m['authorize_all_s']:.1f} s; "
            f"all listening after {m['all_listening_s']:.1f} s, all announced after {s(m['all_announced_s'])}"
        )
        p(
            f"   agents: RSS sum {m['agents_rss_mib_sum']:.0f} MiB (each median {m['agents_rss_mib_each']['median']:.1f} MiB), "
            f"PSS sum {s(m['agents_pss_mib_sum'], ' MiB')}; startup CPU {m['agents_startup_cpu_s']:.1f} s in all; "
            f"idle {m['agents_idle_cpu_pct_of_one_core']:.1f}% of one core in all"
        )
        for r in [*m["runners"], m["runners_warm"]]:
            states = ", ".join(f"{k} {v}" for k, v in sorted(r["states"].items())) or "none"
            p(
                f"   app headless runners --json --wait {r['wait_s']:g}: found {r['found']}/{m['agents']} ({states}) "
                f"in {r['wall_s']:.2f} s; controller CPU {r['controller_cpu_s']:.2f} s "
                f"(user {r['controller_user_s']:.2f} + sys {r['controller_sys_s']:.2f}), peak RSS "
                f"{r['controller_peak_rss_mib']:.0f} MiB (VmHWM polled {r['controller_vmhwm_polled_mib']:.0f} MiB); "
                f"agents' CPU meanwhile {r['agents_cpu_s_meanwhile']:.2f} s"
                + (f"; missing e.g. {', '.join(r['missing'])}" if r["missing"] else "")
                + (
                    f"; also listed {r['other_runners_listed']} runner(s) of other processes on 127.0.0.1"
                    if r["other_runners_listed"]
                    else ""
                )
                + (f"  [{r['note']}]" if r.get("note") else "")
            )
    if "bench_wall_s" in res:
        p()
        p(f"bench took {res['bench_wall_s']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-pool", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=50, help="agents advertising at once in part 3 (default 50)")
    parser.add_argument("--repeat", type=int, default=3, help="repeats of parts 1 and 2 (default 3)")
    parser.add_argument(
        "--json", action="store_true", help="also print one JSON object of all figures (stdout; table goes to stderr)"
    )
    parser.add_argument("--poll", type=float, default=2.0, help="the liveness loop's interval in part 2 (default 2)")
    parser.add_argument(
        "--mdns-watch",
        type=float,
        default=15.0,
        help="seconds the browser is watched for a Removed event after the first SIGKILL (default 15)",
    )
    parser.add_argument(
        "--batch", type=int, default=None, help="agents started at a time in part 3 (default 4 per CPU)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (path printed)")
    args = parser.parse_args(argv)
    if args.agents < 1 or args.repeat < 1 or args.poll <= 0:
        parser.error("--agents and --repeat must be >= 1, --poll > 0")
    if args.batch is None:
        args.batch = 4 * (os.cpu_count() or 1)
    args.batch = max(1, args.batch)
    # The in-process controller too: never any interface but 127.0.0.1.
    os.environ["LANPOOL_MDNS_INTERFACES"] = MDNS_IFACE

    def on_hup(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGHUP, on_hup)
    # Ctrl-C stops the bench even where SIGINT came in ignored (started with `&` from a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    bench = Bench(args)
    os.environ["LANPOOL_HOME"] = str(bench.tmp / "controller-live")

    def work() -> dict:
        say("1+2: spawn -> LIVE, SIGKILL -> OFFLINE")
        asyncio.run(bench.live_and_dead())
        say(f"3: {args.agents} agents")
        bench.many()
        return bench.results

    from bench_results import picked, recording  # docs/bench/NAME.json -> docs/benchmarks.md (scripts/bench-report)

    work = recording(
        "bench-pool",
        work,
        lambda r: [
            picked(r, "agent start to LIVE (median)", "spawn_to_live.live_s.median", target="<= 2 s", unit="s"),
            picked(
                r,
                "killed agent to OFFLINE (median)",
                "kill_to_offline.kill_to_offline_s.median",
                target="<= 10 s",
                unit="s",
            ),
            picked(r, f"{args.agents} agents: RSS of all", "many.agents_rss_mib_sum", unit="MiB"),
        ],
    )
    return run_bench("bench-pool", work, bench.stop, report, args.json, errors=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())
