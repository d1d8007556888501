"""The GPT-2 fine-tuning recipe: the real BPE offline, then prepare, train and predict."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from transformers import GPT2TokenizerFast

from lanpool.training.errors import TrainingError
from lanpool.training.gpt2_finetune import main
from lanpool.training.gpt2_tokenizer import find_bpe_dir, load_gpt2_tokenizer
from lanpool.training.runtime import run_cli


def write_corpus(path: Path, n_words: int = 6000) -> Path:
    rng = random.Random(0)
    words = "the a my thy love night day sweet fair good lord lady heart star moon doth hath".split()
    lines = []
    for _ in range(n_words // 8):
        lines.append(rng.choice(["ROMEO", "JULIET"]) + ": " + " ".join(rng.choice(words) for _ in range(8)) + ".")
    path.write_text("\n".join(lines))
    return path


@pytest.fixture(scope="module")
def tokenizer() -> GPT2TokenizerFast:
    return load_gpt2_tokenizer()


def test_ids_are_gpt2s_own(tokenizer):
    assert len(tokenizer) == 50257
    assert tokenizer("Hello world")["input_ids"] == [15496, 995]
    assert tokenizer(" the")["input_ids"] == [262]
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer.eos_token_id == 50256
    text = "ROMEO: But, soft! what light through yonder window breaks?\n"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_a_saved_tokenizer_loads_back_with_the_same_ids(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    again = GPT2TokenizerFast.from_pretrained(tmp_path)
    assert len(again) == 50257
    assert again("Hello world, 'tis a fair day")["input_ids"] == tokenizer("Hello world, 'tis a fair day")["input_ids"]


def test_a_tokenizer_dir_is_used_as_given_and_checked(tmp_path):
    shutil.copy(Path(find_bpe_dir()) / "encoder.json", tmp_path)
    with pytest.raises(TrainingError, match="lacks vocab.bpe"):
        load_gpt2_tokenizer(str(tmp_path))
    shutil.copy(Path(find_bpe_dir()) / "vocab.bpe", tmp_path)
    assert load_gpt2_tokenizer(str(tmp_path))("Hello world")["input_ids"] == [15496, 995]


def test_no_subcommand_or_no_prepared_data_exits_2(tmp_path, capsys):
    assert main([]) == 2
    assert "prepare,train,predict" in capsys.readouterr().err
    assert run_cli(main, ["train", "--dataset", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: no prepared data in {tmp_path}: run `prepare` first\n"


@pytest.mark.slow
def test_prepare_train_predict(tmp_path, capsys, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.txt")
    blocks = tmp_path / "blocks"
    assert (
        run_cli(
            main,
            ["prepare", "--data", str(corpus), "--out", str(blocks), "--block-size", "32", "--val-fraction", "0.1"],
        )
        == 0
    )
    meta = json.loads((blocks / "meta.json").read_text())
    train_blocks = torch.load(blocks / "train.pt", weights_only=True)
    val_blocks = torch.load(blocks / "val.pt", weights_only=True)
    assert train_blocks.shape == (meta["train_blocks"], 32) and val_blocks.shape == (meta["val_blocks"], 32)
    assert meta["train_blocks"] + meta["val_blocks"] == meta["tokens"] // 32
    # The blocks are the text's GPT-2 ids, in order.
    tokenizer = GPT2TokenizerFast.from_pretrained(blocks / "tokenizer")
    assert train_blocks[0].tolist() == tokenizer(corpus.read_text())["input_ids"][:32]

    metrics = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("LANPOOL_METRICS_FILE", str(metrics))
    out = tmp_path / "model"
    capsys.readouterr()
    assert (
        run_cli(
            main,
            [
                "train",
                "--dataset",
                str(blocks),
                "--out",
                str(out),
                "--max-steps",
                "30",
                "--batch-size",
                "4",
                "--lr",
                "3e-3",
                "--log-every",
                "10",
                "--eval-every",
                "30",
                "--eval-batches",
                "2",
                "--accelerator",
                "cpu",
                "--devices",
                "1",
                "--num-nodes",
                "1",
            ],
        )
        == 0
    )
    stdout = capsys.readouterr().out
    assert f"saved model to {out} at step 30" in stdout
    losses = [json.loads(line) for line in metrics.read_text().splitlines()[1:]]
    train = [r["value"] for r in losses if r["name"] == "train_loss"]
    assert len(train) == 3 and train[-1] < train[0], train
    for name in ("config.json", "model.safetensors", "tokenizer.json", "lightning.ckpt"):
        assert (out / name).exists(), name
    assert torch.load(out / "lightning.ckpt", weights_only=False)["global_step"] == 30

    assert (
        run_cli(
            main, ["predict", "--ckpt-dir", str(out), "--input_str", "ROMEO:", "--max_new_tokens", "12", "--seed", "0"]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert text.startswith("ROMEO:") and len(text.strip()) > len("ROMEO:")
