"""The agent's life: its executors, GPUs and journal brought up, its SSH server
(agent/ssh/server.py: auth and which channels may open) listening, its mDNS
record kept current, each channel served, and everything closed on exit.

Code and artifacts travel inside the lanpool subsystem (content-addressed blobs
up, streamed files back: agent/ssh/session.py), so there is no SFTP and no general
file API.
"""

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
import weakref
from pathlib import Path

import asyncssh
from asyncssh.connection import SSHConnection

from lanpool import __version__
from lanpool.agent.direct import DirectSender
from lanpool.agent.errors import AgentError
from lanpool.agent.executors import ExecutorChoice, ExecutorError, ProcessExecutor
from lanpool.agent.executors.sandbox import SandboxError, probe
from lanpool.agent.executors.slurm_cli import SlurmOptions, cluster_resources
from lanpool.agent.gang.hub import GangHub
from lanpool.agent.home import AgentHome
from lanpool.agent.host.gpu_telemetry import telemetry
from lanpool.agent.host.gpus import GpuAllocator, detect_gpus
from lanpool.agent.host.resources import detect_resources
from lanpool.agent.jobs.admission import DEFAULT_MAX_QUEUED, DEFAULT_STAGED_SHARE
from lanpool.agent.jobs.manager import DEFAULT_GRACE_S, JobManager
from lanpool.agent.jobs.owner import Owner
from lanpool.agent.jobs.queue import Amount
from lanpool.agent.python.interpreters import Pythons
from lanpool.agent.python.job_envs import JobPythons
from lanpool.agent.shell.dev_sshd import load_or_create_host_key as load_or_create_dev_host_key
from lanpool.agent.shell.into_job import serve_exec
from lanpool.agent.shell.sshd import sshd_offered, sweep_stale
from lanpool.agent.ssh.keys import add_authorized_key, load_or_create_host_key
from lanpool.agent.ssh.mdns import Advertiser, advertise_addresses, txt_record
from lanpool.agent.ssh.pairing import CODE_TTL_S, Lockout, Pairing, PairingResponder
from lanpool.agent.ssh.server import Grants, LanpoolSession, listen
from lanpool.agent.ssh.session import ChannelSession
from lanpool.protocol import GANG_SUBSYSTEM, PROTOCOL_VERSION, SUBSYSTEM, key_text

log = logging.getLogger(__name__)

# A job change reaches the mDNS TXT record (free CPUs, running jobs) this much later, coalesced.
TXT_DELAY_S = 0.2


def build_executors(
    mode: str,
    home: AgentHome,
    volumes: list[str] | None = None,
    job_python: str | None = None,
    slurm: SlurmOptions | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    job_sandbox: str = "auto",
    job_user: str | None = None,
) -> ExecutorChoice:
    """The executors of `--executor MODE`: Docker when asked and an engine answers now; process
    jobs in environments on `job_python` (`--job-python`, default the agent's own interpreter);
    with `slurm`, every job through Slurm (agent.executors.slurm)."""
    if mode == "slurm":
        from lanpool.agent.executors.slurm import SlurmExecutor

        return ExecutorChoice(mode, SlurmExecutor(home.jobs, slurm or SlurmOptions(), grace_s))
    docker = None
    if mode == "docker" or (mode == "auto" and _engine_may_exist()):
        from lanpool.agent.executors.docker import DockerExecutor, DockerUnavailable, parse_volume

        try:
            mounts = [parse_volume(v) for v in volumes or []]
        except ValueError as exc:
            raise AgentError(f"--docker-volume: {exc}") from None
        try:
            docker = DockerExecutor.connect(str(home.root), mounts)
        except DockerUnavailable as exc:
            if mode == "docker":
                raise AgentError(f"--executor docker: {exc}") from None
            log.warning("%s; jobs run as plain processes", exc)
    pythons = JobPythons(Pythons.discover(job_python), home.pyenvs)
    # Process jobs see the interpreters and the requirements layers, read-only, and nothing
    # else of the data dir (agent.executors.sandbox).
    readable = [home.pyenvs]
    for interp in pythons.pythons.all:
        real = Path(os.path.realpath(interp.path))
        readable += [Path(interp.bin_dir).parent, real.parent.parent, *map(Path, interp.site_dirs)]
    try:
        sandbox, isolation = probe(job_sandbox, [home.root, home.jobs], readable, job_user)
    except SandboxError as exc:
        raise AgentError(f"--job-sandbox {job_sandbox}: {exc}") from None
    pythons.sandbox = sandbox
    return ExecutorChoice(mode, ProcessExecutor(pythons, sandbox, isolation), docker)


def _engine_may_exist() -> bool:
    # Skips importing the Docker SDK (~0.2 s) on machines plainly without an engine.
    return bool(os.environ.get("DOCKER_HOST")) or os.path.exists("/var/run/docker.sock")


class Agent:
    def __init__(
        self,
        home: AgentHome,
        name: str,
        host: str,
        port: int,
        grace_s: float = DEFAULT_GRACE_S,
        executor: str = "auto",
        docker_volumes: list[str] | None = None,
        *,
        mdns: bool = True,
        mdns_interfaces: list[str] | None = None,
        pairing_ttl_s: float = CODE_TTL_S,
        blob_cache_size: int | None = None,
        job_python: str | None = None,
        slurm: SlurmOptions | None = None,
        direct_transfers: bool = True,
        direct_ports: range | None = None,
        max_queued_per_owner: int = DEFAULT_MAX_QUEUED,
        job_sandbox: str = "auto",
        job_user: str | None = None,
        max_staged_per_owner: int | None = None,
        max_gpus_per_owner: int | None = None,
        private_occupancy: bool = False,
    ) -> None:
        self.home = home
        self.max_gpus_per_owner = max_gpus_per_owner  # agent.jobs.turns
        self.private_occupancy = private_occupancy
        self.max_staged_per_owner = max_staged_per_owner  # None: DEFAULT_STAGED_SHARE of the jobs' disk
        self.job_sandbox = job_sandbox
        self.job_user = job_user
        self.max_queued_per_owner = max_queued_per_owner
        # Artifacts on a TLS connection of their own, offered over SSH (agent/direct.py).
        self.direct = DirectSender(home.root, direct_ports) if direct_transfers else None
        self.slurm = slurm
        self.job_python = job_python
        self.blob_cache_size = blob_cache_size
        self.name = name
        self.host = host
        self.port = port
        self.grace_s = grace_s
        self.executor_mode = executor
        self.docker_volumes = list(docker_volumes or [])
        self.manager: JobManager | None = None
        self.resources: dict[str, int | str] = {}  # fixed: what the machine has
        self._server: asyncssh.SSHAcceptor | None = None
        self.pairing = Pairing(home.root / "pairing.json", pairing_ttl_s)
        self.lockout = Lockout()
        # Pairing-only connections, with the key and code each authenticated with.
        self.pairing_grants: Grants = weakref.WeakKeyDictionary()
        # Gang-only connections (agent.gang.hub), with the gang each authenticated for.
        self.gang_grants: weakref.WeakKeyDictionary[SSHConnection, str] = weakref.WeakKeyDictionary()
        self.owners: weakref.WeakKeyDictionary[SSHConnection, Owner] = weakref.WeakKeyDictionary()
        self.gang: GangHub | None = None
        # One pairing attempt per connection, whatever the channel.
        self._pairing_exchanges: weakref.WeakKeyDictionary[SSHConnection, PairingResponder] = (
            weakref.WeakKeyDictionary()
        )
        self.mdns_addresses = advertise_addresses(host, mdns_interfaces) if mdns else []
        self._advertiser: Advertiser | None = None
        self.mdns_error: str | None = None  # why the announcement failed (the agent serves on)
        self._host_key_text = ""
        self._tasks: set[asyncio.Task[None]] = set()
        self._txt_due: asyncio.TimerHandle | None = None  # the coalesced TXT update (_on_jobs_changed)
        self._lock_fd: int | None = None  # the data dir's lock, held shared while it runs (AgentHome.lock)
        # The jobs' dev sshd's host key (base64; agent/shell/dev_sshd.py): "" when this runner offers none.
        self.dev_host_key = ""

    async def start(self) -> None:
        self.home.create()
        try:  # before the journal is read: an `app agent gc --queued` under way finishes first
            self._lock_fd = await asyncio.to_thread(self.home.lock, False)
        except OSError as exc:
            log.warning(
                "cannot lock %s (%s): `app agent gc --queued` will not see this agent", self.home.lock_file, exc
            )
        host_key = load_or_create_host_key(self.home.host_key)
        if not self.home.authorized_keys.exists():
            self.home.authorized_keys.touch(mode=0o600)
        executors = await asyncio.to_thread(
            build_executors,
            self.executor_mode,
            self.home,
            self.docker_volumes,
            self.job_python,
            self.slurm,
            self.grace_s,
            self.job_sandbox,
            self.job_user,
        )
        cluster: dict[str, int | str] = {}
        if self.executor_mode == "slurm":  # the cluster's, not this login node's
            try:
                cluster = await cluster_resources(self.slurm.partition if self.slurm else "")
            except ExecutorError as exc:
                raise AgentError(f"--executor slurm: {exc}") from None
        gpus = [] if cluster else await asyncio.to_thread(detect_gpus)
        self.manager = JobManager(
            self.home,
            executors,
            self.grace_s,
            GpuAllocator(list(range(int(cluster["gpus"]))) if cluster else [g.index for g in gpus]),
            Amount(float(cluster["cpus"]), int(cluster["memory_mb"]), 0) if cluster else None,
        )
        self.gang = GangHub(self.manager)
        if self.blob_cache_size is not None:
            self.manager.blobs.budget = self.blob_cache_size
        self.manager.max_queued = self.max_queued_per_owner
        self.manager.max_staged = self.max_staged_per_owner
        self.manager.max_gpus_per_owner = self.max_gpus_per_owner
        self.manager.private_occupancy = self.private_occupancy
        if self.manager.max_staged is None:
            self.manager.max_staged = int(shutil.disk_usage(self.home.jobs).total * DEFAULT_STAGED_SHARE)
        self.manager.blobs.create()
        pythons = executors.process.pythons.pythons if isinstance(executors.process, ProcessExecutor) else None
        self.resources = detect_resources(gpus, executors.kind, pythons.versions() if pythons else "")
        self.resources["mode"] = executors.mode  # with `executor`: which jobs it takes (app/runners/scheduler.py)
        if isinstance(executors.process, ProcessExecutor):  # what keeps process jobs off the runner's files
            self.resources["isolation"] = executors.process.isolation
        self.resources.update(cluster)
        await self.manager.load_journal()
        # One-time sshd directories an agent killed earlier left behind; after the checks above,
        # so that a refused option is still the only line an agent that cannot start prints.
        sweep_stale()
        self._make_dev_host_key()
        self.manager.listeners.append(self._on_jobs_changed)
        self._server = await listen(self, self.host, self.port, host_key)
        self.port = self._server.sockets[0].getsockname()[1]
        # "type base64" only: the comment is not part of the key and would break comparisons.
        self._host_key_text = key_text(host_key.export_public_key().decode())
        # A full disk (a job filled it) must not keep the agent from serving its jobs: what it
        # cannot write here is said in one line, and the rest of the agent starts.
        try:
            if not self.home.authorized_keys.read_text().strip() and not self.pairing.active:
                self.pairing.issue()
        except OSError as exc:
            log.warning("cannot write a pairing code (%s): `app agent pair` makes one", exc.strerror or exc)
        info = {
            "pid": os.getpid(),
            "name": self.name,
            "host": self.host,
            "port": self.port,
            "version": __version__,
            "host_key": self._host_key_text,
            "mdns": self.mdns_addresses,
        }
        try:
            self.home.write_info(info)
        except OSError as exc:
            with contextlib.suppress(OSError):  # a half-written copy holds space a full disk needs
                self.home.info_file.with_name(self.home.info_file.name + ".tmp").unlink(missing_ok=True)
            log.warning(
                "cannot write %s (%s): `app agent status` does not see this agent", self.home.info_file, exc.strerror
            )
        if self.mdns_addresses:
            self._advertiser = Advertiser(self.name, self.port, self.mdns_addresses)
            try:
                await self._advertiser.start(self._txt())
            except Exception as exc:  # SSH already listens and may have taken jobs: mDNS only helps find it
                self.mdns_error = str(exc) or type(exc).__name__
                log.error("mDNS announcement failed (%s): controllers reach this runner by address only", exc)
                advertiser, self._advertiser = self._advertiser, None
                with contextlib.suppress(Exception):
                    await advertiser.close()
        log.info(
            "agent %s listening on %s:%d (executor %s)", self.name, self.host, self.port, self.resources.get("executor")
        )

    def _make_dev_host_key(self) -> None:
        """The dev sshd's host key, made once (about a millisecond) where a dev sshd can be offered:
        its listener is a direct connection's, and an sshd is installed and not turned off."""
        if self.direct is None or not sshd_offered():
            return
        try:
            self.dev_host_key = load_or_create_dev_host_key(self.home.dev_sshd_host_key)
        except (OSError, ValueError, asyncssh.KeyImportError) as exc:
            log.warning("no dev sshd: cannot make or read %s (%s)", self.home.dev_sshd_host_key, exc)

    def resources_now(self) -> dict[str, int | str]:
        """What the machine has and, right now, what is free: for Hello and the TXT record."""
        try:
            usage = self.manager.usage() if self.manager else {}
        except Exception:  # this feeds every Hello: a bookkeeping bug must not lock every controller out
            log.exception("cannot count what running jobs hold")
            usage = {}
        cpus, memory = int(self.resources.get("cpus", 0)), int(self.resources.get("memory_mb", 0))
        return {
            **self.resources,
            "gpus_free": usage.get("gpus_free", int(self.resources.get("gpus", 0))),
            "cpus_free": max(0, cpus - usage.get("cpus_reserved", 0)),
            "memory_free_mb": max(0, memory - usage.get("memory_reserved_mb", 0)),
            "running": usage.get("running", 0),
            "queued": usage.get("queued", 0),  # the runner's own queue (agent.jobs.queue)
            **telemetry().resources(),  # "gpu_util": percent per GPU now (agent.host.gpu_telemetry)
        }

    def hello_resources(self) -> dict[str, int | str]:
        """resources_now() and, for an authenticated controller only (never in the mDNS record the
        whole LAN hears), who holds this runner now: labels, workflows, resources and times."""
        resources = self.resources_now()
        if self.manager is not None:
            try:
                held = self.manager.holders_summary()
            except Exception:  # this feeds every Hello: as resources_now
                log.exception("cannot say who holds this runner")
                held = ""
            if held:
                resources["held_by"] = held
        return resources

    def _txt(self) -> dict[str, str]:
        return txt_record(self.name, __version__, PROTOCOL_VERSION, self._host_key_text, self.resources_now())

    def _on_jobs_changed(self) -> None:
        # Coalesced: a submit changes the jobs two or three times within milliseconds, on the
        # job's way to its first line; one TXT update shortly after them.
        if self._advertiser is not None and self._txt_due is None:
            self._txt_due = asyncio.get_running_loop().call_later(TXT_DELAY_S, self._update_txt)

    def _update_txt(self) -> None:
        self._txt_due = None
        if self._advertiser is not None:
            task = asyncio.ensure_future(self._advertiser.update(self._txt()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _authorize(self, public_key: str, label: str) -> bool:
        """A controller proved the pairing code: authorize its key (False: it already was)."""
        return add_authorized_key(self.home.authorized_keys, public_key, comment=f"lanpool:{label}" if label else "")

    async def serve_channel(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        """A session channel that agent.ssh.server let open: an exec into a job, or the
        subsystem (only pairing, for a pairing-only connection)."""
        # asyncssh hands the session itself (a LanpoolSession) to the process factory.
        conn = process.channel.get_connection()
        request = process.shell_request if isinstance(process, LanpoolSession) else None
        if request is not None and self.manager is not None:
            dev_key = self.home.dev_sshd_host_key if self.dev_host_key else None
            await serve_exec(process, self.manager, request, self.owners.get(conn), self.direct, dev_key)
            return
        gang_id = self.gang_grants.get(conn)
        if gang_id is not None and process.subsystem == GANG_SUBSYSTEM and self.gang is not None:
            await self.gang.serve(process, gang_id)  # a gang-only connection: its barrier, nothing else
            return
        if process.subsystem != SUBSYSTEM or gang_id is not None:  # LanpoolSession lets nothing else through
            process.exit(1)
            return
        grant = self.pairing_grants.get(conn)
        exchange = None
        if grant is not None:
            exchange = self._pairing_exchanges.get(conn)
            if exchange is None:
                exchange = PairingResponder(
                    self.pairing, self.lockout, grant, self._host_key_text, self.name, self._authorize
                )
                self._pairing_exchanges[conn] = exchange
        assert self.manager is not None, "channels are served only after start()"
        owner = self.owners.get(conn)
        if owner is None and grant is None:  # LanpoolSession lets only controllers and pairing connections here
            process.exit(1)
            return
        await ChannelSession(
            process,
            self.manager,
            self.name,
            self.hello_resources,
            exchange,
            self.direct,
            owner=owner,
            dev_host_key=self.dev_host_key,
        ).run()

    async def close(self, grace_s: float) -> None:
        if self._txt_due is not None:
            self._txt_due.cancel()
        if self._advertiser is not None:
            await self._advertiser.close()  # unregister first: controllers see it go at once
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self.direct is not None:
            self.direct.close()
        if self.manager is not None:
            await self.manager.shutdown(grace_s)
        self.home.info_file.unlink(missing_ok=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def raise_open_files_limit() -> None:
    """Each waiting job keeps its log spool open, so a runner several people share holds a
    thousand files for its queue alone (ten people's --max-queued-per-owner 100): past the soft
    limit many systems start a service with (1,024), a submit would fail with EMFILE. The hard
    limit is the admin's word; the soft one is raised to it (at most 2**20)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError) as exc:  # a platform or a policy that says no: as it was
        log.info("open files limit left as it was: %s", exc)


async def serve(agent: Agent) -> None:
    """Run an agent until SIGINT/SIGTERM."""
    raise_open_files_limit()
    # Handled from the first moment: a SIGTERM while it starts (mDNS probing takes a second or
    # two, jobs may already have been taken back) shuts it down properly once started, never by default.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await agent.start()
    print(
        f"lanpool agent {agent.name} listening on {agent.host}:{agent.port} (data dir {agent.home.root}, "
        f"jobs with an image run as {'containers' if agent.resources['executor'] == 'docker' else 'processes'})",
        flush=True,
    )
    print(f"process jobs: isolation {agent.resources.get('isolation', 'none')}", flush=True)
    if agent.mdns_error:
        print(f"mDNS: off, the announcement failed ({agent.mdns_error}): add this runner by address", flush=True)
    else:
        print(
            f"mDNS: {'announced on ' + ', '.join(agent.mdns_addresses) if agent.mdns_addresses else 'off'}", flush=True
        )
    code = agent.pairing.current()
    if code is not None:
        print(
            f"pairing code: {code.code} (valid {int(code.expires_at - time.time()) // 60} min): on the controller run "
            f"`app headless runners pair {agent.name} {code.code}`",
            flush=True,
        )
    await stop.wait()
    log.info("shutting down")
    await agent.close(agent.grace_s)
