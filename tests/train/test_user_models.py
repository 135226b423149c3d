"""Training a user's model: a vocabulary smaller than the corpus's or a window longer than the
model accepts is a one-line error (exit 2) naming the flag that fixes it, caught before the
first step; ``--data FILE`` trains on the user's own text."""

from __future__ import annotations

from pathlib import Path

import pytest

from unitcheck.cli import main

HERE = Path(__file__).resolve().parents[1]
SMALL = ["--steps", "2", "--batch-size", "2", "--eval-interval", "2", "--eval-batches", "1"]


def _train(tmp_path: Path, *flags: str) -> list[str]:
    return ["train", *SMALL, "--out-dir", str(tmp_path / "run"), *flags]


def test_vocabulary_smaller_than_the_corpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(_train(tmp_path, "--model", f"{HERE}/cli_models.py:small_vocab", "--seq-len", "16"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "vocabulary" in err and "20" in err and "--data" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_sequence_longer_than_the_model_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(_train(tmp_path, "--model", f"{HERE}/cli_models.py:short_block", "--seq-len", "32",
                       "--tokenizer", "byte"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--seq-len 16" in err


def test_byte_tokens_for_a_char_sized_model_name_the_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(_train(tmp_path, "--model", f"{HERE}/cli_models.py:char_sized", "--seq-len", "16", "--tokenizer", "byte"))
    err = capsys.readouterr().err
    assert code == 2 and "--tokenizer char" in err, err


def test_data_file_trains_on_the_users_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "mine.txt"
    text.write_text("abcd efgh. " * 400, encoding="utf-8")
    code = main(_train(tmp_path, "--model", f"{HERE}/cli_models.py:small_vocab", "--seq-len", "16",
                       "--data", str(text)))
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("content, why", [(b"\xff\xfe\x00bad", "UTF-8"), (b"tiny", "too short")])
def test_bad_data_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, why: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    code = main(_train(tmp_path, "--data", str(path), "--seq-len", "16", "--n-layer", "1", "--n-embd", "16"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and why in err, err


def test_transformers_style_forward_gets_labels_by_keyword() -> None:
    """``forward(input_ids, attention_mask=None, labels=None)`` (a transformers model or a rewrite
    of one) is called with keywords, and its loss is found in a ModelOutput or a tuple."""
    import torch
    from torch import nn

    from unitcheck.train.loop import _loss

    class Output(dict):  # type: ignore[type-arg]
        @property
        def loss(self) -> torch.Tensor:
            return self["loss"]  # type: ignore[no-any-return]

    class HFStyle(nn.Module):
        def forward(self, input_ids, attention_mask=None, labels=None):  # type: ignore[no-untyped-def]
            assert attention_mask is None and labels is not None
            return Output(loss=(input_ids - labels).float().abs().sum() + 1.0)

    class Rewritten(nn.Module):  # what rewrite writes for it: the flat tuple (loss, logits)
        def forward(self, input_ids, labels):  # type: ignore[no-untyped-def]
            return (input_ids.float().mean() * 0 + 2.0, input_ids.float())

    x = torch.arange(6).view(1, 6)
    assert float(_loss(HFStyle(), x, x + 1)) == 1.0  # labels are the window (the model shifts them)
    assert float(_loss(Rewritten(), x, x + 1)) == 2.0
