"""Every bad input a user can give ends in exit 2 with one line on stderr, and changes no file.

Each case runs in a fresh directory holding the user's files (a factory module, configs, a
rewrite directory, a training run, metrics); the tree is hashed before and after the command.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from unitcheck.cli import main

from .conftest import needs_hf
from .user_files import FACTORIES, TINY_TRAIN, copy_tree, snapshot

Setup = Callable[[Path, "Templates"], None]


@dataclass
class Templates:
    rewrite: Path
    run: Path


def text(name: str, content: str | bytes) -> Setup:
    def make(tmp: Path, _: Templates) -> None:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return make


def rewrite_dir(damage: Callable[[Path], None] | None = None) -> Setup:
    def make(tmp: Path, t: Templates) -> None:
        d = copy_tree(t.rewrite, tmp / "rw")
        if damage is not None:
            damage(d)
    return make


def run_dir(damage: Callable[[Path], None] | None = None) -> Setup:
    def make(tmp: Path, t: Templates) -> None:
        d = copy_tree(t.run, tmp / "run")
        if damage is not None:
            damage(d)
    return make


def both(*setups: Setup) -> Setup:
    def make(tmp: Path, t: Templates) -> None:
        for s in setups:
            s(tmp, t)
    return make


def truncate(name: str, keep: float = 0.5) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: int(len(data) * keep)])
    return damage


def overwrite(name: str, content: str | bytes) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        if isinstance(content, bytes):
            (d / name).write_bytes(content)
        else:
            (d / name).write_text(content)
    return damage


def remove(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).unlink()


def foreign_weights(d: Path) -> None:
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(3)}, str(d / "model.safetensors"))


def edit_config(**changes: object) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, **changes}))
    return damage


FACT = text("facts.py", FACTORIES)
LINT_TINY = ["lint", "facts.py:module_only", "--input"]
TRAIN = ["train", *TINY_TRAIN, "--steps", "4"]


def pyproject(body: str | bytes) -> Setup:
    return text("proj/pyproject.toml", body)


def metrics(body: str | bytes) -> Setup:
    return text("m/metrics.jsonl", body)


CASES: list[tuple[str, list[str], Setup | None, str]] = [
    # --set on Hugging Face configs (type, range, finite, memory)
    ("hf-set-string-for-int", ["lint", "hf:llama", "--set", "hidden_size=abc"], None, "takes an integer"),
    ("hf-set-float-for-int", ["lint", "hf:llama", "--set", "num_attention_heads=2.5"], None, "takes an integer"),
    ("hf-set-negative-size", ["lint", "hf:llama", "--set", "hidden_size=-64"], None, "is a size"),
    ("hf-set-negative-depth", ["lint", "hf:llama", "--set", "num_hidden_layers=-1"], None, "is a size"),
    ("hf-set-zero-depth", ["lint", "hf:llama", "--set", "num_hidden_layers=0"], None, "is a size"),
    ("hf-set-absurd-depth", ["lint", "hf:llama", "--set", "num_hidden_layers=1000000"], None, "is a size"),
    ("hf-set-out-of-memory", ["lint", "hf:llama", "--set", "hidden_size=1000000000", "--device", "cpu"], None, "memory"),
    ("hf-set-nan", ["lint", "hf:llama", "--set", "rms_norm_eps=nan"], None, "finite"),
    ("hf-set-negative-eps", ["lint", "hf:llama", "--set", "rms_norm_eps=-1"], None, "must not be negative"),
    ("hf-set-bool-field", ["lint", "hf:llama", "--set", "attention_bias=maybe"], None, "true or false"),
    ("hf-set-unknown-field", ["lint", "hf:llama", "--set", "no_such_field=1"], None, "no field"),
    ("hf-set-batch-zero", ["lint", "hf:llama", "--set", "batch=0"], None, "batch"),
    ("hf-set-seq-negative", ["lint", "hf:gpt2", "--set", "seq=-3"], None, "seq"),
    ("hf-unknown-type", ["lint", "hf:no_such_architecture"], None, "unknown Hugging Face model type"),
    # --set on bundled configs
    ("set-string-for-int", ["lint", "gpt", "--set", "n_layer=abc"], None, "takes an integer"),
    ("set-string-for-float", ["lint", "gpt", "--set", "dropout=abc"], None, "takes a number"),
    ("set-inf", ["lint", "gpt", "--set", "dropout=inf"], None, "finite"),
    ("set-absurd-width", ["lint", "gpt", "--set", "n_embd=3000000000"], None, "is a size"),
    ("set-absurd-depth", ["lint", "gpt", "--set", "n_layer=1000000"], None, "is a size"),
    ("set-int-for-bool", ["lint", "gpt", "--set", "bias=3"], None, "true or false"),
    ("set-batch-memory", ["lint", "gpt", "--set", "batch=2000000000"], None, "memory"),
    ("set-negative-seed", ["lint", "gpt", "--set", "seed=-1"], None, "seed"),
    ("set-no-equals", ["lint", "gpt", "--set", "n_layer"], None, "expected key=value"),
    ("set-empty-key", ["lint", "gpt", "--set", "=3"], None, "empty key"),
    ("set-bad-choice", ["lint", "gct", "--set", "pos=alibi"], None, "pos must be one of"),
    ("set-indivisible", ["lint", "gpt", "--set", "n_embd=30"], None, "multiple of n_head"),
    # factories and their results
    ("factory-not-tensor", ["lint", "facts.py:not_tensor"], FACT, "example inputs must be"),
    ("factory-no-tensor", ["lint", "facts.py:no_tensor"], FACT, "hold no tensor"),
    ("factory-sys-exit-0", ["lint", "facts.py:exits"], FACT, "sys.exit(0)"),
    ("factory-system-exit-1", ["lint", "facts.py:raises_exit"], FACT, "sys.exit(1)"),
    ("factory-exits-on-import", ["lint", "quits.py:build"], text("quits.py", "import sys\nsys.exit(0)\n"), "must not exit"),
    ("factory-forward-exits", ["lint", "facts.py:forward_exits"], FACT, "sys.exit(0)"),
    ("factory-three-tuple", ["lint", "facts.py:three"], FACT, "tuple of 3 items"),
    ("factory-returns-none", ["lint", "facts.py:nothing"], FACT, "returned NoneType"),
    ("factory-memory-error", ["lint", "facts.py:oom"], FACT, "out of memory"),
    ("factory-missing-attr", ["lint", "facts.py:no_such"], FACT, "has no attribute"),
    ("factory-syntax-error", ["lint", "broken.py:build"], text("broken.py", "def build(:\n"), "SyntaxError"),
    ("factory-no-inputs", ["lint", "facts.py:module_only"], FACT, "pass --input"),
    # --input
    ("input-out-of-memory", [*LINT_TINY, "float32[100000000000,4]", "--device", "cpu"], FACT, "memory"),
    ("input-beyond-any-tensor", [*LINT_TINY, "float32[99999999999999999999,99999999999999999999]"], FACT, "beyond any tensor"),
    ("input-zero-dim", [*LINT_TINY, "float32[0,4]"], FACT, "at least 1"),
    ("input-bound-too-big", [*LINT_TINY, "int8[2,4]<1000"], FACT, "bound must lie"),
    ("input-bound-on-float", [*LINT_TINY, "float32[2,4]<5"], FACT, "integer inputs only"),
    ("input-bound-zero", [*LINT_TINY, "int64[2,4]<0"], FACT, "bound must lie"),
    ("input-unknown-dtype", [*LINT_TINY, "complex[2]"], FACT, "malformed --input"),
    ("input-unclosed", [*LINT_TINY, "float32[2,4"], FACT, "malformed --input"),
    # configuration
    ("config-tool-not-table-found", ["lint", "gct"], pyproject("tool = 5\n"), "'tool' must be a table"),
    ("config-tool-not-table", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("tool = 5\n"), "'tool' must be a table"),
    ("config-table-not-table", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool]\nunitcheck = 3\n"), "must be a table"),
    ("config-floor-eps-nan", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck]\nfloor-eps = nan\n"), "floor-eps"),
    ("config-floor-eps-bool", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck]\nfloor-eps = true\n"), "floor-eps"),
    ("config-floor-eps-negative", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck]\nfloor-eps = -1\n"), "floor-eps"),
    ("config-select-empty", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck]\nselect = []\n"), "names no rule code"),
    ("config-ignore-blank", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck]\nignore = [\" \"]\n"), "names no rule code"),
    ("config-select-unknown", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck]\nselect = [\"UC999\"]\n"), "unknown rule code"),
    ("config-fail-on-int", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck]\nfail-on = 3\n"), "fail-on"),
    ("config-pmi-not-table", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck]\nper-module-ignores = 5\n"), "per-module-ignores"),
    ("config-declare-not-string", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck.declare]\nx = 5\n"), "declare"),
    ("config-declare-bad-unit", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject("[tool.unitcheck.declare]\nx = \"p:a ^ ^\"\n"), "declare"),
    ("config-not-utf8", ["lint", "gct", "--config", "proj/pyproject.toml"], pyproject(b"[tool.unitcheck]\nselect = [\"\xff\"]\n"), "malformed TOML"),
    ("config-missing", ["lint", "gct", "--config", "nowhere/pyproject.toml"], None, "config file not found"),
    # selections
    ("select-commas", ["lint", "gpt", "--select", ",,,"], None, "names no rule code"),
    ("ignore-blank", ["lint", "gpt", "--ignore", " , "], None, "names no rule code"),
    ("select-unknown", ["lint", "gpt", "--select", "UC777"], None, "unknown rule code"),
    # baselines
    ("baseline-write-over-read", ["lint", "gct", "--baseline", "b.json", "--write-baseline", "b.json"],
     text("b.json", '{"unitcheck_baseline": 1, "model": "gct", "violations": []}\n'), "--update-baseline"),
    ("baseline-write-over-user-file", ["lint", "gct", "--write-baseline", "proj/pyproject.toml"],
     pyproject("[project]\nname = 'mine'\n"), "not a unitcheck baseline"),
    ("baseline-update-without-baseline", ["lint", "gct", "--update-baseline"], None, "pass --baseline"),
    ("baseline-not-utf8", ["lint", "gct", "--baseline", "b.json"], text("b.json", b"\xff\xfe{}"), "b.json is not UTF-8"),
    ("baseline-truncated", ["lint", "gct", "--baseline", "b.json"], text("b.json", '{"unitcheck_baseline": 1, "viol'), "b.json is not valid JSON (truncated"),
    ("baseline-bad-fingerprint", ["lint", "gct", "--baseline", "b.json"],
     text("b.json", '{"unitcheck_baseline": 1, "violations": [{"fingerprint": [1]}]}'), "fingerprint"),
    # rewrite directories, file by file
    ("rewrite-truncated-weights", ["lint", "rw"], rewrite_dir(truncate("model.safetensors")), "model.safetensors is not a readable"),
    ("rewrite-garbage-weights", ["lint", "rw"], rewrite_dir(overwrite("model.safetensors", b"garbage" * 10)), "model.safetensors is not a readable"),
    ("rewrite-foreign-weights", ["lint", "rw"], rewrite_dir(foreign_weights), "does not fit the model"),
    ("rewrite-empty-model-py", ["lint", "rw"], rewrite_dir(overwrite("model.py", "")), "defines no nn.Module class"),
    ("rewrite-broken-model-py", ["lint", "rw"], rewrite_dir(overwrite("model.py", "class Rewritten(:\n")), "model.py cannot be imported"),
    ("rewrite-model-py-exits", ["lint", "rw"], rewrite_dir(overwrite("model.py", "import sys\nsys.exit(3)\n")), "sys.exit(3)"),
    ("rewrite-manifest-list", ["lint", "rw"], rewrite_dir(overwrite("unitcheck.json", "[1, 2]")), "not the manifest object"),
    ("rewrite-manifest-garbage", ["lint", "rw"], rewrite_dir(overwrite("unitcheck.json", "{oops")), "unitcheck.json is not valid JSON"),
    ("rewrite-manifest-weights-path", ["lint", "rw"], rewrite_dir(overwrite("unitcheck.json", '{"weights": "../../etc/passwd"}')), "'weights' must name"),
    ("rewrite-garbage-inputs", ["lint", "rw"], rewrite_dir(overwrite("example_inputs.pt", b"\x80\x04garbage")), "example_inputs.pt is not a readable"),
    ("rewrite-missing-inputs", ["lint", "rw"], rewrite_dir(remove("example_inputs.pt")), "example_inputs.pt is missing"),
    ("rewrite-dir-with-set", ["lint", "rw", "--set", "n_layer=2"], rewrite_dir(), "--set does not apply"),
    ("rewrite-out-over-user-files", ["rewrite", "gpt", "--out", "proj"], text("proj/model.py", "# mine\n"), "did not write"),
    ("rewrite-out-is-file", ["rewrite", "gpt", "--out", "proj/model.py"], text("proj/model.py", "# mine\n"), "not a directory"),
    ("verify-on-meta", ["units", "gct", "--verify", "--device", "meta"], None, "real values"),
    ("rewrite-on-meta", ["rewrite", "gct", "--out", "o", "--device", "meta"], None, "rewrite runs the model on real values"),
    # training
    ("train-device-tpu", [*TRAIN, "--device", "tpu"], None, "--device must be"),
    ("train-device-missing-gpu", [*TRAIN, "--device", "cuda:64"], None, "--device cuda:64"),
    ("train-not-language-model", [*TRAIN, "--model", "vit", "--out-dir", "v"], None, "not a language model"),
    ("train-factory-not-language-model", [*TRAIN, "--model", "facts.py:tiny", "--out-dir", "v"], FACT, "not a language model"),
    ("train-seq-len-too-long", [*TRAIN, "--seq-len", "100000000", "--out-dir", "v"], None, "--seq-len 100000000"),
    ("train-batch-out-of-memory", [*TRAIN, "--batch-size", "100000000", "--out-dir", "v"], None, "memory"),
    ("train-absurd-width", [*TRAIN, "--n-embd", "3000000000"], None, "--n-embd must be at most"),
    ("train-absurd-depth", [*TRAIN, "--n-layer", "100000"], None, "--n-layer must be at most"),
    ("train-lr-nan", [*TRAIN, "--lr", "nan"], None, "finite"),
    ("train-weight-decay-nan", [*TRAIN, "--weight-decay", "nan"], None, "finite"),
    ("train-resume-and-overwrite", [*TRAIN, "--resume", "--overwrite"], None, "pass one"),
    ("train-model-set-malformed", [*TRAIN, "--model-set", "oops", "--out-dir", "v"], None, "expected key=value"),
    ("train-out-dir-is-file", [*TRAIN, "--out-dir", "b.json"], text("b.json", "{}"), "not a directory"),
    ("train-into-existing-run", [*TRAIN, "--out-dir", "run"], run_dir(), "already holds a run"),
    ("train-into-user-config", [*TRAIN, "--out-dir", "proj"], text("proj/config.json", '{"mine": 1}'), "already holds a run"),
    ("train-resume-other-lr", [*TRAIN, "--out-dir", "run", "--resume", "--lr", "0.01"], run_dir(), "--lr 0.002 -> 0.01"),
    ("train-resume-other-seed", [*TRAIN, "--out-dir", "run", "--resume", "--seed", "4"], run_dir(), "--seed 3 -> 4"),
    ("train-resume-other-width", [*TRAIN, "--out-dir", "run", "--resume", "--n-embd", "32"], run_dir(), "--n-embd 16 -> 32"),
    ("train-resume-other-model", [*TRAIN, "--out-dir", "run", "--resume", "--model", "llama"], run_dir(), "--model 'gpt' -> 'llama'"),
    ("train-resume-truncated-ckpt", [*TRAIN, "--out-dir", "run", "--resume"], run_dir(truncate("ckpt.pt")), "not a readable checkpoint"),
    ("train-resume-garbage-ckpt", [*TRAIN, "--out-dir", "run", "--resume"], run_dir(overwrite("ckpt.pt", b"garbage")), "not a readable checkpoint"),
    ("train-resume-foreign-ckpt", [*TRAIN, "--out-dir", "run", "--resume"],
     run_dir(lambda d: torch.save({"weights": torch.ones(2)}, d / "ckpt.pt")), "'model' entry is missing"),
    ("train-resume-garbage-config", [*TRAIN, "--out-dir", "run", "--resume"],
     run_dir(lambda d: ((d / "ckpt.pt").unlink(), (d / "config.json").write_text("{"))[0]), "config.json is not valid JSON"),
    # plot and diagnose
    ("plot-loss-is-string", ["plot", "m", "--out", "m/loss.png"], metrics('{"step": 0, "train_loss": "abc"}\n'), "'train_loss' must be a number"),
    ("plot-step-is-string", ["plot", "m", "--out", "m/loss.png"], metrics('{"step": "1", "train_loss": 2.0}\n'), "'step' must be"),
    ("plot-val-loss-null", ["plot", "m", "--out", "m/loss.png"], metrics('{"step": 0, "train_loss": 2.0, "val_loss": null}\n'), "'val_loss' must be"),
    ("plot-not-utf8", ["plot", "m", "--out", "m/loss.png"], metrics(b'{"step": 0, "train_loss": \xff}\n'), "not UTF-8"),
    ("plot-garbage-line", ["plot", "m", "--out", "m/loss.png"], metrics('{"step": 0, "train_loss": 2.0}\n}}}\n{"step": 1, "train_loss": 1.0}\n'), "line 2 is not JSON"),
    ("plot-row-not-object", ["plot", "m", "--out", "m/loss.png"], metrics('[1, 2]\n'), "expected an object"),
    ("plot-empty", ["plot", "m", "--out", "m/loss.png"], metrics(""), "holds no logged step"),
    ("plot-missing-run", ["plot", "nowhere", "--out", "loss.png"], None, "has no metrics.jsonl"),
    ("diagnose-garbage-config", ["diagnose", "run", "--no-plots", "--no-fingerprint"], run_dir(overwrite("config.json", "[]")), "not a run configuration"),
    ("diagnose-config-unknown-field", ["diagnose", "run", "--no-plots", "--no-fingerprint"], run_dir(edit_config(colour="red")), "unknown field"),
    ("diagnose-config-wrong-type", ["diagnose", "run", "--no-plots", "--no-fingerprint"], run_dir(edit_config(n_layer="two")), "--n-layer must be an integer"),
    ("diagnose-ckpt-of-another-config", ["diagnose", "run", "--no-plots", "--no-fingerprint"], run_dir(edit_config(n_embd=32)), "does not belong to"),
    ("diagnose-truncated-ckpt", ["diagnose", "run", "--no-plots", "--no-fingerprint"], run_dir(truncate("ckpt.pt")), "not a readable checkpoint"),
    ("lint-run-dir", ["lint", "run"], run_dir(), "training run directory"),
    ("plot-out-over-metrics", ["plot", "m", "--out", "m/metrics.jsonl"], metrics('{"step": 0, "train_loss": 2.0}\n'), "not a PNG"),
    ("diagnose-batch-out-of-memory", ["diagnose", "gpt", "--batch", "100000000", "--seq", "100000"], None, "memory"),
    ("rewrite-manifest-empty", ["lint", "rw"], rewrite_dir(overwrite("unitcheck.json", "{}")), "'weights' must name"),
    ("train-resume-over-user-config", [*TRAIN, "--out-dir", "proj", "--resume"], text("proj/config.json", '{"mine": 1}'), "unknown field"),
]

HF_CASES = {c[0] for c in CASES if "hf:" in " ".join(c[1])}


def test_the_table_covers_at_least_60_inputs() -> None:
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("argv", "setup", "needle"), [pytest.param(*c[1:], id=c[0],
                         marks=[needs_hf] if c[0] in HF_CASES else []) for c in CASES])
def test_bad_input_exits_2_in_one_line_and_changes_no_file(
        argv: list[str], setup: Setup | None, needle: str, tmp_path: Path, rewrite_template: Path,
        run_template: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("UNITCHECK_MEMORY_BUDGET", "8G")  # the same verdicts on any machine
    if setup is not None:
        setup(tmp_path, Templates(rewrite_template, run_template))
    cwd = tmp_path / "proj" if argv == ["lint", "gct"] else tmp_path  # a pyproject found by the search
    cwd.mkdir(exist_ok=True)
    monkeypatch.chdir(cwd)
    before = snapshot(tmp_path)
    capfd.readouterr()
    code = main(argv)
    out, err = capfd.readouterr()
    assert code == 2, (code, err)
    assert err.count("\n") == 1 and err.startswith("unitcheck: "), err
    assert "internal error" not in err and "Traceback" not in err
    assert needle in err, err
    assert snapshot(tmp_path) == before
