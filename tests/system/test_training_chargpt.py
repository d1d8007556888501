"""The char-GPT recipe: its parts, a real 2-process DDP run with snapshots, resume and sampling."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest
import torch

from lanpool.training.chargpt import CharDataset, CharGPTConfig, LitCharGPT, TextDataModule, main
from lanpool.training.cli_config import parse_config
from lanpool.training.errors import TrainingError
from lanpool.training.gpt_model import GPT, GPTConfig
from lanpool.training.runtime import run_cli

REPO_ROOT = Path(__file__).resolve().parents[2]
STEP_LINE = re.compile(r"^step (\d+) train_loss (\d+\.\d{4}) tokens/s (\d+)$", re.MULTILINE)
VAL_LINE = re.compile(r"^step (\d+) val_loss (\d+\.\d{4})$", re.MULTILINE)
# Set by a surrounding launcher or lanpool job, they would change the run under test.
LAUNCHER_VARS = (
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "LANPOOL_NUM_NODES",
    "LANPOOL_METRICS_FILE",
    "OMP_NUM_THREADS",
)
# Small enough for a few seconds of CPU, big enough to learn the corpus' words.
TINY = [
    "--block-size",
    "32",
    "--batch-size",
    "16",
    "--n-layer",
    "2",
    "--n-head",
    "2",
    "--n-embd",
    "32",
    "--lr",
    "3e-3",
    "--accelerator",
    "cpu",
    "--num-nodes",
    "1",
]


def write_corpus(path: Path, n_chars: int = 30_000) -> Path:
    """Play-shaped text from a small vocabulary: quick to learn, deterministic."""
    rng = random.Random(0)
    words = (
        "the a my thy love night day sweet fair good lord lady heart star moon doth hath speak come go not and of to in"
    ).split()
    lines: list[str] = []
    while sum(map(len, lines)) < n_chars:
        lines.append(rng.choice(["ROMEO", "JULIET", "NURSE", "FRIAR"]) + ":")
        for _ in range(rng.randint(1, 3)):
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 9)))
            lines.append(sentence.capitalize() + rng.choice(".,!?"))
        lines.append("")
    path.write_text("\n".join(lines))
    return path


# --- parts -------------------------------------------------------------------


def test_options_take_both_spellings_and_nodes_default_from_the_environment(monkeypatch):
    monkeypatch.setenv("LANPOOL_NUM_NODES", "3")
    monkeypatch.setenv("LANPOOL_DATA_DIR", "/srv/corpora")
    config = parse_config(CharGPTConfig, ["--max-steps", "7", "--snapshot_every", "5"], "p", "d")
    assert (config.max_steps, config.snapshot_every, config.num_nodes) == (7, 5, 3)
    assert config.data == "/srv/corpora/shakespeare.txt"
    assert config.ckpt_path is None
    assert parse_config(CharGPTConfig, ["--ckpt-path", "a.ckpt"], "p", "d").ckpt_path == "a.ckpt"


def test_windows_pair_each_input_with_the_next_characters():
    ids = torch.arange(10)
    windows = CharDataset(ids, block_size=4)
    assert len(windows) == 6
    x, y = windows[5]
    assert x.tolist() == [5, 6, 7, 8] and y.tolist() == [6, 7, 8, 9]
    assert len(CharDataset(ids, block_size=4, stride=4)) == 2


def test_an_untrained_model_predicts_uniformly_and_generates_the_asked_length():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=32))
    idx = torch.randint(50, (3, 16))
    logits, loss = model(idx, torch.randint(50, (3, 16)))
    assert logits.shape == (3, 16, 50)
    assert abs(loss.item() - math.log(50)) < 0.2
    # Longer than block_size: generation crops its context.
    assert model.generate(idx[:1, :2], 30).shape == (1, 32)
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_a_url_is_fetched_once_per_node_into_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LANPOOL_DATA_DIR", str(tmp_path))
    with fsspec.open("memory://corpus/play.txt", "w") as file:
        file.write("to be or not to be, that is the question\n" * 20)
    data = TextDataModule("memory://corpus/play.txt", block_size=8, batch_size=4, val_fraction=0.1)
    data.prepare_data()
    assert Path(data.local_path).parent == tmp_path / "cache"
    assert Path(data.local_path).name.endswith("-play.txt")
    data.setup("fit")
    assert data.vocab == "".join(sorted(set("to be or not to be, that is the question\n")))
    assert len(data.val_set) == (84 - 9) // 8 + 1


def test_text_too_short_for_a_batch_is_a_clear_error(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("tiny")
    data = TextDataModule(str(path), block_size=32, batch_size=16, val_fraction=0.1)
    with pytest.raises(TrainingError, match="too short"):
        data.setup("fit")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--data", "/nonexistent/text.txt"], "no text at /nonexistent/text.txt: run scripts/fetch-data"),
        (["--ckpt-path", "last"], "needs an explicit checkpoint file"),
        (["--ckpt-path", "/nonexistent.ckpt"], "checkpoint /nonexistent.ckpt does not exist"),
        (["sample", "--ckpt", "/nonexistent.ckpt"], "checkpoint /nonexistent.ckpt does not exist"),
        (["--snapshot-every", "0"], "--snapshot-every must be at least 1"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(argv, message, capsys):
    assert run_cli(main, argv) == 2
    err = capsys.readouterr().err
    assert err == f"error: {err.removeprefix('error: ').strip()}\n" and message in err


# --- a real run ----------------------------------------------------------------


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """30 steps on 2 processes (DDP over gloo), a snapshot every 10, keeping 2."""
    root = tmp_path_factory.mktemp("chargpt")
    corpus = write_corpus(root / "corpus.txt")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["LANPOOL_METRICS_FILE"] = str(root / "metrics.jsonl")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.chargpt",
            "train",
            "--data",
            str(corpus),
            "--out",
            str(root / "ck"),
            "--devices",
            "2",
            "--max-steps",
            "30",
            "--log-every",
            "10",
            "--snapshot-every",
            "10",
            "--keep-snapshots",
            "2",
            "--eval-every",
            "30",
            "--eval-batches",
            "2",
            *TINY,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return root, corpus, result.stdout


@pytest.mark.slow
def test_two_processes_train_and_rank_zero_prints_falling_loss(ddp_run):
    _, _, stdout = ddp_run
    steps = [(int(s), float(loss), int(rate)) for s, loss, rate in STEP_LINE.findall(stdout)]
    assert [s for s, _, _ in steps] == [10, 20, 30], stdout
    assert steps[-1][1] < steps[0][1] - 0.3, stdout
    assert all(rate > 0 for _, _, rate in steps)
    assert [int(s) for s, _ in VAL_LINE.findall(stdout)] == [30], stdout


@pytest.mark.slow
def test_snapshots_hold_model_optimizer_and_step_and_the_oldest_are_dropped(ddp_run):
    root, _, stdout = ddp_run
    ck = root / "ck"
    assert sorted(p.name for p in ck.iterdir()) == ["snapshot.ckpt", "step-20.ckpt", "step-30.ckpt"]
    snapshot = torch.load(ck / "step-20.ckpt", weights_only=False, map_location="cpu")
    assert snapshot["global_step"] == 20
    assert snapshot["optimizer_states"] and snapshot["state_dict"]
    assert "epoch" in snapshot
    assert torch.load(ck / "snapshot.ckpt", weights_only=False, map_location="cpu")["global_step"] == 30
    assert f"saved checkpoint to {ck / 'snapshot.ckpt'} at step 30" in stdout


@pytest.mark.slow
def test_metrics_file_has_increasing_steps_of_train_loss(ddp_run):
    root, _, _ = ddp_run
    lines = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert "hparams" in lines[0] and lines[0]["hparams"]["n_layer"] == 2
    train = [r for r in lines[1:] if r["name"] == "train_loss"]
    # Lightning's logging step: the 0-based index of the step it was logged at.
    assert [r["step"] for r in train] == [9, 19, 29]
    assert all(isinstance(r["value"], float) for r in train)
    assert {r["name"] for r in lines[1:]} == {"train_loss", "tokens_per_s", "val_loss"}


@pytest.mark.slow
# Resuming into another --out is meant here: Lightning says so once.
@pytest.mark.filterwarnings("ignore:The dirpath has changed")
def test_resuming_a_snapshot_continues_the_global_step(ddp_run, tmp_path, capsys, monkeypatch):
    root, corpus, _ = ddp_run
    out = tmp_path / "resumed"
    metrics = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("LANPOOL_METRICS_FILE", str(metrics))
    code = run_cli(
        main,
        [
            "train",
            "--data",
            str(corpus),
            "--out",
            str(out),
            "--devices",
            "1",
            "--max-steps",
            "40",
            "--log-every",
            "10",
            "--snapshot-every",
            "10",
            "--eval-every",
            "100",
            "--eval-batches",
            "1",
            "--ckpt-path",
            str(root / "ck" / "step-20.ckpt"),
            *TINY,
        ],
    )
    stdout = capsys.readouterr().out
    assert code == 0
    assert [int(s) for s, _, _ in STEP_LINE.findall(stdout)] == [30, 40], stdout
    assert torch.load(out / "snapshot.ckpt", weights_only=False, map_location="cpu")["global_step"] == 40
    steps = [json.loads(line).get("step") for line in metrics.read_text().splitlines()[1:]]
    assert min(steps) >= 20


@pytest.mark.slow
def test_sample_prints_the_prompt_and_the_asked_number_of_characters(ddp_run, capsys):
    root, corpus, _ = ddp_run
    ckpt = str(root / "ck" / "snapshot.ckpt")
    assert run_cli(main, ["sample", "--ckpt", ckpt, "--prompt", "ROMEO:", "--max-new-tokens", "80", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("ROMEO:") and text.endswith("\n")
    assert len(text) == len("ROMEO:") + 80 + 1
    assert set(text) <= set(corpus.read_text())
    # The vocabulary travels in the checkpoint.
    assert LitCharGPT.load_from_checkpoint(ckpt).hparams.vocab == "".join(sorted(set(corpus.read_text())))


@pytest.mark.slow
def test_sample_rejects_characters_the_model_never_saw(ddp_run, capsys):
    root, _, _ = ddp_run
    assert run_cli(main, ["sample", "--ckpt", str(root / "ck" / "snapshot.ckpt"), "--prompt", "ROMEO|"]) == 2
    assert "never saw: '|'" in capsys.readouterr().err
