"""Workflows end to end on a real agent: a three-step DAG (prepare -> encode -> train,
like the GPT-2 tutorial), reuse of unchanged steps, variables, tags, .dstack/ files."""

import json
import re

WORKFLOWS = """
workflows:
  - name: prepare
    help: upper-case the corpus
    depends-on:
      repo:
        include: [data]
    commands:
      - mkdir -p prepared
      - tr a-z A-Z < data/input.txt > prepared/text.txt
      - echo "prepare ran"
    artifacts: [prepared]

  - name: encode
    depends-on:
      workflows: [prepare]
      repo: {include: []}
    commands:
      - mkdir -p encoded
      - wc -c < prepared/text.txt | tr -d ' ' > encoded/size.txt
      - echo "encode ran with model ${{ model }}"
    artifacts: [encoded]

  - name: train
    depends-on:
      workflows: [encode]
      repo: {include: ["*.sh"]}
    commands:
      - echo "train sees $(cat encoded/size.txt) bytes, model $model, lr ${lr}"
      - test ! -e prepared  # only direct dependencies' artifacts are placed

  - name: use-tag
    depends-on: ["prepare:v1"]
    commands:
      - cat prepared/text.txt

  - name: echo
    commands:
      - echo "model=${{ model }}"
"""
VARIABLES = """
variables:
  global:
    model: 117M
  train:
    lr: 0.1
"""


def _project(make_project):
    return make_project(
        WORKFLOWS,
        files={
            ".lanpool/variables.yaml": VARIABLES,
            "data/input.txt": "hello corpus\n",
            "notes.md": "not an input\n",
            "train.sh": "echo train\n",
        },
    )


def _plan(cli, project, *args) -> dict[str, dict]:
    out = cli("headless", "plan", "train", "--json", *args, cwd=project, check=True).stdout
    return {j["workflow"]: j for j in json.loads(out)["jobs"]}


def test_three_step_dag_reuses_unchanged_steps(agent, cli, make_project):
    project = _project(make_project)
    first = cli("headless", "run", "train", "--runner", agent.address, cwd=project)
    assert first.returncode == 0, first.stderr
    assert "prepare ran" in first.stdout and "encode ran with model 117M" in first.stdout
    assert "train sees 13 bytes, model 117M, lr 0.1" in first.stdout

    plan = _plan(cli, project)
    assert [plan[w]["action"] for w in ("prepare", "encode", "train")] == ["reuse", "reuse", "run"]

    second = cli("headless", "run", "train", cwd=project)
    assert second.returncode == 0, second.stderr
    assert "prepare ran" not in second.stdout and "encode ran" not in second.stdout
    assert "train sees 13 bytes" in second.stdout
    assert "prepare: reusing job" in second.stderr and "encode: reusing job" in second.stderr
    reused = next(line for line in second.stderr.splitlines() if line.startswith("prepare: reusing job"))
    assert re.fullmatch(r"prepare: reusing job (\w+) of run [\w-]+ \(same inputs\)", reused), reused
    assert reused.count(reused.split()[3]) == 1  # the job is named once

    # A file no workflow includes changes nothing; an included one re-runs its workflow and dependents.
    (project / "notes.md").write_text("edited\n")
    assert _plan(cli, project)["prepare"]["action"] == "reuse"
    (project / "data" / "input.txt").write_text("a longer corpus now\n")
    plan = _plan(cli, project)
    assert plan["prepare"]["action"] == "run" and "files data/input.txt" in plan["prepare"]["reason"]
    assert plan["encode"]["action"] == "run" and "dependency prepare" in plan["encode"]["reason"]
    third = cli("headless", "run", "train", cwd=project, check=True)
    assert "prepare ran" in third.stdout and "train sees 20 bytes" in third.stdout

    # A variable override re-runs the steps that see it, and only those: a workflow's own
    # variable its workflow; a global every step, since each sees it in its env ($MODEL).
    plan = _plan(cli, project, "--lr", "0.5", "--reuse")
    assert [plan[w]["action"] for w in ("prepare", "encode", "train")] == ["reuse", "reuse", "run"]
    plan = _plan(cli, project, "--model", "345M")
    assert plan["prepare"]["action"] == "run" and "variables model" in plan["prepare"]["reason"]
    assert plan["encode"]["action"] == "run" and "variables model" in plan["encode"]["reason"]
    fourth = cli("headless", "run", "train", "--model", "345M", "--lr", "0.5", cwd=project, check=True)
    assert "encode ran with model 345M" in fourth.stdout and "model 345M, lr 0.5" in fourth.stdout

    # --no-cache runs everything again.
    assert all(j["action"] == "run" for j in _plan(cli, project, "--no-cache").values())
    # And --reuse reuses even the requested workflow.
    assert _plan(cli, project, "--reuse")["train"]["action"] == "reuse"


def test_a_failed_dependency_stops_the_run(agent, cli, make_project):
    project = make_project("""
        workflows:
          - name: a
            commands: [echo a-ran, exit 7]
          - name: b
            depends-on: [a]
            commands: [echo b-ran]
        """)
    res = cli("headless", "run", "b", "--runner", agent.address, cwd=project)
    assert res.returncode == 7
    assert "a-ran" in res.stdout and "b-ran" not in res.stdout
    assert "not running b" in res.stderr


def test_help_lists_variables_and_bad_overrides_are_refused(cli, make_project):
    project = _project(make_project)
    res = cli("headless", "run", "train", "--help", cwd=project, check=True)
    assert "--lr" in res.stdout and "0.1" in res.stdout and "--model" in res.stdout and "117M" in res.stdout
    bad = cli("headless", "run", "train", "--modle", "x", cwd=project)
    assert bad.returncode == 2 and "unknown variable --modle" in bad.stderr and "--model" in bad.stderr
    typed = cli("headless", "run", "train", "--lr", "fast", cwd=project)
    assert typed.returncode == 2 and "--lr expects a number" in typed.stderr
    listing = cli("headless", "run", "--json", cwd=project, check=True)
    assert [w["name"] for w in json.loads(listing.stdout)] == ["prepare", "encode", "train", "use-tag", "echo"]


def test_values_cannot_inject_commands(agent, cli, make_project, tmp_path):
    project = _project(make_project)
    evil = f"$(touch {tmp_path}/pwned); touch {tmp_path}/pwned2 `touch {tmp_path}/pwned3`"
    res = cli("headless", "run", "echo", "--runner", agent.address, "--model", evil, cwd=project)
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"model={evil}\n"
    assert not any((tmp_path / name).exists() for name in ("pwned", "pwned2", "pwned3"))


def test_tagged_run_feeds_a_later_workflow(agent, cli, make_project):
    project = _project(make_project)
    missing = cli("headless", "run", "use-tag", "--runner", agent.address, cwd=project)
    assert missing.returncode == 2 and "--tag v1" in missing.stderr
    cli("headless", "run", "prepare", "--tag", "v1", "--runner", agent.address, cwd=project, check=True)
    res = cli("headless", "run", "use-tag", cwd=project, check=True)
    assert res.stdout == "HELLO CORPUS\n"


def test_dstack_2022_files_run_unchanged(agent, cli, tmp_path):
    project = tmp_path / "old"
    (project / ".dstack").mkdir(parents=True)
    (project / ".dstack" / "workflows.yaml").write_text(
        'workflows:\n  - name: hello\n    provider: bash\n    commands:\n      - echo "Hello, ${{ name }}"\n'
    )
    (project / ".dstack" / "variables.yaml").write_text("variables:\n  hello:\n    name: world\n")
    res = cli("headless", "run", "hello", "--runner", agent.address, "--name", "lanpool", cwd=project)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "Hello, lanpool\n"


RESUME_WORKFLOWS = """
workflows:
  - name: first
    commands:
      - mkdir -p ck
      - echo "weights of $run_name" > ck/model.ckpt
    artifacts: [ck]

  - name: cont
    resume-from: first:base
    commands:
      - echo "resume=$LANPOOL_RESUME_CKPT has=$(cat $LANPOOL_RESUME_CKPT)"

  - name: maybe
    resume-from: ${{ from }}
    commands:
      - echo "resume=[${LANPOOL_RESUME_CKPT:-none}]"
"""


def test_resume_from_in_the_workflow_and_the_flag_that_overrides_it(agent, cli, make_project):
    project = make_project(RESUME_WORKFLOWS, files={".lanpool/variables.yaml": "variables:\n  maybe:\n    from: ''\n"})
    # Every run names the runner: other agents announcing on 127.0.0.1 must not matter.
    missing = cli("headless", "run", "cont", "--runner", agent.address, cwd=project)
    assert missing.returncode == 4, missing.stderr
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    assert (
        ".lanpool/workflows.yaml:10: workflow 'cont': resume-from 'first:base': 'first' tagged 'base' has no "
        "finished job yet: run `app headless run first --tag base` first" in missing.stderr
    )
    cli("headless", "run", "--runner", agent.address, "first", "--tag", "base", cwd=project, check=True)
    base = json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["run"]
    cli("headless", "run", "--runner", agent.address, "first", cwd=project, check=True)
    newer = json.loads(cli("headless", "status", "--json", check=True).stdout)[0]["run"]

    res = cli("headless", "run", "--runner", agent.address, "cont", cwd=project, check=True)
    assert res.stdout == f"resume=ck/model.ckpt has=weights of {base}\n"
    assert "cont: resuming from ck/model.ckpt of job" in res.stderr and f"(run {base})" in res.stderr
    res = cli(
        "headless", "run", "--runner", agent.address, "cont", "--resume", newer, cwd=project, check=True
    )  # the flag wins
    assert res.stdout == f"resume=ck/model.ckpt has=weights of {newer}\n"

    assert (
        cli("headless", "run", "--runner", agent.address, "maybe", cwd=project, check=True).stdout == "resume=[none]\n"
    )
    res = cli("headless", "run", "--runner", agent.address, "maybe", "--from", newer, cwd=project, check=True)
    assert res.stdout == "resume=[ck/model.ckpt]\n"
    bad = cli("headless", "run", "--runner", agent.address, "maybe", "--from", "no-such-run", cwd=project)
    assert bad.returncode == 4 and bad.stderr.count("\n") == 1
    assert "resume-from 'no-such-run': no run or job named 'no-such-run'" in bad.stderr
    nockpt = cli("headless", "run", "--runner", agent.address, "maybe", "--from", "first:nope", cwd=project)
    assert nockpt.returncode == 4 and "'first' tagged 'nope' has no finished job yet" in nockpt.stderr
