"""The short path of `run`: the attach channel opened beside the submit, and the
command line of `run`/`plan` parsed by their parser alone, the same as by the whole one.
The in-process part (unit); the rest: tests/integration/test_dispatch_path.py."""

import pytest

from lanpool.app.cli import parser as cli_parser
from tests.runner_jobs import job_log, open_session, runner, wait_state  # noqa: F401  (runner: a fixture)

ARGVS = [
    ["run", "echo"],
    ["run", "--runner", "r1", "-d", "train", "--lr", "3"],
    ["run", "train", "--runner", "r2", "--env", "A=1"],
    ["run"],
    ["plan", "train", "--no-cache"],
    ["plan", "--reuse", "train", "--epochs", "2"],
]


@pytest.mark.parametrize("argv", ARGVS)
def test_a_verb_alone_parses_as_the_whole_command_line(argv):
    whole = cli_parser.build_parser()
    alone = cli_parser.build_parser(only=argv[0])
    assert set(alone.verb_parsers) == {argv[0]}
    head, workflow, _ = cli_parser._split_at_workflow(whole, argv[0], argv[1:])
    words = [argv[0], *head, *(["--", workflow] if workflow is not None else [])]
    assert vars(alone.parse_args(words)) == vars(whole.parse_args(words))
    parsed = vars(cli_parser.parse_args(argv))
    assert {k: parsed[k] for k in vars(whole.parse_args(words))} == vars(whole.parse_args(words))


def test_a_wrong_option_before_the_name_is_still_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_parser.parse_args(["run", "--runnr", "x", "train"])
    assert exc.value.code == 2
    assert "--runnr is not an option of `run`" in capsys.readouterr().err


def test_other_verbs_and_help_still_see_every_verb(capsys):
    assert cli_parser.parse_args(["status", "-n", "3"]).limit == 3
    with pytest.raises(SystemExit):
        cli_parser.parse_args(["--help"])
    out = capsys.readouterr().out
    assert all(verb in out for verb in ("run", "plan", "status", "logs", "secrets"))
