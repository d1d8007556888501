"""`app help [TOPIC]` (app/cli/help_topics.py) on the clone's docs (lanpool/docs links docs/); the
installed wheel's: tests/system/test_wheel.py."""

from pathlib import Path

from lanpool.app.cli.help_topics import main, topics

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_doc_and_schema_is_a_topic():
    names = set(topics())
    assert {p.stem for p in DOCS.glob("*.md")} <= names
    assert {"workflows.schema", "variables.schema"} <= names


def test_a_topic_prints_its_file(capsys):
    assert main(["cli"]) == 0
    assert capsys.readouterr().out == (DOCS / "cli.md").read_text()
    assert main(["cli.md"]) == 0  # the file's name works too


def test_a_topic_is_matched_never_opened_as_a_path(capsys):
    for bad in ("../README", "/etc/passwd", "cli/../../pyproject.toml", "\x1b]0;x\x07", ""):
        assert main([bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no topic" in err and "\x1b" not in err
    assert main(["cli", "tui"]) == 2 and "one topic" in capsys.readouterr().err
    assert main(["--nope"]) == 2
