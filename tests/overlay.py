"""A Python for jobs whose requirements.txt moves the Hugging Face stack (transformers 4.x), without touching the test
venv: a venv of its own that sees every package the test venv has, as the image's Python does, except pytest (the
image has none, and transformers 4.x's testing_utils, which scripts of its era import, breaks on pytest 8; nor TRL
and PEFT, which need transformers 5). What the
job's pip installs goes into the overlay, in front of the test venv's packages; the test venv is never changed (pip
leaves packages outside its environment alone). Also an era-neutral tokenizer channel: vocab.json and merges.txt, as
GPT-2's own folder holds them, which transformers 4.x and 5 both load (a tokenizer.json written by today's
tokenizers is not readable by the tokenizers of transformers 4.x).

Used by the tests of AWS's example folders (test_aws_examples.py) and by benchmarks/transformers_lines.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

# What the test venv has and the image does not: pytest (transformers 4.x's testing_utils breaks on pytest 8), and
# TRL and PEFT (tests/third_party/trl), whose need of transformers 5 would fail a 4.x job's pip check.
HIDDEN = re.compile(r"(_?pytest|py\.py$|xdist|trl\b|trl-|peft\b|peft-)")


def overlay_python(folder: Path) -> Path:
    """A venv in `folder` over this Python's packages; returns the path of its `opentc-train` (the image's `train`)."""
    python = folder / "py"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(python)], check=True)
    base = folder / "base-site"   # outside the venv: pip never counts it as the venv's own, never uninstalls there
    base.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not HIDDEN.match(entry.name):
            (base / entry.name).symlink_to(entry)
    site = python / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    # addsitedir, not a plain path: the base's own .pth files (the editable installs of opentc) must run too.
    (site / "opentc-test-base.pth").write_text(f"import site; site.addsitedir({str(base)!r})\n")
    train = python / "bin" / "opentc-train"
    train.write_text(f"#!{python / 'bin' / 'python'}\nfrom opentc_toolkit.entry import main\nmain()\n")
    train.chmod(0o755)
    return train


def era_tokenizer(text: str, folder: Path, vocab_size: int = 400) -> Path:
    """A byte-level BPE trained on `text`, saved as GPT-2's hub folder is: vocab.json, merges.txt and a config."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([line for line in text.splitlines() if line.strip()], vocab_size=vocab_size,
                            special_tokens=["<|endoftext|>"])
    folder.mkdir(parents=True, exist_ok=True)
    bpe.save_model(str(folder))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "model_max_length": 1024}))
    return folder
