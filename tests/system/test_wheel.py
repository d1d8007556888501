"""`pip install` of a built wheel gives a working `app`, away from the repository.

The wheel is built from a copy of the sources (so nothing lands in the checkout) and
installed with --no-deps into a fresh venv; its dependencies come from the venv running
the tests through a path entry (no download). A .pth line only extends sys.path, so an
editable install of a checkout living there is not imported: the wheel's own `app` is.
The commands then run from a directory outside the repository, PYTHONPATH unset.

The wheel claims one import name, `lanpool`: a project's own `app` or `training` package
(Flask's and many ML repositories' convention) installed beside it stays theirs.
"""

import json
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from tests.harness import REPO, lanpool_env

pytestmark = pytest.mark.slow

_NOT_SHIPPED = (".git", ".venv", "__pycache__", "tests", "build", "*.egg-info", ".*_cache", "data", "checkpoints")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's bin dir, with the wheel installed."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(*_NOT_SHIPPED))

    def run(*cmd: str | Path, cwd: Path = root) -> None:
        done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"{cmd}: {done.stdout}{done.stderr}"

    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        root / "dist",
        ".",
        cwd=src,
    )
    (wheel,) = (root / "dist").glob("lanpool-*.whl")
    run(sys.executable, "-m", "venv", root / "venv")
    bin_dir = root / "venv" / "bin"
    site = subprocess.run(
        [bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "lanpool-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(bin_dir / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel)
    return bin_dir


def _env(home: Path) -> dict[str, str]:
    env = lanpool_env(home)
    env.pop("PYTHONPATH")  # the installed package, not this checkout
    return env


def _app(bin_dir: Path, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([bin_dir / "app", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_installed_app_answers_outside_the_repository(installed, tmp_path):
    from lanpool import __version__

    env = _env(tmp_path / "home")
    where = subprocess.run(
        [installed / "python", "-c", "import lanpool, lanpool.app.tui.app as t, pathlib; print(lanpool.__file__); "
         "print((pathlib.Path(t.__file__).parent / 'lanpool.tcss').is_file())"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    module_file, tcss_shipped = where.stdout.split()
    assert Path(module_file).is_relative_to(installed.parent) and tcss_shipped == "True", where.stdout
    for argv in (["--version"], ["headless", "--version"]):
        done = _app(installed, *argv, env=env, cwd=tmp_path)
        assert (done.returncode, done.stdout.strip()) == (0, f"lanpool {__version__}"), done.stderr
    done = _app(installed, "headless", "runners", "--json", "--wait", "0", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    done = _app(installed, "completion", "bash", env=env, cwd=tmp_path)
    assert done.returncode == 0 and "_lanpool_app" in done.stdout, done.stderr


def test_the_installed_agent_serves_a_job_from_a_project_outside_the_repository(installed, tmp_path):
    env = _env(tmp_path / "home")
    project = tmp_path / "project"
    (project / ".lanpool").mkdir(parents=True)
    (project / ".lanpool" / "workflows.yaml").write_text(
        'workflows:\n  - name: hello\n    executor: process\n    commands: ["echo hello from $job_id"]\n'
    )
    data = tmp_path / "agent"
    key = _app(installed, "headless", "key", env=env, cwd=project).stdout.strip()
    assert _app(installed, "agent", "authorize", key, "--data-dir", str(data), env=env, cwd=project).returncode == 0
    log = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen(
        [installed / "app", "agent", "serve", "--host", "127.0.0.1", "--port", "0", "--name", "wheel"]
        + ["--data-dir", str(data)],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not (data / "agent.json").is_file():
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()
            assert time.monotonic() < deadline, "the agent did not start in 60 s"
            time.sleep(0.1)
        port = json.loads((data / "agent.json").read_text())["port"]
        done = _app(installed, "headless", "run", "hello", "--runner", f"127.0.0.1:{port}", env=env, cwd=project)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "hello from " in done.stdout
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        log.close()


def test_the_wheel_claims_one_import_name(installed):
    (wheel,) = (installed.parent.parent / "dist").glob("lanpool-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"lanpool"}, tops
    assert {f"lanpool/{pkg}/__init__.py" for pkg in ("app", "agent", "protocol", "training")} <= set(
        zipfile.ZipFile(wheel).namelist()
    )  # files, not the checkout's links


def test_a_project_with_its_own_app_and_training_packages_keeps_both(installed, tmp_path):
    """Their `app` and `training`, installed in the same venv and in the directory they work in,
    are what `import app` and `import training` give them; `app` stays lanpool's command."""
    from lanpool import __version__

    theirs = tmp_path / "theirs"
    for pkg in ("app", "training"):
        (theirs / pkg).mkdir(parents=True)
        (theirs / pkg / "__init__.py").write_text(f"OWNER = 'theirs-{pkg}'\n")
    (theirs / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "theirs"\nversion = "1.0"\n[tool.setuptools]\npackages = ["app", "training"]\n'
    )
    dist = tmp_path / "dist"

    def run(*cmd: str | Path) -> None:
        done = subprocess.run([str(c) for c in cmd], cwd=tmp_path, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr

    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, theirs)
    (wheel,) = dist.glob("theirs-*.whl")
    run(installed / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel)
    env = _env(tmp_path / "home")
    code = "import app, training, lanpool.app.cli.main as ours; print(app.OWNER, training.OWNER, ours.__name__)"
    for cwd in (tmp_path, theirs):  # installed; and their own folders first on the path
        done = subprocess.run(
            [installed / "python", "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
        )
        assert (done.returncode, done.stdout.split()) == (0, ["theirs-app", "theirs-training", "lanpool.app.cli.main"])
        done = _app(installed, "--version", env=env, cwd=cwd)
        assert (done.returncode, done.stdout.strip()) == (0, f"lanpool {__version__}"), done.stderr


def test_the_installed_app_has_its_documentation(installed, tmp_path):
    """`app help` lists the docs shipped in the wheel, `app help TOPIC` prints one, and `app --help`
    says so: a `pip install` has the reference without the repository."""
    (wheel,) = (installed.parent.parent / "dist").glob("lanpool-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.name for p in (REPO / "docs").glob("*.md")} | {p.name for p in (REPO / "docs").glob("*.schema.json")}
    assert {f"lanpool/docs/{name}" for name in shipped} <= names
    assert not any(n.startswith("lanpool/docs/bench/") or n.endswith(".svg") for n in names)  # only the text
    env = _env(tmp_path / "home")
    listing = _app(installed, "help", env=env, cwd=tmp_path)
    assert listing.returncode == 0 and "cli  " in listing.stdout and "The headless CLI" in listing.stdout, listing
    cli_doc = _app(installed, "help", "cli", env=env, cwd=tmp_path)
    assert cli_doc.returncode == 0 and cli_doc.stdout == (REPO / "docs" / "cli.md").read_text()
    schema = _app(installed, "help", "workflows.schema", env=env, cwd=tmp_path)
    assert json.loads(schema.stdout)["title"]
    unknown = _app(installed, "help", "../../etc/passwd", env=env, cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "no topic" in unknown.stderr
    assert "app help" in _app(installed, "--help", env=env, cwd=tmp_path).stdout
