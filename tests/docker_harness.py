"""A real Docker engine for the tests: test images made here (no registry is reachable),
and an agent's containers removed after it."""

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

BUSYBOX_IMAGE = "lanpool-test/busybox:1"


def _static_busybox() -> Path | None:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        path = Path(candidate)
        if path.is_file():
            with open(path, "rb") as fh:
                head = fh.read(8192)
            if b"ld-linux" not in head:  # no program interpreter: static, runs in an empty image
                return path
    return None


def host_program_files(programs: list[str]) -> dict[str, tuple[bytes, int]]:
    """This machine's `programs` with the shared libraries `ldd` names for them (and the loader),
    each at its own path: what a test image needs to run them (path in the image: content, mode)."""
    files: dict[str, tuple[bytes, int]] = {}
    for program in programs:
        files[program.lstrip("/")] = (Path(program).read_bytes(), 0o755)
        listed = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
        for line in listed.splitlines():
            words = line.split()
            path = words[2] if "=>" in words and len(words) > 2 else words[0] if words else ""
            if path.startswith("/"):
                files[path.lstrip("/")] = (Path(path).read_bytes(), 0o755)
    return files


def busybox_rootfs_tar(
    extra: dict[str, bytes] | None = None, programs: dict[str, tuple[bytes, int]] | None = None
) -> bytes:
    """A root filesystem (tar) with Debian's static busybox as /bin/sh and every other applet,
    plus the `extra` files (path in the image: content) and `programs` (host_program_files)."""
    busybox = _static_busybox()
    if busybox is None:
        pytest.fail("test images need a static busybox: apt-get install busybox-static (scripts/dockerd start does)")
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for name in ("bin", "etc", "proc", "sys", "dev", "workspace"):
            add_dir(name)
        add_dir("tmp", 0o1777)
        add_file("bin/busybox", busybox.read_bytes(), 0o755)
        for applet in applets:
            if applet != "busybox":
                info = tarfile.TarInfo(f"bin/{applet}")
                info.type, info.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(info)
        add_file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        add_file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
        for name, data in (extra or {}).items():
            add_file(name, data)
        made = {"bin", "etc", "proc", "sys", "dev", "workspace", "tmp"}
        for name, (data, mode) in sorted((programs or {}).items()):
            parts = name.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                parent = "/".join(parts[:depth])
                if parent not in made:
                    add_dir(parent)
                    made.add(parent)
            add_file(name, data, mode)
    return buf.getvalue()


def remove_agent_containers(client, data_dir: Path) -> None:
    import docker.errors

    for container in client.containers.list(
        all=True, filters={"label": f"lanpool.agent={data_dir.resolve()}"}, ignore_removed=True
    ):
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass  # its agent removed it meanwhile
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: its agent is removing it now
                raise
