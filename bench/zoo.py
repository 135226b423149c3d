"""The zoo sweep: every model type in transformers' config mapping through unitcheck.

Each type goes through the stages ``build`` (``hf:<type>`` on the meta device), ``trace``,
``lint`` (unit inference and violations), ``verify`` (the oracle and the radial fingerprint on a
CPU build), ``identity`` (the null rewrite, compared bit for bit with the model in eval and training
mode) and, for causal language models, ``rewrite`` (GCT; ok only when the result lints clean, adds
no dependence between positions, and the directory it writes passes ``unitcheck units DIR
--verify``).
Every stage records a status (ok / fail = a one-line user-facing error / error = an internal
exception / timeout / skipped), its seconds and a one-line reason. Results go to a resumable JSON
store (one entry per type; a rerun redoes only missing, failed or stale entries, stale meaning run
with other settings) and are rendered as ``docs/zoo.md``.

    python bench/zoo.py                                  # every type, all stages, docs/zoo.{json,md}
    python bench/zoo.py --stages build,trace,lint --jobs 2 --timeout 300
    python bench/zoo.py --sample 10 --seed 1             # a seeded random sample of types
    python bench/zoo.py --only llama swin --rerun        # these types again, whatever the store says
    python bench/zoo.py --render-only                    # rewrite docs/zoo.md from the store

Each type runs in a worker process (``--jobs N`` of them); a type that exceeds ``--timeout``
seconds has its worker killed and the stage it was in recorded as a timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import random
import re
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("build", "trace", "lint", "verify", "identity", "rewrite")
STORE = ROOT / "docs" / "zoo.json"
PAGE = ROOT / "docs" / "zoo.md"
STORE_VERSION = 1
TASKS_PER_WORKER = 20  # a fresh worker process now and then keeps memory from creeping up


# -- one model type (runs in a worker process) ------------------------------------------------


def _one_line(text: str, limit: int = 300) -> str:
    """One line of at most ``limit`` characters; installed libraries' files are named from their
    package (``transformers/models/...``), not from whichever environment ran the sweep."""
    return re.sub(r"\S*/site-packages/", "", " ".join(str(text).split()))[:limit]


def _classify(err: BaseException) -> str:
    """``fail`` for an error the CLI reports in one line (exit 2), ``error`` for a bug (exit 3)."""
    from unitcheck.cli import _exit_code

    return "fail" if _exit_code(err) != 3 else "error"


def _reason(err: BaseException) -> str:
    return _one_line(f"{type(err).__name__}: {err}")


# image sides tried, largest first, when a stage's values at the default size exceed the memory budget
SMALLER_IMAGES = (256, 128, 64)


def at_a_size_that_fits(built: tuple[Any, Any], prepare: Callable[[Any, Any], Any], fits: Callable[[Any], None],
                        refusal: type[Exception], build: Callable[[dict[str, Any], int], tuple[Any, Any]]
                        ) -> tuple[Any, str]:
    """``prepare(model, inputs)`` on the model ``built``, or, where ``fits`` refuses what it gives
    with ``refusal``, on the model built with smaller images (float64 copies of 1024x1024 vision
    towers do not fit; the comparison of a 600x600 EfficientNet-B7 does not either), then at
    batch 1 (Perceiver's latents, BigVGAN's waveform: nothing to shrink but the batch). ``build(
    overrides, batch)`` builds one: what ``prepare`` gave, and a note naming the ``--set``
    settings and why ("" at the default size)."""
    from unitcheck import hf

    model, inputs = built
    got = prepare(model, inputs)
    try:
        fits(got)
        return got, ""
    except refusal as too_large:
        first = last = too_large
    why = str(first).split(" (budget")[0]
    tries = [(hf.image_size_overrides(model.config, size), 2) for size in SMALLER_IMAGES] \
        if hasattr(model, "config") else []
    tries = [t for t in tries if t[0]]
    tries.append((tries[-1][0] if tries else {}, 1))
    for smaller, batch in tries:
        try:
            got = prepare(*build(smaller, batch))
        except refusal:
            raise
        except Exception as err:  # a smaller model that does not build or run: the size was the reason
            raise first from err
        try:
            fits(got)
        except refusal as still:
            last = still  # where none fits, the smallest size's refusal is the one said
            continue
        sets = " ".join([*(f"--set {k}={v}" for k, v in smaller.items()), *(["--set batch=1"] if batch == 1 else [])])
        return got, f"{sets} ({why} at the default size)"
    raise last


def _noted(out: dict[str, Any], done: str, note: str) -> dict[str, Any]:
    """``out`` with the size note, if any, after its reason."""
    if note:
        note = f"{done} with {note}"
        out["reason"] = _one_line(f"{out['reason']}; {note}" if out.get("reason") else note)
    return out


def run_type(model_type: str, stages: Sequence[str], emit: Callable[[dict[str, Any]], None]) -> None:
    """Run ``stages`` on one model type, emitting one record per stage as soon as it finishes."""
    import torch

    from unitcheck import hf
    from unitcheck.linter import lint
    from unitcheck.tracer import to_meta, trace

    state: dict[str, Any] = {}

    def stage(name: str, fn: Callable[[], dict[str, Any]]) -> bool:
        emit({"stage": name, "status": "running", "started": time.time()})
        t0 = time.perf_counter()
        try:
            data = fn()
            status = data.pop("status", "ok")
            reason = data.pop("reason", "")
        except Exception as err:
            data, status, reason = {}, _classify(err), _reason(err)
            if status == "error":
                data["traceback"] = traceback.format_exc(limit=-6)[-3000:]
        emit({"stage": name, "status": status, "seconds": round(time.perf_counter() - t0, 2), "reason": reason, **data})
        return status == "ok"

    def skip(names: Iterable[str], why: str) -> None:
        for name in names:
            if name in stages:
                emit({"stage": name, "status": "skipped", "seconds": 0.0, "reason": why})

    def build() -> dict[str, Any]:
        info: list[hf.Built] = []
        model, inputs = hf.build(model_type, device="meta", info=info)
        state["meta"] = (model, to_meta(inputs))
        b = info[0]
        state["task"] = b.task
        return {
            "plan": b.plan, "task": b.task, "head": b.head, "inputs": b.layout, "probed": b.probed,
            "parameters": sum(p.numel() for p in model.parameters()),
        }

    def do_trace() -> dict[str, Any]:
        model, inputs = state["meta"]
        tg = trace(model, inputs)
        state["traced"] = tg
        return {"method": tg.method, "nodes": len(tg.compute_nodes()), "notes": [_one_line(n, 200) for n in tg.notes]}

    def do_lint() -> dict[str, Any]:
        model, inputs = state["meta"]
        report = lint(model, inputs, name=f"hf:{model_type}", traced=state["traced"])
        ug = report.unit_graph
        return {
            "nodes": ug.compute_nodes,
            "coverage": round(ug.coverage, 4),
            "uncovered": dict(ug.unknown_ops),
            "violations": report.by_rule(),
            "loss": ug.loss_node is not None,
        }

    def cpu_model() -> tuple[Any, dict[str, Any]]:
        if "cpu" not in state:
            info: list[hf.Built] = []
            state["cpu"] = hf.build(model_type, device="cpu", info=info)
            state.setdefault("task", info[0].task)
        return state["cpu"]  # type: ignore[no-any-return]

    def verify() -> dict[str, Any]:
        from unitcheck import oracle

        ug, note = at_a_size_that_fits(
            cpu_model(), lambda model, inputs: oracle.prepare(model, inputs)[2], oracle.check_fits_in_memory,
            oracle.OracleError, lambda smaller, batch: hf.build(model_type, smaller, batch=batch, device="cpu"))
        # the fingerprint needs a loss: a model without one gets the two oracle modes only
        try:
            res = oracle.verify_graph(ug, with_fingerprint=ug.loss_node is not None)
        except oracle.OracleError as err:
            if "loss" not in str(err):  # a loss that depends on no float leaf: no fingerprint
                raise
            res = oracle.verify_graph(ug)
        fp = res.fingerprint
        out: dict[str, Any] = {
            "checked": res.checked, "agreed": res.agreed, "violations": res.violations, "confirmed": res.confirmed,
            "global_checked": res.global_checked, "global_agreed": res.global_agreed,
            "grad_checked": res.grad_checked, "grad_agreed": res.grad_agreed,
            "disagreements": len(res.disagreements), "unchecked": len(res.unchecked),
            "unexercised": len(res.unexercised),
            "fingerprint": None if fp is None else {"matched": sum(r.match for r in fp), "total": len(fp)},
        }
        if not res.ok:
            out["status"] = "fail"
            bits = []
            if res.disagreements:
                bits.append(f"{len(res.disagreements)} disagreements, first {_one_line(str(res.disagreements[0]), 160)}")
            if res.violations != res.confirmed:
                bits.append(f"{res.violations - res.confirmed} violations not confirmed")
            if fp is not None and not all(r.match for r in fp):
                bad = [r for r in fp if not r.match]
                bits.append(f"fingerprint {len(fp) - len(bad)}/{len(fp)}: {bad[0].generator} predicted "
                            f"{'gauge' if bad[0].predicted_gauge else 'not gauge'}, measured {bad[0].measured:.2g}")
            out["reason"] = _one_line("; ".join(bits) or "oracle not ok")
        return _noted(out, "verified", note)

    def identity() -> dict[str, Any]:
        """The null rewrite: regenerated code equal to the model bit for bit (eval and train)."""
        from unitcheck.errors import UsageError
        from unitcheck.rewrite.api import rewrite as regenerate
        from unitcheck.rewrite.equal import check_fits_in_memory, differences

        (res, model, inputs), note = at_a_size_that_fits(
            cpu_model(), lambda model, inputs: (regenerate(model, inputs, to="identity"), model, inputs),
            lambda got: check_fits_in_memory(got[0].gct.traced.graph), UsageError,
            lambda smaller, batch: hf.build(model_type, smaller, batch=batch, device="cpu"))
        diffs = [d for training in (False, True) for d in differences(model, res.module, inputs, training)]
        out: dict[str, Any] = {"differences": len(diffs), "two_graphs": "_forward_train" in res.source,
                               "kept": len(res.kept)}
        if diffs:
            out["status"] = "fail"
            out["reason"] = _one_line(f"{len(diffs)} differences, first {diffs[0]}")
        return _noted(out, "compared", note)

    def rewrite() -> dict[str, Any]:
        """GCT, as `unitcheck rewrite` judges it: ok only with zero violations and nothing
        unhandled left (an added dependence between positions is unhandled)."""
        from unitcheck.rewrite.api import rewrite as gct

        model, inputs = cpu_model()
        res = gct(model, inputs)
        after = lint(res.module, inputs)
        out: dict[str, Any] = {
            "residuals": res.gct.residuals, "rewritten": res.gct.residuals_rewritten,
            "unhandled": [_one_line(u, 120) for u in res.gct.unhandled][:5],
            "violations_after": after.by_rule(),
        }
        if res.gct.unhandled or res.gct.residuals_rewritten < res.gct.residuals or after.violations:
            out["status"] = "fail"
            left = [f"{u['module']}: {u['reason']}" for u in res.gct.unhandled[:2]]
            left += [f"{v.rule} {v.module or '<root>'}" for v in after.violations[:3]]
            out["reason"] = _one_line(f"incomplete: {res.gct.residuals_rewritten}/{res.gct.residuals} residual adds "
                                      f"rewritten; left: {'; '.join(left)}")
            return out
        out.update(verify_written(res, inputs))
        return out

    def verify_written(res: Any, inputs: Any) -> dict[str, Any]:
        """What acceptance asks of a complete rewrite: the directory it writes passes
        ``unitcheck units DIR --verify`` (exit 0), run as the command line runs it."""
        import io
        import tempfile

        from unitcheck.cli import main as cli_main
        from unitcheck.rewrite.api import write_rewrite

        with tempfile.TemporaryDirectory(prefix="zoo_rw_") as tmp:
            out_dir = os.path.join(tmp, "rewrite")
            write_rewrite(res, out_dir, f"hf:{model_type}", inputs, {"complete": True})
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                rc = cli_main(["units", out_dir, "--verify", "--format", "json", "--output", os.path.join(tmp, "units.json")])
            oracle = {}
            with contextlib.suppress(OSError, ValueError, KeyError):
                oracle = json.loads(Path(tmp, "units.json").read_text())["oracle"]
        out: dict[str, Any] = {"verify_rc": rc}
        if oracle:
            out["verify"] = {k: oracle[k] for k in ("checked", "agreed", "violations", "confirmed") if k in oracle}
        if rc != 0:
            out["status"] = "fail"
            out["reason"] = _one_line(f"`units DIR --verify` exits {rc}: {err.getvalue().strip() or 'oracle not ok'}")
        return out

    torch.manual_seed(0)
    order = [("build", build), ("trace", do_trace), ("lint", do_lint), ("verify", verify), ("identity", identity),
             ("rewrite", rewrite)]
    needs = {"trace": "build", "lint": "trace", "rewrite": None, "verify": None, "identity": None}
    done: dict[str, bool] = {}
    for name, fn in order:
        if name not in stages:
            continue
        if name == "rewrite" and "task" not in state:
            with contextlib.suppress(Exception):  # no build stage in this run: the CPU build says the task
                cpu_model()
        if name == "rewrite" and state.get("task") not in (None, "causal_lm"):
            skip([name], f"not a causal LM ({state.get('task')})")
            continue
        dep = needs.get(name)
        if name in ("trace", "lint") and dep is not None and not done.get(dep, False):
            skip([name], f"{dep} did not succeed")
            done[name] = False
            continue
        if name in ("verify", "identity", "rewrite") and not done.get("build", "build" not in stages):
            skip([name], "build did not succeed")
            continue
        done[name] = stage(name, fn)


def _worker(conn: Connection, stages: Sequence[str], threads: int) -> None:
    """Worker loop: receive a model type, send its stage records, then ``{"done": type}``."""
    import warnings

    warnings.simplefilter("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch

    torch.set_num_threads(threads)
    devnull = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the worker)
    sys.stdout = sys.stderr = devnull  # models print and log; the pipe carries the results
    os.dup2(devnull.fileno(), 1)
    os.dup2(devnull.fileno(), 2)
    while True:
        try:
            model_type = conn.recv()
        except EOFError:
            return
        if model_type is None:
            return
        run_type(model_type, stages, lambda rec, t=model_type: conn.send({"type": t, **rec}))
        conn.send({"type": model_type, "done": True})


# -- the store --------------------------------------------------------------------------------


def settings_key(stages: Sequence[str], timeout: float) -> str:
    """What an entry depends on besides the code: stages, time limit, library versions."""
    import torch
    import transformers

    blob = json.dumps({"stages": list(stages), "timeout": timeout, "torch": torch.__version__,
                       "transformers": transformers.__version__}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def load_store(path: Path) -> dict[str, Any]:
    if path.exists():
        data = json.loads(path.read_text())
        if data.get("version") == STORE_VERSION:
            return data  # type: ignore[no-any-return]
    return {"version": STORE_VERSION, "entries": {}, "runs": []}


def save_store(path: Path, store: dict[str, Any]) -> None:
    from unitcheck.fsutil import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(str(path), json.dumps(store, indent=1, sort_keys=True) + "\n")


def entry_status(entry: dict[str, Any]) -> str:
    """``ok`` when every stage run is ok or skipped, else ``<status>:<first stage that is not>``."""
    for name in STAGES:
        st = entry.get("stages", {}).get(name)
        if st and st["status"] not in ("ok", "skipped"):
            return f"{st['status']}:{name}"
    return "ok"


def needs_run(entry: dict[str, Any] | None, stages: Sequence[str], timeout: float, rerun_failed: bool) -> bool:
    """Whether ``stages`` of a type must run: one is missing, was run with other settings, or
    (``rerun_failed``) did not succeed. A stage record carries its own settings key; records
    from before that carry the entry's key, computed over the stages that run had."""
    if entry is None:
        return True
    recs = entry.get("stages", {})
    for name in stages:
        rec = recs.get(name)
        if rec is None:
            return True
        wanted = settings_key([name], timeout) if "settings" in rec else settings_key([s for s in STAGES if s in recs], timeout)
        if rec.get("settings", entry.get("settings")) != wanted:
            return True
        if rerun_failed and rec["status"] not in ("ok", "skipped"):
            return True
    return False


def merge(old: dict[str, Any] | None, records: dict[str, dict[str, Any]], stages: Sequence[str],
          timeout: float) -> dict[str, dict[str, Any]]:
    """This run's stage records over the stored ones: a stage not run now keeps its record (a
    verify-only run keeps the build, trace and lint of the last full run)."""
    for name, rec in records.items():
        rec["settings"] = settings_key([name], timeout)
    kept = {k: v for k, v in (old or {}).get("stages", {}).items() if k not in stages}
    return {name: {**kept, **records}[name] for name in STAGES if name in kept or name in records}


_SAME_BUILD = ("plan", "parameters", "head", "inputs")
_ABSORBED = ("verify", "identity", "rewrite")


def _same_graph(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Did both stores trace a graph of the same size, and did ``other`` lint it? Then its trace
    and lint records move together (a rule's new finding on the same graph), and our verify
    record, made on our trace, still describes the graph."""
    mine, other = ours.get("trace", {}), theirs.get("trace", {})
    return "lint" in theirs and mine.get("status") == other.get("status") == "ok" \
        and mine.get("nodes") is not None and mine.get("nodes") == other.get("nodes")


def absorb(store: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Take ``other``'s verify, identity and rewrite records (a sweep run in another checkout or
    store) where they are newer and were made on the same build as this store's (plan, size,
    head and inputs agree): a record from another build would describe another model. Its trace
    and lint records come too where it traced a graph of the same size (:func:`_same_graph`).
    Returns the types updated."""
    updated = []
    for mt, theirs in other.get("entries", {}).items():
        ours = store["entries"].get(mt)
        if ours is None:
            continue
        b1, b2 = ours["stages"].get("build", {}), theirs["stages"].get("build", {})
        if not b1 or any(b1.get(k) != b2.get(k) for k in _SAME_BUILD):
            continue
        newer = theirs.get("finished", 0.0) >= ours.get("finished", 0.0)
        take = {k: v for k, v in theirs["stages"].items()
                if k in _ABSORBED and (k not in ours["stages"] or newer)}
        if newer and _same_graph(ours["stages"], theirs["stages"]):
            take.update(trace=theirs["stages"]["trace"], lint=theirs["stages"]["lint"])
        if take:
            ours["stages"] = {k: {**ours["stages"], **take}[k] for k in STAGES if k in ours["stages"] or k in take}
            ours["finished"] = max(ours.get("finished", 0.0), theirs.get("finished", 0.0))
            updated.append(mt)
    return updated


def take(store: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Take ``other``'s entries whole where they are newer (a sweep of every stage of those
    types, run in another store while this one was in use), with its runs. Unlike
    :func:`absorb`, the build moves too, so each entry stays one build's. Returns the types."""
    taken = [mt for mt, theirs in other.get("entries", {}).items()
             if theirs.get("finished", 0.0) >= store["entries"].get(mt, {}).get("finished", 0.0)]
    for mt in taken:
        store["entries"][mt] = other["entries"][mt]
    store.setdefault("runs", []).extend(r for r in other.get("runs", []) if r not in store.get("runs", []))
    return taken


# -- running ----------------------------------------------------------------------------------


@dataclass
class _Slot:
    proc: Any
    conn: Connection
    model_type: str | None = None
    started: float = 0.0
    stage: str = ""
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: int = 0


def _context() -> Any:
    return mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context("spawn")


def _start(ctx: Any, stages: Sequence[str], threads: int) -> _Slot:
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker, args=(child, list(stages), threads), daemon=True)
    proc.start()
    child.close()
    return _Slot(proc, parent)


def _stop(slot: _Slot) -> None:
    if slot.proc.is_alive():
        slot.proc.kill()
    slot.proc.join(5)
    slot.conn.close()


def sweep(types: Sequence[str], stages: Sequence[str], jobs: int, timeout: float,
          on_done: Callable[[str, dict[str, Any]], None], on_start: Callable[[str], None] | None = None) -> None:
    """Run every type in worker processes; ``on_done(type, stage_records)`` as each finishes."""
    ctx = _context()
    threads = 1  # the models are small: a second thread buys little and slows a neighbour
    queue = list(types)
    slots: list[_Slot] = []
    # a worker the kernel killed (out of memory beside its neighbours) gets its type run again at
    # the end, alone
    alone: list[str] = []
    retried: set[str] = set()
    try:
        while queue or alone or any(s.model_type for s in slots):
            if not queue and alone and not any(s.model_type for s in slots):
                queue, retried, jobs = alone, set(alone), 1
                alone = []
            while len(slots) < jobs and queue:
                slots.append(_start(ctx, stages, threads))
            for s in slots:
                if s.model_type is None and queue:
                    s.model_type, s.started, s.records, s.stage = queue.pop(0), time.time(), {}, ""
                    s.conn.send(s.model_type)
                    if on_start:
                        on_start(s.model_type)
            busy = [s for s in slots if s.model_type]
            ready = wait([s.conn for s in busy] + [s.proc.sentinel for s in busy], timeout=1.0)
            now = time.time()
            for s in list(busy):
                finished = False
                died = False
                if s.conn in ready or s.proc.sentinel in ready:
                    try:
                        while s.conn.poll():
                            rec = s.conn.recv()
                            if rec.get("done"):
                                finished = True
                                break
                            s.stage = rec["stage"]
                            if rec["status"] != "running":
                                rec.pop("type", None)
                                s.records[rec["stage"]] = rec
                    except (EOFError, OSError):
                        died = True
                    if not finished and not s.proc.is_alive():
                        died = True
                if not finished and died and s.proc.exitcode is not None and s.proc.exitcode < 0 \
                        and jobs > 1 and s.model_type not in retried:
                    alone.append(s.model_type)  # type: ignore[arg-type]
                    _stop(s)
                    slots.remove(s)
                    continue
                if not finished and (died or now - s.started > timeout):
                    status = "error" if died else "timeout"
                    why = (f"worker died (exit code {s.proc.exitcode}) in {s.stage or 'start-up'}" if died
                           else f"over the {timeout:.0f} s limit in {s.stage or 'start-up'}")
                    _close_records(s, stages, status, why, now)
                    _stop(s)
                    slots.remove(s)
                    finished = True
                    mt, recs = s.model_type, s.records
                    assert mt is not None
                    on_done(mt, recs)
                    continue
                if finished:
                    mt, recs = s.model_type, s.records
                    s.model_type, s.tasks = None, s.tasks + 1
                    assert mt is not None
                    on_done(mt, recs)
                    if s.tasks >= TASKS_PER_WORKER:
                        s.conn.send(None)
                        _stop(s)
                        slots.remove(s)
    finally:
        for s in slots:
            with contextlib.suppress(Exception):
                s.conn.send(None)
            _stop(s)


def _close_records(slot: _Slot, stages: Sequence[str], status: str, why: str, now: float) -> None:
    """A killed worker: the stage it was in gets the status, the later ones are skipped."""
    running = slot.stage if slot.stage and slot.stage not in slot.records else None
    for name in stages:
        if name in slot.records:
            continue
        if name == running or (running is None and not slot.records and name == stages[0]):
            slot.records[name] = {"stage": name, "status": status, "seconds": round(now - slot.started, 1), "reason": why}
            running = "<done>"
        else:
            slot.records[name] = {"stage": name, "status": "skipped", "seconds": 0.0, "reason": f"{status} earlier"}


# -- rendering --------------------------------------------------------------------------------


def _fmt_counts(d: dict[str, int] | None) -> str:
    return " ".join(f"{k}×{v}" for k, v in sorted((d or {}).items())) or "–"


def summary(store: dict[str, Any]) -> dict[str, Any]:
    entries = store["entries"]
    base = {t for t, e in entries.items() if e.get("base_model")}

    def ok(e: dict[str, Any], stage: str) -> bool:
        return e.get("stages", {}).get(stage, {}).get("status") == "ok"

    traced = [e for e in entries.values() if ok(e, "trace")]
    linted = [e for e in entries.values() if ok(e, "lint")]
    verified = [e["stages"]["verify"] for e in entries.values() if e.get("stages", {}).get("verify", {}).get("checked") is not None]
    fps = [v["fingerprint"] for v in verified if v.get("fingerprint")]
    rewrites = [e["stages"]["rewrite"] for e in entries.values() if e.get("stages", {}).get("rewrite", {}).get("status") not in (None, "skipped")]
    identities = [e["stages"]["identity"] for e in entries.values() if e.get("stages", {}).get("identity", {}).get("status") not in (None, "skipped")]
    errors = sorted((t, name) for t, e in entries.items() for name, st in e.get("stages", {}).items() if st["status"] == "error")
    statuses = Counter(st["status"] for e in entries.values() for st in e.get("stages", {}).values())
    return {
        "types_in_mapping": store.get("types_in_mapping", len(entries)),
        "with_base_model": store.get("with_base_model", len(base)),
        "swept": len(entries),
        "swept_with_base_model": len(base),
        "built": sum(ok(e, "build") for e in entries.values()),
        "built_base": sum(ok(entries[t], "build") for t in base),
        "traced": len(traced),
        "traced_base": sum(ok(entries[t], "trace") for t in base),
        "linted": len(linted),
        "coverage_100": sum(e["stages"]["lint"].get("coverage") == 1.0 for e in linted),
        "verified": len(verified),
        "oracle_agree": sum(v["disagreements"] == 0 and v["checked"] == v["agreed"] and v["violations"] == v["confirmed"] for v in verified),
        "nodes_checked": sum(v["checked"] for v in verified),
        "nodes_agreed": sum(v["agreed"] for v in verified),
        "fingerprint_models": len(fps),
        "fingerprint_all_match": sum(f["matched"] == f["total"] for f in fps),
        "generators": sum(f["total"] for f in fps),
        "generators_matched": sum(f["matched"] for f in fps),
        "identities": len(identities),
        "identities_equal": sum(i["status"] == "ok" for i in identities),
        "identities_kept": sum(i["status"] == "ok" and bool(i.get("kept")) for i in identities),
        "rewrites": len(rewrites),
        "rewrites_ok": sum(r["status"] == "ok" for r in rewrites),
        "internal_errors": len(errors),
        "internal_error_list": [f"{t} ({s})" for t, s in errors],
        "timeouts": statuses.get("timeout", 0),
        "stage_seconds": round(sum(st.get("seconds", 0.0) for e in entries.values() for st in e.get("stages", {}).values()), 1),
        "last_run": (store.get("runs") or [{}])[-1],
    }


# why a rewrite stage did not succeed, from its one-line reason: (kind, pattern), first match wins
_WHY = (
    ("the model sets its own state on its first call (its next call computes another graph)", "sets its own state"),
    ("the model's own forward branches in Python on values computed from its weights or float inputs (a "
     "threshold on activations): a graph holds one path", "with real values, a branch on a"),
    ("the model branches on a random draw that the capture cannot turn into a layer drop (not a uniform draw "
     "compared with a constant, or its two paths do not align)", "branch on a random draw"),
    ("export with real values, which would decide a branch on an input's sizes or masks, fails in torch "
     "(a fake kernel it cannot infer, a size it cannot solve for)", "with real values, "),
    ("the model's own forward branches in Python on tensor values (a random draw's path, a check of "
     "activations or of an input's values)", "data-dependent branch"),
    ("the capture fails (an operator or a size export cannot follow)", "cannot trace"),
    ("the type is not built on the CPU (too large at the small size, or its config)", "cannot build"),
    ("the example inputs do not fit the model (a limit of the input builder)", "on its own example inputs"),
    ("comparing would take more memory than the budget at the example's size", "would hold about"),
    ("regenerated, but not equal bit for bit", " differences, first "),
    ("the stage ran past its time limit", "over the "),
    ("the rewritten model's outputs depend on inputs the original's do not (C over an axis other than "
     "the features)", "mixes positions"),
    ("the rewrite leaves violations or refuses a pattern", ""),
)


def failure_kinds(store: dict[str, Any], stage: str) -> list[tuple[str, list[str]]]:
    """The types whose ``stage`` failed, grouped by why (see ``_WHY``), largest group first."""
    groups: dict[str, list[str]] = {}
    for t, e in sorted(store["entries"].items()):
        rec = e.get("stages", {}).get(stage, {})
        if rec.get("status") in (None, "ok", "skipped"):
            continue
        reason = rec.get("reason", "")
        kind = next(k for k, pattern in _WHY if pattern in reason)
        groups.setdefault(kind, []).append(t)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _why_section(store: dict[str, Any]) -> list[str]:
    lines = ["## Why a rewrite did not succeed", "",
             "From each failure's one-line reason (the full reason is in the type's row). A submodule whose "
             "Python branches on tensor values that vary from call to call (an MoE layer looping over the "
             "experts a batch hit) is kept whole, and the generated module calls it; a rewrite refuses a "
             "model whose own forward branches so: a graph holds one path, so the generated module would "
             "compute the example's path for every input.", ""]
    for stage, title in (("identity", "null rewrite"), ("rewrite", "GCT rewrite")):
        kinds = failure_kinds(store, stage)
        lines += [f"| {title}: why | types |", "| --- | --- |"]
        lines += [f"| {kind} | {len(types)}: {', '.join(f'`{t}`' for t in types)} |" for kind, types in kinds]
        lines.append("")
    return lines


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "–"


def render(store: dict[str, Any]) -> str:
    s = summary(store)
    run = s["last_run"]
    lines = [
        "# The zoo: every transformers architecture through unitcheck",
        "",
        "Generated by `python bench/zoo.py` (`make zoo`) from `docs/zoo.json`; do not edit by hand.",
        f"Each `hf:<type>` is built from its config class with random weights at the small default size, "
        f"on the meta device for build, trace and lint, on the CPU for the oracle and the rewrite. "
        f"transformers {run.get('transformers', '?')}, torch {run.get('torch', '?')}.",
        "",
        "## Summary",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| model types in transformers' config mapping | {s['types_in_mapping']} ({s['with_base_model']} with a base model) |",
        f"| types swept | {s['swept']} ({s['swept_with_base_model']} with a base model) |",
        f"| built | {s['built']} ({s['built_base']}/{s['swept_with_base_model']} = {_pct(s['built_base'], s['swept_with_base_model'])} of those with a base model) |",
        f"| traced | {s['traced']} ({s['traced_base']}/{s['swept_with_base_model']} = {_pct(s['traced_base'], s['swept_with_base_model'])} of those with a base model) |",
        f"| linted | {s['linted']} |",
        f"| coverage 100% | {s['coverage_100']}/{s['linted']} linted models (the rest name their uncovered ops below) |",
        f"| oracle agreements | {s['oracle_agree']}/{s['verified']} models verified; {s['nodes_agreed']}/{s['nodes_checked']} nodes |",
        f"| fingerprint matches | {s['fingerprint_all_match']}/{s['fingerprint_models']} models with a loss; {s['generators_matched']}/{s['generators']} generators |",
        f"| null rewrites (`--to identity`) | {s['identities_equal']}/{s['identities']} equal bit for bit (eval and train: outputs, gradients, buffers); "
        f"{s['identities_kept']} of them call submodules kept whole (a forward that branches on its data) |",
        f"| GCT rewrites (causal LMs) | {s['rewrites_ok']}/{s['rewrites']} complete (zero violations left, no dependence between positions added, and `units DIR --verify` exits 0 on the written directory) |",
        f"| internal errors | {s['internal_errors']}{(': ' + ', '.join(s['internal_error_list'][:20])) if s['internal_errors'] else ''} |",
        f"| timeouts | {s['timeouts']} |",
        f"| wall time | last run {run.get('wall_seconds', 0):.0f} s with {run.get('jobs', '?')} job(s), "
        f"stages {run.get('stages', '?')}; {s['stage_seconds']:.0f} s of stage time in the store |",
        "",
        "Status is `ok` or `<status>:<stage>` for the first stage that did not succeed (`fail`: the one-line "
        "error a user gets, exit 2; `error`: an internal exception, a bug; `timeout`). Violations are counted by "
        "rule code; oracle is nodes agreed/checked (and violations confirmed/found, and those the example's values "
        "leave unexercised: an empty tensor or a constant mask); fingerprint is "
        "generators matched/total.",
        "",
        *_why_section(store),
        "## Types",
        "",
        "| type | status | head | nodes | coverage | uncovered ops | violations | oracle | fingerprint | identity | rewrite | seconds | reason |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in sorted(store["entries"]):
        e = store["entries"][t]
        st = e.get("stages", {})
        b, lt, v, idn, rw = (st.get(k, {}) for k in ("build", "lint", "verify", "identity", "rewrite"))
        ids = ((f"equal, {idn['kept']} kept" if idn.get("kept") else "equal") if idn.get("status") == "ok"
               else f"{idn['differences']} diffs") if "differences" in idn \
            else ("" if idn.get("status") in (None, "skipped") else idn["status"])
        nodes = lt.get("nodes", st.get("trace", {}).get("nodes", ""))
        cov = f"{100 * lt['coverage']:.1f}%" if "coverage" in lt else ""
        unc = ", ".join(f"`{k}`" for k in sorted(lt.get("uncovered") or {})) if lt else ""
        viol = _fmt_counts(lt.get("violations")) if "violations" in lt else ""
        orc = (f"{v['agreed']}/{v['checked']} ({v['confirmed']}/{v['violations']}"
               + (f", {v['unexercised']} unexercised" if v.get("unexercised") else "") + ")" if "checked" in v else "")
        fp = v.get("fingerprint")
        fps = f"{fp['matched']}/{fp['total']}" if fp else ("no loss" if "checked" in v else "")
        rws = (f"{rw['rewritten']}/{rw['residuals']} → {_fmt_counts(rw.get('violations_after'))}" if "residuals" in rw
               else ("" if rw.get("status") in (None, "skipped") else rw["status"]))
        if "verify_rc" in rw:
            rws += f"; verify exit {rw['verify_rc']}"
        secs = " / ".join(f"{st[k]['seconds']:.1f}" for k in STAGES if k in st and st[k]["status"] != "skipped")
        reason = next((st[k]["reason"] for k in STAGES if k in st and st[k]["status"] not in ("ok", "skipped")), "")
        head = b.get("head", "")
        base = "" if e.get("base_model") else " (no base model)"
        lines.append(" | ".join([
            f"| `{t}`{base}", entry_status(e), head, str(nodes), cov, unc, viol, orc, fps, ids, rws, secs,
            reason.replace("|", "\\|")[:300] + " |",
        ]))
    return "\n".join(lines) + "\n"


# -- command line -----------------------------------------------------------------------------


def all_types() -> tuple[list[str], set[str]]:
    from unitcheck import hf

    types = hf.model_types()
    return types, {t for t in types if hf.has_base_model(t)}


def choose(types: Sequence[str], only: Sequence[str] | None, sample: int | None, seed: int) -> list[str]:
    if only:
        unknown = [t for t in only if t not in types]
        if unknown:
            raise SystemExit(f"zoo: unknown model types: {', '.join(unknown)}")
        return list(only)
    if sample:
        return sorted(random.Random(seed).sample(list(types), min(sample, len(types))))
    return list(types)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per model type before its worker is killed")
    ap.add_argument("--only", nargs="+", metavar="TYPE", help="these model types only")
    ap.add_argument("--sample", type=int, metavar="N", help="a seeded random sample of N model types")
    ap.add_argument("--seed", type=int, default=0, help="seed for --sample (default 0)")
    ap.add_argument("--store", type=Path, default=STORE, help=f"JSON store (default {STORE.relative_to(ROOT)})")
    ap.add_argument("--md", type=Path, default=PAGE, help=f"page to write (default {PAGE.relative_to(ROOT)})")
    ap.add_argument("--rerun", action="store_true", help="run the chosen types even where the store has them")
    ap.add_argument("--keep-failed", action="store_true", help="do not rerun entries that failed (only missing or stale ones)")
    ap.add_argument("--render-only", action="store_true", help="rewrite the page from the store and exit")
    ap.add_argument("--absorb", type=Path, nargs="+", metavar="STORE",
                    help="take these stores' verify, identity and rewrite records made on the same builds, "
                         "rewrite the page and exit")
    ap.add_argument("--take", type=Path, nargs="+", metavar="STORE",
                    help="take these stores' newer entries whole (every stage, the build included), rewrite "
                         "the page and exit")
    ap.add_argument("--fail-on-error", action="store_true",
                    help="exit 1 when a type run now has an internal error (a bug) in any stage (for CI)")
    args = ap.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad or not stages:
        ap.error(f"unknown stage(s) {bad}; choose from {','.join(STAGES)}")
    stages = [s for s in STAGES if s in stages]
    store = load_store(args.store)
    if args.absorb:
        for path in args.absorb:
            if not path.exists():
                ap.error(f"no store at {path}")
            got = absorb(store, load_store(path))
            print(f"zoo: {len(got)} types took records from {path}")
        save_store(args.store, store)
    for path in args.take or []:
        if not path.exists():
            ap.error(f"no store at {path}")
        print(f"zoo: {len(take(store, load_store(path)))} types taken whole from {path}")
        save_store(args.store, store)
    if args.render_only or args.absorb or args.take:
        _write_page(args.md, store)
        return 0

    import signal

    import torch
    import transformers

    # a terminated sweep stops its workers too (sweep()'s finally block runs on SystemExit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    types, base = all_types()
    store["types_in_mapping"], store["with_base_model"] = len(types), len(base)
    key = settings_key(stages, args.timeout)
    chosen = choose(types, args.only, args.sample, args.seed)
    todo = [t for t in chosen
            if args.rerun or needs_run(store["entries"].get(t), stages, args.timeout, not args.keep_failed)]
    print(f"zoo: {len(chosen)} types chosen, {len(todo)} to run (stages {','.join(stages)}, {args.jobs} job(s), "
          f"{args.timeout:.0f} s limit)", flush=True)
    t0 = time.time()

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console_progress = Progress(TextColumn("[bold]zoo"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("{task.description}"), disable=not sys.stderr.isatty())
    with console_progress as progress:
        task = progress.add_task("", total=len(todo))
        running: list[str] = []

        def started(mt: str) -> None:
            running.append(mt)
            progress.update(task, description=" ".join(running[-3:]))

        def done(mt: str, records: dict[str, dict[str, Any]]) -> None:
            if mt in running:
                running.remove(mt)
            records = merge(store["entries"].get(mt), records, stages, args.timeout)
            entry = {"settings": key, "base_model": mt in base, "stages": records, "finished": time.time()}
            store["entries"][mt] = entry
            save_store(args.store, store)
            status = entry_status(entry)
            secs = sum(r.get("seconds", 0.0) for r in records.values())
            reason = next((r["reason"] for r in records.values() if r["status"] not in ("ok", "skipped")), "")
            line = f"{mt:<32} {status:<16} {secs:6.1f}s {reason[:120]}"
            if progress.disable:
                print(line, flush=True)
            else:
                progress.console.print(line)
            progress.update(task, advance=1, description=" ".join(running[-3:]))

        sweep(todo, stages, args.jobs, args.timeout, done, started)
    wall = time.time() - t0
    store.setdefault("runs", []).append({
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": round(wall, 1), "types": len(todo),
        "chosen": len(chosen), "jobs": args.jobs, "stages": ",".join(stages), "timeout": args.timeout,
        "torch": torch.__version__, "transformers": transformers.__version__,
    })
    save_store(args.store, store)
    _write_page(args.md, store)
    s = summary(store)
    print(f"zoo: {s['swept']} types in the store; built {s['built']}, traced {s['traced']}, linted {s['linted']}, "
          f"coverage 100% {s['coverage_100']}, internal errors {s['internal_errors']}, timeouts {s['timeouts']}; "
          f"wall {wall:.0f} s", flush=True)
    bugs = [f"{t} ({name})" for t in todo for name, rec in store["entries"][t]["stages"].items() if rec["status"] == "error"]
    if bugs and args.fail_on_error:
        print(f"zoo: internal errors in {', '.join(bugs)}", file=sys.stderr)
        return 1
    return 0


def _write_page(path: Path, store: dict[str, Any]) -> None:
    from unitcheck.fsutil import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(str(path), render(store))


if __name__ == "__main__":
    raise SystemExit(main())
