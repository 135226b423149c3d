"""The zoo sweep (bench/zoo.py): a seeded sample of model types through its worker processes."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import needs_hf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import zoo  # noqa: E402

STATUSES = {"ok", "fail", "error", "timeout", "skipped"}


def _run(tmp_path: Path, *args: str) -> dict[str, Any]:
    store, page = tmp_path / "zoo.json", tmp_path / "zoo.md"
    assert zoo.main([*args, "--store", str(store), "--md", str(page)]) == 0
    return json.loads(store.read_text())


@needs_hf
def test_seeded_sample_runs_resumes_and_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    types, _ = zoo.all_types()
    sample = zoo.choose(types, None, 2, seed=3)
    assert sample == zoo.choose(types, None, 2, seed=3) and len(set(sample)) == 2  # seeded
    args = ("--sample", "2", "--seed", "3", "--stages", "build,trace,lint", "--timeout", "25")  # <= 50 s of types
    store = _run(tmp_path, *args)
    assert set(store["entries"]) == set(sample)
    for entry in store["entries"].values():
        stages = entry["stages"]
        assert set(stages) == {"build", "trace", "lint"}
        for rec in stages.values():
            assert rec["status"] in STATUSES and isinstance(rec["seconds"], float) and isinstance(rec["reason"], str)
            assert (rec["status"] in ("ok", "skipped")) == (rec["reason"] == "") or rec["status"] == "skipped"
    page = (tmp_path / "zoo.md").read_text()
    assert "## Summary" in page and all(f"| `{t}`" in page for t in sample)
    capsys.readouterr()
    # a second run finds every entry done with the same settings (or failed: those rerun)
    again = _run(tmp_path, *args, "--keep-failed")
    assert "0 to run" in capsys.readouterr().out
    assert again["entries"] == store["entries"]


@needs_hf
def test_time_limit_kills_the_worker_and_records_the_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace stalled well past the limit (the forked worker inherits the patch): a warm process
    builds and traces gpt2 faster than any limit a test could race against."""
    import unitcheck.tracer

    original = unitcheck.tracer.trace

    def stalled(*args: Any, **kwargs: Any) -> Any:
        time.sleep(5)
        return original(*args, **kwargs)

    monkeypatch.setattr(unitcheck.tracer, "trace", stalled)
    store = _run(tmp_path, "--only", "gpt2", "--stages", "build,trace", "--timeout", "1")
    stages = store["entries"]["gpt2"]["stages"]
    assert "timeout" in {r["status"] for r in stages.values()}
    assert all(r["status"] in ("timeout", "skipped", "ok") for r in stages.values())
    assert zoo.entry_status(store["entries"]["gpt2"]).startswith("timeout:")


@needs_hf
def test_a_worker_the_kernel_kills_is_run_again_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of memory beside its neighbours, a worker dies by SIGKILL: its type runs again at the
    end with no neighbour (here the first trace kills its own process; the retry finds the mark
    and traces)."""
    import os
    import signal

    import unitcheck.tracer

    original, mark = unitcheck.tracer.trace, tmp_path / "killed-once"

    def killed_once(*args: Any, **kwargs: Any) -> Any:
        if not mark.exists():
            mark.write_text("")
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    monkeypatch.setattr(unitcheck.tracer, "trace", killed_once)
    store = _run(tmp_path, "--only", "gpt2", "--stages", "build,trace", "--jobs", "2", "--timeout", "120")
    assert mark.exists()
    assert {r["status"] for r in store["entries"]["gpt2"]["stages"].values()} == {"ok"}


@needs_hf
def test_stages_of_one_type_and_page_row(tmp_path: Path) -> None:
    """The stages in-process (no worker): build, trace and lint data as the page shows them."""
    records: list[dict[str, Any]] = []
    zoo.run_type("llama", ["build", "trace", "lint", "identity", "rewrite"], records.append)
    done = {r["stage"]: r for r in records if r["status"] != "running"}
    assert [done[s]["status"] for s in ("build", "trace", "lint")] == ["ok", "ok", "ok"], done
    assert done["build"]["task"] == "causal_lm" and done["build"]["plan"] == "small"
    assert done["lint"]["coverage"] == 1.0 and done["lint"]["violations"]
    assert done["identity"]["status"] == "ok" and done["identity"]["differences"] == 0  # the null rewrite
    assert done["rewrite"]["status"] == "ok" and done["rewrite"]["violations_after"] == {}  # clean GCT
    store = {"version": zoo.STORE_VERSION, "runs": [], "entries": {
        "llama": {"settings": "x", "base_model": True, "stages": done}}}
    row = next(line for line in zoo.render(store).splitlines() if line.startswith("| `llama`"))
    assert "LlamaForCausalLM" in row and "100.0%" in row and "| equal |" in row


def test_needs_run_reruns_missing_failed_and_stale_entries() -> None:
    key = zoo.settings_key(["build"], 60.0)
    ok = {"settings": "x", "stages": {"build": {"status": "ok", "settings": key}}}
    failed = {"settings": "x", "stages": {"build": {"status": "fail", "settings": key}}}
    assert zoo.needs_run(None, ["build"], 60.0, True)
    assert not zoo.needs_run(ok, ["build"], 60.0, True) and zoo.needs_run(ok, ["build"], 30.0, True)
    assert zoo.needs_run(ok, ["build", "verify"], 60.0, True)  # a stage never run
    assert zoo.needs_run(failed, ["build"], 60.0, True) and not zoo.needs_run(failed, ["build"], 60.0, False)
    # a record from before per-stage keys: the entry's key over the stages it ran
    old = {"settings": zoo.settings_key(["build", "trace"], 60.0),
           "stages": {"build": {"status": "ok"}, "trace": {"status": "ok"}}}
    assert not zoo.needs_run(old, ["build", "trace"], 60.0, True) and zoo.needs_run(old, ["build"], 90.0, True)


def test_a_run_of_some_stages_keeps_the_others() -> None:
    old = {"stages": {s: {"status": "ok", "seconds": 1.0} for s in ("build", "trace", "lint")}}
    merged = zoo.merge(old, {"verify": {"status": "fail", "seconds": 9.0}}, ["verify"], 60.0)
    assert list(merged) == ["build", "trace", "lint", "verify"] and merged["verify"]["status"] == "fail"
    assert merged["verify"]["settings"] == zoo.settings_key(["verify"], 60.0)
    again = zoo.merge({"stages": merged}, {"build": {"status": "ok", "seconds": 2.0}}, ["build"], 60.0)
    assert again["build"]["seconds"] == 2.0 and again["verify"]["status"] == "fail"


@needs_hf
@pytest.mark.slow
def test_ci_sample_of_ten_types_all_stages(tmp_path: Path) -> None:
    """What CI runs each time (``make zoo-sample``): ten seeded types through every stage."""
    store = _run(tmp_path, "--sample", "10", "--seed", "14", "--timeout", "600")
    assert len(store["entries"]) == 10
    errors = [(t, s, r["reason"]) for t, e in store["entries"].items() for s, r in e["stages"].items()
              if r["status"] == "error" and s in ("build", "trace", "lint")]
    assert errors == []


def test_absorb_takes_newer_records_made_on_the_same_build() -> None:
    build = {"status": "ok", "plan": "small", "parameters": 10, "head": "H", "inputs": "input_ids"}
    verify = {"status": "ok", "checked": 3, "agreed": 3}
    store = {"entries": {
        "a": {"finished": 1.0, "stages": {"build": build, "trace": {"status": "ok"}}},
        "b": {"finished": 1.0, "stages": {"build": build}},
        "c": {"finished": 5.0, "stages": {"build": build, "verify": {"status": "fail"}}},
    }}
    other = {"entries": {
        "a": {"finished": 2.0, "stages": {"build": build, "verify": verify, "trace": {"status": "fail"}}},
        "b": {"finished": 2.0, "stages": {"build": {**build, "parameters": 99}, "verify": verify}},
        "c": {"finished": 3.0, "stages": {"build": build, "verify": verify}},
        "d": {"finished": 2.0, "stages": {"build": build, "verify": verify}},
    }}
    assert zoo.absorb(store, other) == ["a"]
    a = store["entries"]["a"]["stages"]
    assert a["verify"] == verify and a["trace"] == {"status": "ok"}  # only the absorbed stages move
    assert list(a) == ["build", "trace", "verify"]
    assert "verify" not in store["entries"]["b"]["stages"]  # another build: another model
    assert store["entries"]["c"]["stages"]["verify"] == {"status": "fail"}  # ours is newer
    assert "d" not in store["entries"]


def test_absorb_takes_a_new_lint_of_a_graph_of_the_same_size() -> None:
    """A rule that calls a finding otherwise (UC101 -> UC102) on the same graph: the trace and
    lint records move together, and only where the graph has as many nodes as ours (our verify
    was made on it)."""
    build = {"status": "ok", "plan": "small", "parameters": 10, "head": "H", "inputs": "input_ids"}
    trace = {"status": "ok", "nodes": 40}
    store = {"entries": {t: {"finished": 1.0, "stages": {"build": build, "trace": trace,
                                                         "lint": {"status": "ok", "violations": {"UC101": 2}},
                                                         "verify": {"status": "ok"}}} for t in "ab"}}
    lint = {"status": "ok", "violations": {"UC101": 1, "UC102": 1}}
    other = {"entries": {
        "a": {"finished": 2.0, "stages": {"build": build, "trace": {**trace, "seconds": 3.0}, "lint": lint}},
        "b": {"finished": 2.0, "stages": {"build": build, "trace": {**trace, "nodes": 41}, "lint": lint}},
    }}
    assert zoo.absorb(store, other) == ["a"]
    a, b = (store["entries"][t]["stages"] for t in "ab")
    assert a["lint"] == lint and a["trace"]["seconds"] == 3.0 and a["verify"] == {"status": "ok"}
    assert list(a) == ["build", "trace", "lint", "verify"]
    assert b["lint"]["violations"] == {"UC101": 2} and b["trace"] == trace  # another graph: not taken



def test_take_replaces_whole_entries_that_are_newer() -> None:
    old = {"status": "ok", "plan": "small", "parameters": 10, "head": "H", "inputs": "input_ids"}
    new = {**old, "head": "G"}
    store = {"runs": [{"chosen": 1}], "entries": {
        "a": {"finished": 1.0, "stages": {"build": old, "trace": {"status": "ok"}, "verify": {"status": "ok"}}},
        "b": {"finished": 5.0, "stages": {"build": old}},
    }}
    other = {"runs": [{"chosen": 2}], "entries": {
        "a": {"finished": 2.0, "stages": {"build": new, "trace": {"status": "fail"}}},
        "b": {"finished": 3.0, "stages": {"build": new}},
        "c": {"finished": 2.0, "stages": {"build": new}},
    }}
    assert zoo.take(store, other) == ["a", "c"]
    assert store["entries"]["a"]["stages"] == {"build": new, "trace": {"status": "fail"}}  # no stale verify
    assert store["entries"]["b"]["stages"]["build"] == old  # ours is newer
    assert store["entries"]["c"]["stages"]["build"] == new and store["runs"] == [{"chosen": 1}, {"chosen": 2}]


def test_failed_rewrites_are_grouped_by_why() -> None:
    """The page's breakdown: each failed null or GCT rewrite under the kind its reason names, the
    largest group first (then by name); passing and skipped stages are not counted."""
    def entry(identity: dict[str, Any], rewrite: dict[str, Any] | None = None) -> dict[str, Any]:
        stages = {"identity": {"seconds": 1.0, **identity}, "rewrite": {"seconds": 1.0, **(rewrite or {"status": "skipped"})}}
        return {"settings": "x", "base_model": True, "stages": stages}

    loop = {"status": "fail", "reason": "TraceError: cannot trace M: data-dependent branch (Python control flow "
                                        "on a tensor value) at m.py:296: for expert_idx in expert_hit:"}
    store = {"version": zoo.STORE_VERSION, "runs": [], "entries": {
        "a": entry(loop, loop), "b": entry(loop),
        "c": entry({"status": "fail", "reason": "TraceError: cannot trace C: unsupported operator"}),
        "d": entry({"status": "fail", "reason": "3 differences, first eval: the gradient of w differs"}),
        "e": entry({"status": "ok"}, {"status": "fail", "reason": "2 violation(s) left: UC101"}),
        "f": entry({"status": "skipped"}),
        "g": entry({"status": "timeout", "reason": "over the 600 s limit in identity"}),
        # the capture's reason says what export with real values made of the branch
        "h": entry({"status": "fail", "reason": loop["reason"] + " (with real values, a branch on a value computed "
                                                                 "from weights or float data (u0 at m.py:9); ...)"}),
        "i": entry({"status": "fail", "reason": loop["reason"] + " (with real values, RuntimeError: propagate_real_"
                                                                 "tensors: we cannot infer a Fake kernel; ...)"}),
    }}
    kinds = zoo.failure_kinds(store, "identity")
    assert [(k.split(" (")[0].split(":")[0], types) for k, types in kinds] == [
        ("the model's own forward branches in Python on tensor values", ["a", "b"]),
        ("export with real values, which would decide a branch on an input's sizes or masks, fails in torch", ["i"]),
        ("regenerated, but not equal bit for bit", ["d"]),  # equal counts: by name
        ("the capture fails", ["c"]),
        ("the model's own forward branches in Python on values computed from its weights or float inputs", ["h"]),
        ("the stage ran past its time limit", ["g"]),  # not "leaves violations"
    ]
    assert [types for _, types in zoo.failure_kinds(store, "rewrite")] == [["a"], ["e"]]
    page = zoo.render(store)
    assert "| the rewrite leaves violations or refuses a pattern | 1: `e` |" in page


def test_reasons_name_library_files_from_their_package_and_fit_one_line() -> None:
    """A failure's file was named from the environment that ran the sweep
    (``/work/wt/sweep/.venv/lib/python3.11/site-packages/transformers/...``), which took most of
    the 300 characters a reason keeps and cut off why export with real values failed."""
    text = ("TraceError: cannot trace M: data-dependent branch at /x/.venv/lib/python3.11/site-packages/"
            "transformers/models/dbrx/modeling_dbrx.py:296: for e in hit:\n (with real values, a branch)")
    assert zoo._one_line(text) == ("TraceError: cannot trace M: data-dependent branch at transformers/models/dbrx/"
                                   "modeling_dbrx.py:296: for e in hit: (with real values, a branch)")
    assert len(zoo._one_line("x " * 400)) == 300


class _TooLarge(Exception):
    pass


@needs_hf
def test_a_stage_too_large_at_the_default_size_runs_on_smaller_images() -> None:
    """EfficientNet-B7's comparison at 600x600 and SAM 2's at 1024x1024 exceed the memory budget;
    the null rewrite was refused there while verify retried on smaller images. Both stages share
    the retry now: the largest side that fits is taken, and the note says which and why. A
    model with nothing else to shrink (Perceiver's latents) is tried at batch 1."""
    from transformers import ViTConfig

    class Model:
        config = ViTConfig(image_size=600)

    costs: list[int] = []

    def prepare(model: Any, inputs: Any) -> int:
        costs.append(inputs)
        return int(inputs)

    def fits(cost: int) -> None:
        if cost > 128:
            raise _TooLarge(f"would hold about {cost / 10:.1f} GiB (budget 12.8 GiB, X): smaller")

    def builder(side: int) -> Any:
        def build(smaller: dict[str, Any], batch: int) -> tuple[Any, int]:  # cost: side x batch / 2
            return Model(), smaller.get("image_size", side) * batch // 2
        return build

    got, note = zoo.at_a_size_that_fits((Model(), 600), prepare, fits, _TooLarge, builder(600))
    assert (got, costs) == (128, [600, 256, 128])
    assert note == "--set image_size=128 (would hold about 60.0 GiB at the default size)"
    assert zoo._noted({"reason": ""}, "compared", note)["reason"] == f"compared with {note}"
    # what fits at the default size runs there, with no note
    assert zoo.at_a_size_that_fits((Model(), 96), prepare, fits, _TooLarge, builder(96)) == (96, "")
    # too large at the smallest side: that side at batch 1
    costs.clear()
    got, note = zoo.at_a_size_that_fits((Model(), 600), prepare, lambda c: fits(c * 3), _TooLarge, builder(600))
    assert (got, costs) == (32, [600, 256, 128, 64, 32])
    assert note == "--set image_size=64 --set batch=1 (would hold about 180.0 GiB at the default size)"
    # a model without images to shrink is tried at batch 1 alone
    assert zoo.at_a_size_that_fits((object(), 200), prepare, fits, _TooLarge, builder(200))[0] == 100
    with pytest.raises(_TooLarge):  # and refused where that does not fit either
        zoo.at_a_size_that_fits((object(), 600), prepare, fits, _TooLarge, builder(600))
    with pytest.raises(_TooLarge):  # nor one that does not fit at the smallest side at batch 1
        zoo.at_a_size_that_fits((Model(), 600), prepare, lambda c: fits(c * 100), _TooLarge, builder(600))

    def fails(smaller: dict[str, Any], batch: int) -> tuple[Any, int]:
        raise ValueError("a smaller model that does not build")

    with pytest.raises(_TooLarge, match="60.0 GiB"):  # the size stays the reason given
        zoo.at_a_size_that_fits((Model(), 600), prepare, fits, _TooLarge, fails)
