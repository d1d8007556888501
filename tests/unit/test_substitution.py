"""Variable substitution: the syntaxes, shell variables left alone, built-ins,
$variables_as_args, typed CLI overrides, and that no value can run anything.
The in-process part (unit); the rest: tests/integration/test_substitution.py."""

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lanpool.app.workflows import Project, WorkflowError, load_workflows
from lanpool.app.workflows.resolve import coerce_override, render_value, resolve
from lanpool.app.workflows.substitute import (
    UndefinedVariable,
    UnsafeVariable,
    substitute_command,
    substitute_commands,
    substitute_text,
)

BUILTINS = {"run_name": "swift-otter-1", "job_id": "0123abcd"}


def _project(root: Path, workflows: str, variables: str | None = None) -> Project:
    (root / ".lanpool").mkdir(parents=True, exist_ok=True)
    (root / ".lanpool" / "workflows.yaml").write_text(textwrap.dedent(workflows))
    if variables is not None:
        (root / ".lanpool" / "variables.yaml").write_text(textwrap.dedent(variables))
    return load_workflows(root)


def _run(command: str, cwd: Path) -> tuple[str, str]:
    result = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, timeout=10)
    return result.stdout.decode("utf-8", "surrogateescape"), result.stderr.decode("utf-8", "surrogateescape")


def _bash(command: str, cwd: Path) -> str:
    return _run(command, cwd)[0]


@pytest.mark.parametrize(
    "template", ["$name", "${name}", "${{ name }}", "${{name}}", "${{ variables.name }}", "${{variables.name}}"]
)
def test_every_syntax_substitutes(template):
    assert substitute_text(f"a/{template}/b", {"name": "gpt2"}) == "a/gpt2/b"
    assert substitute_command(f"echo {template}", {"name": "gpt2"}) == "echo gpt2"


def test_a_longer_name_is_another_variable():
    assert substitute_text("$name $name_x ${name}_x", {"name": "v"}) == "v $name_x v_x"


@pytest.mark.parametrize("text", ["$HOME", "$PATH", "${UNDEFINED_SHELL}", "$1", "$$", "$?", "${#x}", "$", "a$"])
def test_shell_variables_are_left_alone(text):
    values = {"model": "117M"}
    assert substitute_text(text, values) == text
    assert substitute_command(f"echo {text} $model", values) == f"echo {text} 117M"


def test_shell_variables_still_expand_in_the_shell(tmp_path: Path):
    command = substitute_command('printf "%s|%s" "$HOME" $model', {"model": "x"})
    assert command == 'printf "%s|%s" "$HOME" x'
    assert _bash(command, tmp_path) == f"{os.environ['HOME']}|x"


def test_double_brace_names_no_shell_variable():
    with pytest.raises(UndefinedVariable) as exc:
        substitute_text("${{ undefined }}", {"x": "1"})
    assert exc.value.name == "undefined"
    with pytest.raises(UndefinedVariable):
        substitute_command("echo ${{ variables.undefined }}", {})


WORKFLOWS = """\
workflows:
  - name: train
    image: $image
    commands:
      - echo $run_name ${job_id} ${{ run_name }}
      - printf '%s\\n' $variables_as_args
      - echo lr=$lr amp=$amp steps=${{ steps }} model=${model}
    env:
      MODEL: $model
      OUT: out/${{ variables.run_tag }}-$run_name
      AMP: $amp
    artifacts:
      - checkpoints/$model
      - path: logs/${run_tag}
        nodes: all
    resources:
      gpu: ${{ gpus }}
      memory: $mem
    nodes: ${{ nodes }}

  - name: tune
    provider: python
    script: tune.py
    args: ["--model", "$model", "--note", "$note", "$variables_as_args"]

  - name: sample
    provider: python
    script: $script
    args: --model ${model} --temperature $temperature
"""


VARIABLES = """\
variables:
  global:
    model: 117M
    image: python:3.11-slim
    run_tag: base
    script: sample.py
  train:
    lr: 0.001
    amp: true
    steps: 100
    gpus: 2
    mem: 16GB
    nodes: 1
    msg: "it's a $(touch pwned) test"
  tune:
    trials: 8
    note: "a b"
  sample:
    temperature: 0.7
"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return _project(tmp_path / "proj", WORKFLOWS, VARIABLES)


def test_builtins(project: Project):
    job = resolve(project, "train", {}, BUILTINS)
    assert job.commands[0] == "echo swift-otter-1 0123abcd swift-otter-1"
    assert job.env["OUT"] == "out/base-swift-otter-1"


GLOBAL_ARGS = ["--model", "117M", "--image", "python:3.11-slim", "--run_tag", "base", "--script", "sample.py"]


def test_variables_as_args_hold_every_variable_escaped(project: Project, tmp_path: Path):
    job = resolve(project, "train", {}, BUILTINS)
    lines = _bash(job.commands[1], tmp_path).splitlines()
    assert lines == [
        *GLOBAL_ARGS,  # the globals too (dstack's GPT-2 tutorial takes --model from them)
        "--lr",
        "0.001",
        "--amp",
        "true",
        "--steps",
        "100",
        "--gpus",
        "2",
        "--mem",
        "16GB",
        "--nodes",
        "1",
        "--msg",
        "it's a $(touch pwned) test",
    ]
    assert not (tmp_path / "pwned").exists()


def test_variables_as_args_take_overrides(project: Project, tmp_path: Path):
    job = resolve(project, "train", {"lr": "0.5", "model": "345M"}, BUILTINS)
    argv = _bash(job.commands[1], tmp_path).splitlines()
    assert argv[:2] == ["--model", "345M"] and argv[8:10] == ["--lr", "0.5"]
    assert "model=345M" in job.commands[2]


def test_variables_as_args_in_python_args(project: Project, tmp_path: Path):
    job = resolve(project, "tune", {}, BUILTINS)
    assert len(job.commands) == 1 and job.commands[0].startswith("python tune.py ")
    argv = _bash(job.commands[0].replace("python tune.py", "printf '%s\\n'", 1), tmp_path).splitlines()
    assert argv == ["--model", "117M", "--note", "a b", *GLOBAL_ARGS, "--trials", "8", "--note", "a b"]


def test_python_args_as_a_string(project: Project):
    job = resolve(project, "sample", {"temperature": "1.5"}, BUILTINS)
    assert job.commands == ["python sample.py --model 117M --temperature 1.5"]


def test_commands_and_bools(project: Project):
    job = resolve(project, "train", {}, BUILTINS)
    assert job.commands[2] == "echo lr=0.001 amp=true steps=100 model=117M"


def test_env_artifacts_resources_nodes_image(project: Project):
    job = resolve(project, "train", {}, BUILTINS)
    assert job.env == {
        # the workflow's env: its values win over the variables' copies
        "MODEL": "117M",
        "OUT": "out/base-swift-otter-1",
        "AMP": "true",
        # every other variable, in upper case, as dstack did
        "IMAGE": "python:3.11-slim",
        "RUN_TAG": "base",
        "SCRIPT": "sample.py",
        "LR": "0.001",
        "STEPS": "100",
        "GPUS": "2",
        "MEM": "16GB",
        "NODES": "1",
        "MSG": "it's a $(touch pwned) test",
    }
    assert job.artifacts == ["checkpoints/117M"] and job.artifacts_all_nodes == ["logs/base"]
    assert job.resources == {"gpu": 2, "memory_mb": 16 * 1024}
    assert job.nodes == 1
    assert job.image == "python:3.11-slim"


def test_env_values_are_not_shell_escaped(project: Project):
    job = resolve(project, "train", {"model": "a b'c"}, BUILTINS)
    assert job.env["MODEL"] == "a b'c"
    assert job.artifacts == ["checkpoints/a b'c"]


def test_overrides_reach_resources_and_nodes(project: Project):
    job = resolve(project, "train", {"gpus": "4", "mem": "32GB", "nodes": "3"}, BUILTINS)
    assert job.resources == {"gpu": 4, "memory_mb": 32 * 1024}
    assert job.nodes == 3


def test_bad_resource_after_substitution(project: Project):
    with pytest.raises(WorkflowError) as exc:
        resolve(project, "train", {"mem": "lots"}, BUILTINS)
    assert "resources.memory" in str(exc.value) and "'train'" in str(exc.value)


def test_artifact_escaping_the_workspace_after_substitution(project: Project):
    with pytest.raises(WorkflowError) as exc:
        resolve(project, "train", {"model": "../../etc"}, BUILTINS)
    assert "artifact path" in str(exc.value)


@pytest.mark.parametrize(
    ("text", "default", "expected"),
    [
        ("5", 3, 5),
        ("-2", 3, -2),
        ("0.5", 0.1, 0.5),
        ("3", 0.1, 3.0),
        ("1e-4", 0.1, 1e-4),
        ("true", False, True),
        ("Yes", False, True),
        ("0", True, False),
        ("off", True, False),
        ("345M", "117M", "345M"),
        ("", "x", ""),
        ("7", None, "7"),
    ],
)
def test_overrides_are_typed_by_the_default(text, default, expected):
    value = coerce_override("v", text, default)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    ("name", "text", "default", "words"),
    [
        ("steps", "many", 100, ["--steps", "100", "'many'"]),
        ("lr", "fast", 0.001, ["--lr", "0.001", "'fast'"]),
        ("amp", "maybe", True, ["--amp", "true", "'maybe'"]),
        ("steps", "1.5", 100, ["--steps", "100"]),
    ],
)
def test_bad_override_names_the_variable_and_default(name, text, default, words):
    with pytest.raises(WorkflowError) as exc:
        coerce_override(name, text, default)
    assert all(w in str(exc.value) for w in words), str(exc.value)


def test_bad_override_through_resolve(project: Project):
    with pytest.raises(WorkflowError) as exc:
        resolve(project, "train", {"steps": "lots"}, BUILTINS)
    assert "--steps" in str(exc.value) and "100" in str(exc.value)


def test_bools_render_as_true_false(project: Project):
    rendered = (render_value(True), render_value(False), render_value(3), render_value(0.5))
    assert rendered == ("true", "false", "3", "0.5")
    job = resolve(project, "train", {"amp": "no"}, BUILTINS)
    assert job.env["AMP"] == "false" and "amp=false" in job.commands[2]
    assert job.variables["amp"] == "false"


# (template, how the expected output follows from the value)
TEMPLATES = [
    ("printf '%s' $v", lambda v: v),  # unquoted: the value stays a single word
    ("printf '%s' \"$v\"", lambda v: v),
    ("printf '%s' \"${v}\"", lambda v: v),
    ("printf '%s' '${{ v }}'", lambda v: v),
    # command substitution strips trailing newlines
    ("printf '%s' \"$(printf '%s' \"$v\")\"", lambda v: v.rstrip("\n")),
    ("printf '%s' \"$(printf '%s' $v)\"", lambda v: v.rstrip("\n")),
    ("echo ok # $v", lambda v: "ok\n"),  # a comment: nothing substituted, nothing run
    # quoting the lexer must follow: $'\'' is one quote character; `...` strips a level of \ even in '...'
    ("printf '%s' $'\\''$v", lambda v: "'" + v),
    ("printf '%s' $'a\\t${{ v }}b'", lambda v: "a\t" + v + "b"),
    ("printf '%s' \"`printf '%s' '$v'`\"", lambda v: v.rstrip("\n")),
    ("printf '%s' \"`printf '%s' \"$v\"`\"", lambda v: v.rstrip("\n")),
]


NASTY = [
    "$(touch pwned)",
    "'; touch pwned; '",
    '"; touch pwned; "',
    "`touch pwned`",
    "\\",
    "\n\ntouch pwned",
    "a b\tc",
    "",
    "-n",
    "$HOME",
    "${{ v }}",
    "$v",
    "'",
    '"',
    "\\'",
    '\\"',
    "$(touch pwned)\n",
    "*",
    "~",
    "!!",
    "#",
    "a\\\nb",
    "\\$(touch pwned)",
    ">pwned",
    "|touch pwned",
    ";touch pwned&",
    "$'\\x41'",
    "\x7f\x01",
    "\ntouch pwned\n",
    "`touch$IFS./pwned`",
    "$(touch$IFS./pwned)",
    "\n`touch$IFS./pwned`\n",
]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inject")


def _check(template: str, expected, value: str, cwd: Path) -> None:
    command = substitute_command(template, {"v": value})
    out, err = _run(command, cwd)
    assert (out, err) == (expected(value), ""), (template, value, command)  # no "command not found" either
    assert list(cwd.iterdir()) == [], (template, value, command)  # nothing (no "pwned") was created


@pytest.mark.parametrize(("template", "expected"), TEMPLATES, ids=[t for t, _ in TEMPLATES])
@pytest.mark.parametrize("value", NASTY)
def test_nasty_values_come_out_as_text(scratch: Path, template, expected, value):
    _check(template, expected, value, scratch)


@pytest.mark.parametrize(("template", "expected"), TEMPLATES, ids=[t for t, _ in TEMPLATES])
def test_any_value_comes_out_as_text(scratch: Path, template, expected):
    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.text().filter(lambda s: "\x00" not in s))
    def check(value: str) -> None:
        _check(template, expected, value, scratch)

    check()


# $variables_as_args is several words: wherever it is written, they come out as words.
ARGS_TEMPLATES = [
    "printf '%s\\0' $variables_as_args",
    "printf '%s\\0' ${{ variables_as_args }}",
    "printf '%s\\0' '$variables_as_args'",
    "printf '%s\\0' \"${variables_as_args}\"",
    "printf '%s\\0' `printf '%s\\n' $variables_as_args`",  # output re-split at whitespace
    "printf '%s\\0' $(printf '%s\\n' \"$variables_as_args\")",
    "echo ok # $variables_as_args",
]


@pytest.fixture(scope="module")
def args_project(tmp_path_factory) -> Project:
    root = tmp_path_factory.mktemp("args")
    (root / "cwd").mkdir()
    workflows = "workflows:\n" + "".join(
        f"  - name: w{i}\n    commands:\n      - {json.dumps(t)}\n" for i, t in enumerate(ARGS_TEMPLATES)
    )
    variables = "variables:\n" + "".join(f"  w{i}:\n    msg: x\n" for i in range(len(ARGS_TEMPLATES)))
    return _project(root, workflows, variables)


def _args_output(i: int, value: str) -> str | None:
    """What the template prints; None where pathname expansion makes it depend on the disk."""
    if ARGS_TEMPLATES[i].startswith("echo ok"):
        return "ok\n"
    if "`" in ARGS_TEMPLATES[i] or "$(" in ARGS_TEMPLATES[i]:  # unquoted substitution: split at IFS, globbed
        if any(c in value for c in "*?["):
            return None
        return "".join(w + "\0" for w in ["--msg", *re.split("[ \t\n]+", value)] if w)
    return "--msg\0" + value + "\0"


def _check_args(project: Project, i: int, value: str) -> None:
    cwd = project.root / "cwd"
    job = resolve(project, f"w{i}", {"msg": value}, BUILTINS)
    out, err = _run(job.commands[0], cwd)
    assert err == "", (job.commands[0], err)  # no "command not found"
    expected = _args_output(i, value)
    assert expected is None or out == expected, job.commands[0]
    assert list(cwd.iterdir()) == [], job.commands[0]


@pytest.mark.parametrize("i", range(len(ARGS_TEMPLATES)), ids=ARGS_TEMPLATES)
@pytest.mark.parametrize("value", NASTY)
def test_variables_as_args_nasty_values(args_project: Project, i: int, value: str):
    _check_args(args_project, i, value)


@pytest.mark.parametrize("i", range(len(ARGS_TEMPLATES)), ids=ARGS_TEMPLATES)
def test_variables_as_args_any_value(args_project: Project, i: int):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.text().filter(lambda s: "\x00" not in s))
    def check(value: str) -> None:
        _check_args(args_project, i, value)

    check()


HOSTILE = [
    "a; touch pwned",
    "x[$(touch pwned)]",
    "`touch pwned`",
    "$(touch pwned)",
    "\ntouch pwned\n",
    "'; touch pwned; '",
    '"; touch pwned; "',
    "a)\ntouch pwned\n(",
    ";; esac; touch pwned; case x in x)",
    "}; touch pwned; {",
    "EOF",
    "x\nEOF\ntouch pwned",
    "]] || touch pwned; [[ 1",
    "1 )) || touch pwned; (( 1",
    "-v",
    "a[$(touch pwned)]=1",
    "\\",
    "'",
    '"',
    ">pwned",
    "$'\\x27'; touch pwned",
]


VALUES = st.one_of(st.sampled_from(HOSTILE), st.text().filter(lambda s: "\x00" not in s))


REFS = st.sampled_from(["$v", "${v}", "${{ v }}"])


@st.composite
def _word(draw, depth: int = 0):
    """One argument whose text comes from the variable, in some quoting or substitution."""
    ref = draw(REFS)
    leaf = draw(
        st.sampled_from(
            [
                "{r}",
                '"{r}"',
                "'{r}'",
                "$'{r}'",
                '"a {r} b"',
                "x{r}.y",
                '"${{u:-{r}}}"',
                "${{u:-{r}}}",
                '"${{w#{r}}}"',
                '"${{u:-"{r}"}}"',
            ]
        )
    ).format(r=ref)
    if depth >= 2 or draw(st.booleans()):
        return leaf
    inner = draw(_word(depth + 1))
    forms = [
        '"$(printf %s {w})"',
        "$(printf %s {w})",
        '"$(case x in x) printf %s {w};; esac)"',
        '"$(case x in (x) printf %s {w};; *) :;; esac)"',
        "$(case {w} in *) printf ok;; esac)",
        '"$(case x in y|x) printf %s {w} ;;\n esac)"',
        '"$(if true; then printf %s {w}; fi)"',
        '"$( (printf %s {w}) )"',
        '"$(x={w}; printf %s "$x")"',
        '"${u:-$(printf %s {w})}"',
    ]
    if "`" not in inner:
        forms += ['"`printf %s {w}`"', "`printf %s {w}`"]
    return draw(st.sampled_from(forms)).replace("{w}", inner)


@st.composite
def _safe_line(draw):
    word, ref = draw(_word()), draw(REFS)
    return (
        draw(
            st.sampled_from(
                [
                    "printf '%s\\n' {w}",
                    "printf '%s\\n' {w} # {r} $(touch pwned)",
                    "[[ {w} == y ]] || printf '%s\\n' {w}",
                    "case {w} in *) printf '%s\\n' {w};; esac",
                    "x={w}; printf '%s\\n' \"$x\"",
                    "export X={w}",
                    "cat <<EOF\n{r} {w}\nEOF",
                    "cat <<'EOF'\n{r} $(touch pwned)\nEOF",
                    "cat <<-EOF\n\t{r}\n\tEOF",
                    "read -r y <<< {w}; printf '%s\\n' \"$y\"",
                    "[ {w} = y ] || printf '%s\\n' {w}",
                    "printf '%s\\n' \\{r} '\\{r}'",
                    'bash -c \'printf "%s\\n" "$1"\' _ {w}',
                    "python3 -S -c 'import sys; print(sys.argv[1])' {w}",
                    "arr=( {w} x ); printf '%s\\n' \"${arr[@]}\"",
                    "f() { printf '%s\\n' \"$1\"; }; f {w}",
                    "cat <(printf '%s\\n' {w}) | cat",
                    "[[ {w} =~ x ]] || :",
                    "if [ -n {w} ]; then printf '%s\\n' {w}; fi",
                    "cat <<EOF\n{r}\\\nx\nEO\\\nF\nprintf '%s\\n' {w}",
                    "printf '%s\\n' \"$( # ) {r}\n printf %s {w})\"",
                ]
            )
        )
        .replace("{w}", word)
        .replace("{r}", ref)
    )


@st.composite
def _evaluated_line(draw):
    word, ref = draw(_word()), draw(REFS)
    return (
        draw(
            st.sampled_from(
                [
                    "echo $(( {r} + 1 ))",
                    "(( {r} ))",
                    "[[ {r} -gt 0 ]]",
                    "[[ {w} -gt 0 ]]",
                    "[[ 1 -eq 1 && {w} == x ]]",
                    "let y={r}",
                    "a[{r}]=1",
                    "echo ${a[{r}]}",
                    '"${a[{w}]}"',
                    "declare -i y={r}",
                    "declare -i y; y={w}",
                    "y={w}; (( y ))",
                    "for y in {w}; do (( y )); done",
                    "echo $[{r}]",
                    'echo "${s:{r}}"',
                    "echo $(( $(printf %s {w}) ))",
                    "for ((i={r}; i<1; i++)); do :; done",
                    "read {w} <<< x",
                    "printf -v {w} x",
                    "[[ -v {w} ]]",
                    "test -v {w}",
                    'eval "echo {r}"',
                    "bash -c 'echo {r}'",
                    "unset {w}",
                    "declare -n y={w}",
                    'declare "{r}=1"',
                    "echo `echo \\`echo {r}\\``",
                    "[[ ( {w} -gt 0 ) ]]",
                    'timeout 5 bash -c "echo {r}"',
                    "find . -maxdepth 0 -exec sh -c 'echo {r}' \\;",
                    "python3 -c \"print('{r}')\"",
                    "y={w}; let 'z = y + 1'",
                    "export Y={w}; [[ Y -lt 1 ]]",
                ]
            )
        )
        .replace("{w}", word)
        .replace("{r}", ref)
    )


def _run_script(lines: list[str], value: str, cwd: Path, ints: tuple[str, ...] = ()) -> str | None:
    """Runs the substituted script; returns the refusal's message instead if refused."""
    try:
        commands = substitute_commands(lines, {"v": value}, ints=ints)
    except UnsafeVariable as exc:
        assert "\n" not in exc.message and "$v" in exc.message, exc.message
        return exc.message
    out, err = _run("\n".join(commands), cwd)
    assert "command not found" not in err and "pwned" not in os.listdir(cwd), (lines, value, commands, err)
    assert list(cwd.iterdir()) == [], (lines, value, commands)
    return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_safe_line(), min_size=1, max_size=3), value=VALUES)
def test_generated_scripts_never_run_a_value(scratch: Path, lines, value):
    refused = _run_script(lines, value, scratch)
    # Only a value that would end a here-document is refused here: these placements are inert.
    assert refused is None or ("here-document" in refused and "EOF" in value), (lines, value, refused)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(safe=st.lists(_safe_line(), max_size=2), evaluated=_evaluated_line(), value=VALUES, at=st.integers(0, 2))
def test_a_string_where_bash_evaluates_it_is_refused(scratch: Path, safe, evaluated, value, at):
    lines = [*safe[:at], evaluated, *safe[at:]]
    assert _run_script(lines, value, scratch) is not None, (lines, value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    line=st.sampled_from(
        [
            "echo $(( $v + 1 ))",
            "(( $v > -10 )) && echo y",
            "[[ $v -gt -10 ]] && echo y",
            "a[$v+10]=1; echo ${a[$v+10]}",
            "declare -i y=$v; echo $y",
            "let y=$v+1; echo $y",
            'printf "%s\\n" "${s:$v:1}"',
            "y=$v; echo $(( y ))",
        ]
    ),
    value=st.integers(-9, 10**6),
)
def test_a_whole_number_may_stand_in_arithmetic(scratch: Path, line, value):
    assert _run_script([line], str(value), scratch, ints=("v",)) is None


ARITH_WORKFLOWS = """\
workflows:
  - name: count
    commands:
      - echo start
      - if [[ $n -gt 0 ]]; then echo "$(( $n * 2 ))"; fi
  - name: label
    commands:
      - echo "$(case $mode in fast) echo quick ;; *) echo $mode ;; esac)"
"""


def test_a_string_variable_in_arithmetic_is_refused_with_file_and_line(tmp_path: Path):
    project = _project(tmp_path / "p", ARITH_WORKFLOWS, "variables:\n  count:\n    n: '3'\n")
    with pytest.raises(WorkflowError) as exc:
        resolve(project, "count", {}, BUILTINS)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"{project.workflows_file}:3: workflow 'count': command 2: $n is a string"), message
    assert "whole number in variables.yaml (n: 5)" in message


def test_a_whole_number_variable_in_arithmetic_runs(tmp_path: Path):
    project = _project(tmp_path / "p", ARITH_WORKFLOWS, "variables:\n  count:\n    n: 3\n")
    job = resolve(project, "count", {"n": "21"}, BUILTINS)
    assert _bash("\n".join(job.commands), tmp_path) == "start\n42\n"
    with pytest.raises(WorkflowError):  # the override is checked against the default's type first
        resolve(project, "count", {"n": "x[$(touch pwned)]"}, BUILTINS)


def test_case_inside_command_substitution_keeps_a_value_inert(tmp_path: Path):
    project = _project(tmp_path / "p", ARITH_WORKFLOWS, "variables:\n  label:\n    mode: fast\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    job = resolve(project, "label", {"mode": "a; touch pwned"}, BUILTINS)
    assert _bash(job.commands[0], cwd) == "a; touch pwned\n"
    assert list(cwd.iterdir()) == []


def test_a_string_copied_into_env_that_arithmetic_reads_is_refused(tmp_path: Path):
    workflows = """\
workflows:
  - name: loop
    env:
      STEPS: $steps
    commands:
      - for ((i = 0; i < STEPS; i++)); do echo $i; done
"""
    project = _project(tmp_path / "p", workflows, "variables:\n  loop:\n    steps: '2'\n")
    with pytest.raises(WorkflowError) as exc:
        resolve(project, "loop", {}, BUILTINS)
    assert "$steps is a string copied into env STEPS, which arithmetic in the commands reads" in str(exc.value)
    project = _project(tmp_path / "q", workflows, "variables:\n  loop:\n    steps: 2\n")
    job = resolve(project, "loop", {}, BUILTINS)
    assert job.env == {"STEPS": "2"}
