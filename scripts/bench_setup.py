"""scripts/bench-setup: the first `scripts/setup training dev` of a fresh checkout (what CI and a
newcomer's `scripts/demo` wait on), with uv as scripts/setup installs, against the pip install it
replaced, measured in the same run on copies of this checkout.

Each side gets a fresh venv; uv starts from an empty cache of its own (its worst case), pip from
the machine's usual cache (its best). Both install the same packages (the bench compares their
`pip freeze`).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))


def copy_checkout(dest: Path) -> Path:
    """The checkout's tracked and unignored files (its links kept), without .venv."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src, dst = REPO / name.decode(), dest / name.decode()
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree, not yet in the index
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(src.readlink())
        else:
            shutil.copy2(src, dst)
    return dest


def timed(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def freeze(checkout: Path) -> list[str]:
    out = subprocess.run(
        [str(checkout / ".venv/bin/python"), "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = (line.lower().replace("_", "-") for line in out.splitlines())
    return sorted(n for n in names if n and not n.startswith(("uv==", "#", "-e")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="training dev", help="scripts/setup's arguments")
    args = parser.parse_args()

    extras = args.extras.split()
    with tempfile.TemporaryDirectory(prefix="lanpool-bench-setup-") as tmp:
        base = Path(tmp)
        # pip first: the baseline, as scripts/setup installed before uv.
        old = copy_checkout(base / "pip")
        pip_s = timed([sys.executable, "-m", "venv", ".venv"], old)
        pip_s += timed(
            [
                ".venv/bin/python",
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "-c",
                "scripts/constraints.txt",
                "-e",
                f".[{','.join(extras)}]",
            ],
            old,
        )
        new = copy_checkout(base / "uv")
        env = dict(os.environ, UV_CACHE_DIR=str(base / "uv-cache"))
        uv_s = timed(["scripts/setup", *extras], new, env)
        same = freeze(old) == freeze(new)
    print(f"fresh install of lanpool[{','.join(extras)}]: scripts/setup (uv) {uv_s:.1f} s, pip {pip_s:.1f} s")
    print(f"  ratio {uv_s / pip_s:.2f}x; the same packages and versions: {'yes' if same else 'NO'}")
    from bench_results import record, row

    record(
        "bench-setup",
        [
            row("fresh install (uv, cold cache) vs pip", round(uv_s, 1), round(pip_s, 1), target="<= 0.5", unit="s"),
            row("same packages and versions as pip", "yes" if same else "no", target=""),
        ],
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
