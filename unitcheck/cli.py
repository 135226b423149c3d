"""The ``unitcheck`` command line. Imports are lazy so ``--help`` and ``rules`` never load torch.

Exit codes: 0 clean at the fail level, 1 violations, 2 usage error or a model that cannot be
loaded or traced (one line on stderr; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence

from .errors import UnitcheckError, UsageError

EXAMPLES = {
    "lint": "unitcheck lint gpt\n  unitcheck lint hf:llama --set num_hidden_layers=4 --format sarif --output unitcheck.sarif\n  unitcheck lint my_model.py:build --input float32[8,3,32,32] --fail-on warning",
    "units": "unitcheck units gct\n  unitcheck units gpt --verify\n  unitcheck units gpt --format dot --output gpt.dot\n  unitcheck units gpt --node linear",
    "explain": "unitcheck explain gpt UC201\n  unitcheck explain gpt add_1 --format json\n  unitcheck explain hf:llama 3a09aefa72bf5019",
    "rules": "unitcheck rules",
    "rule": "unitcheck rule UC201",
    "models": "unitcheck models",
    "train": "unitcheck train --model gct --steps 600 --out-dir runs/gct\n  torchrun --nproc_per_node=2 -m unitcheck train --model gpt --steps 300\n  unitcheck train --model gpt --out-dir runs/gpt --resume",
    "plot": "unitcheck plot runs/gpt runs/gct --out loss.png",
    "diagnose": "unitcheck diagnose gpt --set n_layer=12 --batch 8 --seq 256\n  unitcheck diagnose runs/gct --compare runs/gpt --out diag/",
    "rewrite": "unitcheck rewrite gpt --to gct --out rewrites/gpt_gct\n  unitcheck rewrite hf:llama --to gct --nvfp4 ngpt --out rewrites/llama_gct",
}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="bundled name, hf:<type>, file.py:factory, pkg.mod:factory, or a rewrite directory")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field (repeatable)")
    p.add_argument("--input", action="append", default=[], metavar="SPEC", help="example input such as int64[2,64]<50257 or float32[8,3,32,32] (repeatable, positional order)")
    p.add_argument("--tracer", choices=["auto", "export", "fx"], default="auto", help="capture method (default: torch.export, symbolic tracing as fallback)")
    p.add_argument("--config", metavar="PYPROJECT", help="pyproject.toml to read [tool.unitcheck] from (default: found by walking up)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE (atomically) instead of stdout")
    p.add_argument("--device", choices=["meta", "cpu"], default=None, help="where to build the model: meta (default for static checks: no weights allocated) or cpu")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="unitcheck",
        description="Static unit checking for PyTorch models (neural dimensional analysis).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  " + "\n  ".join(EXAMPLES.values()),
    )
    parser.add_argument("--version", action="version", version=f"unitcheck {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help_, description=help_, epilog="example:\n  " + EXAMPLES[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    p = add("lint", "trace a model, infer units and report scale-inconsistent interfaces")
    _add_model_args(p)
    p.add_argument("--format", choices=["text", "json", "sarif", "junit", "github", "html"], default="text",
                   help="html: one self-contained page (summary, grouped findings, layer x rule heatmap)")
    p.add_argument("--no-group", dest="group", action="store_false",
                   help="print every finding; by default text, github and html fold findings that repeat per layer")
    p.add_argument("--select", help="comma-separated codes or prefixes to report (default: all but opt-in)")
    p.add_argument("--ignore", help="comma-separated codes or prefixes to drop")
    p.add_argument("--fail-on", choices=["error", "warning", "never"], default=None, help="lowest severity that makes the exit code 1 (default: error)")
    p.add_argument("--baseline", metavar="FILE", help="report and fail only on violations not in this baseline")
    p.add_argument("--write-baseline", metavar="FILE", help="record the current violations as a baseline")
    p.add_argument("--update-baseline", action="store_true", help="let the baseline written replace the --baseline file read")
    p.add_argument("--verbose", "-v", action="store_true", help="also print notes (floors, fallbacks)")

    p = add("units", "per-node forward and gradient units")
    _add_model_args(p)
    p.add_argument("--format", choices=["text", "json", "dot"], default="text")
    p.add_argument("--verify", action="store_true", help="also run the equivariance oracle and the radial fingerprint (SPEC 7)")
    p.add_argument("--node", metavar="NAME",
                   help="show one node (or a parameter's qualified name): forward and gradient units, the rule that set them, its source line")
    p.add_argument("--verbose", "-v", action="store_true", help="also show warnings from torch and other libraries")

    p = add("explain", "show how each generator of a finding's units reached it, as a tree from its leaf")
    _add_model_args(p)
    p.add_argument("finding", metavar="FINDING",
                   help="a node name, a finding's fingerprint (or fingerprint:n) or a rule code (its first finding)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--verbose", "-v", action="store_true", help="also show warnings from torch and other libraries")

    p = add("rewrite", "rewrite a model into its Gauge-Canonical Transformer form")
    _add_model_args(p)
    p.add_argument("--to", choices=["gct", "identity"], default="gct",
                   help="target form (default: gct); identity regenerates the model with no rule applied and checks it is equal")
    p.add_argument("--nvfp4", choices=["te", "ngpt"], default=None, help="also run every weight GEMM in NVFP4 with this recipe")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for model.py, weights and unitcheck.json")
    p.add_argument("--partial", action="store_true", help="write the result even if some residual branch or interface was left untouched")
    p.add_argument("--format", choices=["text", "json"], default="text", help="report format")
    p.add_argument("--verbose", "-v", action="store_true", help="also show warnings from torch and other libraries")

    p = add("diagnose", "measure UVI, stream scale, NVFP4 dot-product SNR, flatness and the fingerprint")
    p.add_argument("model", metavar="MODEL|RUN_DIR",
                   help="bundled name, hf:<type>, file.py:factory, a rewrite or a training run directory")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field (repeatable)")
    p.add_argument("--compare", metavar="MODEL|RUN_DIR", help="a second model, diagnosed side by side")
    p.add_argument("--batch", type=_positive_int, default=8, help="sequences in the measurement batch (default: 8)")
    p.add_argument("--seq", type=_positive_int, default=256, help="tokens per sequence (default: 256)")
    p.add_argument("--recipe", choices=["te", "ngpt"], default="te", help="NVFP4 recipe for the SNR analysis")
    p.add_argument("--uvi-threshold", type=float, default=1.0, help="flag |UVI| above this")
    p.add_argument("--out", metavar="DIR", help="write diagnostics.json and PNG plots here")
    p.add_argument("--output", "-o", metavar="FILE", help="write the text summary to FILE (atomically) instead of stdout")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots (no matplotlib needed)")
    p.add_argument("--no-fingerprint", action="store_true", help="skip the radial fingerprint (the slowest part)")
    p.add_argument("--verbose", "-v", action="store_true", help="also show warnings from torch and other libraries")

    p = add("train", "train a bundled or rewritten model on the bundled corpus")
    from .train.config import add_arguments

    add_arguments(p)

    p = add("plot", "draw the loss curves of one or several runs into a PNG")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", default="loss.png", help="PNG to write (default: loss.png)")
    p.add_argument("--title")

    add("rules", "list rule codes with one-line docs")
    p = add("rule", "print one rule's documentation")
    p.add_argument("code")
    add("models", "list bundled models")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        with _library_warnings(getattr(args, "verbose", False)):
            return int(_dispatch(args))
    except KeyboardInterrupt:
        print("unitcheck: interrupted", file=sys.stderr)
        return 130
    except SystemExit as err:  # argparse exits before this block; here it is the model's code
        if args.debug:
            raise
        print(f"unitcheck: the model's code called sys.exit({err.code!r}) while unitcheck ran it: "
              "a model or factory must return or raise, not exit", file=sys.stderr)
        return 2
    except Exception as err:
        if args.debug:
            raise
        code = _exit_code(err)
        if code == 3:
            print(_one_line(f"unitcheck: internal error: {type(err).__name__}: {err} (rerun with --debug)"),
                  file=sys.stderr)
        else:
            print(f"unitcheck: {_one_line(_message(err))}", file=sys.stderr)
        return code


_LIBRARY_LOGGERS = ("torch", "transformers", "huggingface_hub", "torchao", "safetensors")


@contextlib.contextmanager
def _library_warnings(verbose: bool) -> Iterator[None]:
    """Warnings (and logged warnings) of torch, transformers and the like go to ``--verbose``
    only: they are about the libraries' internals, not about the user's input."""
    if verbose:
        yield
        return
    from .quiet import quiet_loggers

    env = os.environ.get("TRANSFORMERS_VERBOSITY")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # transformers sets its level on import
    try:
        with quiet_loggers(_LIBRARY_LOGGERS, logging.ERROR):
            yield
    finally:
        if env is None:
            os.environ.pop("TRANSFORMERS_VERBOSITY", None)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:2000]


def _message(err: BaseException) -> str:
    """A path error names the user's path and the reason, not errno's tuple; memory that the
    inputs' sizes exhaust says which sizes to reduce."""
    if isinstance(err, UnitcheckError):
        return str(err)
    if isinstance(err, OSError) and err.strerror:
        where = f"{err.filename}: " if err.filename else ""
        return f"{where}{err.strerror}"
    from .resources import is_out_of_memory

    if is_out_of_memory(err):
        detail = (str(err).strip().splitlines() or [type(err).__name__])[-1][:300]
        return (f"out of memory ({detail}): reduce the model's or the inputs' sizes (--set, --input, "
                "--batch, --seq, --seq-len, --batch-size)")
    return str(err)


def _exit_code(err: BaseException) -> int:
    """The error's own exit code; 2 for a path the user gave (not writable, not a directory) and
    for memory the inputs' sizes exhaust; 3 for anything else, which is a bug."""
    if isinstance(err, UnitcheckError):
        return err.exit_code
    if isinstance(err, OSError):
        return 2
    from .resources import is_out_of_memory

    if is_out_of_memory(err):
        return 2
    return 3


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "rules":
        return _cmd_rules()
    if args.command == "rule":
        return _cmd_rule(args.code)
    if args.command == "models":
        return _cmd_models()
    if args.command == "diagnose":
        from .commands.diagnose import run

        return run(args)
    if args.command == "rewrite":
        from .commands.rewrite import run

        return run(args)
    if args.command == "train":
        from .commands.train import run

        return run(args)
    if args.command == "plot":
        from .train.plot import plot_runs

        print(plot_runs(args.runs, args.out, args.title))
        return 0
    if args.command == "lint":
        from .commands.lint import run

        return run(args)
    if args.command == "units":
        from .commands.units import run

        return run(args)
    if args.command == "explain":
        from .commands.explain import run

        return run(args)
    raise UsageError(f"unknown command {args.command}")


def _cmd_rules() -> int:
    from .codes import CODES

    for c in CODES.values():
        flag = " (opt-in)" if c.opt_in else ""
        print(f"{c.code}  {c.severity:<7}  {c.name:<24} {c.summary}{flag}")
    return 0


def _cmd_rule(code: str) -> int:
    from .codes import CODES

    c = CODES.get(code.upper())
    if c is None:
        raise UsageError(f"unknown rule code {code!r}; `unitcheck rules` lists them")
    print(f"# {c.code} ({c.name})\n\nSeverity: {c.severity}. Status: {c.status}.\n")
    print(c.doc)
    return 0


def _cmd_models() -> int:
    from .models import MODELS

    for name, desc in MODELS.items():
        print(f"{name:<8} {desc}")
    print("\nAlso: hf:<model_type> (any transformers architecture, random weights), file.py:factory, pkg.module:factory")
    return 0
