"""Hugging Face architectures built from their config classes with random weights (no download).

``hf:<model_type>`` builds any architecture in transformers' config mapping at a small size (2
layers, width 64); ``--set key=value`` overrides config fields (``text_config.hidden_size=32``
reaches into a sub-config).

Shrinking a default config field by field breaks the relations the architecture needs (a rotary
dimension larger than the new head, an embedding wider than the hidden size, a per-layer list
longer than the layer count), so the config is rebuilt through its own class: size fields are
scaled by one factor per (sub-)config, fields the class derives (``head_dim``, ``intermediate_size``
...) are left for it to derive again, and per-layer lists keep the first two layers of each kind.
Several plans, from smallest to the unchanged default, are tried in order with every head the type
has (loss-returning heads first) and every input layout its forward could take (from
``main_input_name``: token ids, images, audio features or waveforms, image-text pairs, forecasting
windows; ``labels`` where the head computes a loss); the first candidate whose forward pass runs on
fake meta tensors, the way ``torch.export`` runs it, is built.

>>> model, inputs = build("gpt2", {"n_layer": 2})     # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .common import (
    _BUDGET_S,
    CONFIG_MAPPING_CLS,
    PLANS,
    SMALL_DEFAULTS,
    HFError,
    OverrideError,
    Plan,
    _get,
    _is_int,
    _quiet,
    _short,
    _transformers,
    model_types,
    parse_value,
    resolve_type,
)
from .config import ATTENTION_KEY, image_size_overrides, make_config
from .heads import PART, _for_class, _label_kind, _uncallable, has_base_model, head_classes
from .inputs import (
    _asked_for,
    _asked_in_training,
    _declared,
    _default_language,
    _media_token,
    _named_inputs,
)
from .layouts import _input_layouts
from .media import _EMBEDS, _counted_by_tower, _embedding_width, _tokens_said, _with_tokens
from .parts import _parents, build_part
from .repair import (
    Fix,
    _apply_fixes,
    _instantiate,
    _instantiate_repaired,
    _real_run,
    _real_run_repaired,
    _repair,
)
from .runs import _logits_rows, _loss_refuses_labels, _probe, _probe_limited, _runs_on_cpu
from .shapes import _SIZE_INDEPENDENT, _reshaped, _with_companions, _with_shapes

__all__ = ["ATTENTION_KEY", "CONFIG_MAPPING_CLS", "PLANS", "SMALL_DEFAULTS", "Built", "HFError", "OverrideError",
           "build", "cpu_memory", "has_base_model", "head_classes", "image_size_overrides", "make_config",
           "model_types", "parse_value", "resolve_type"]


@dataclass
class Built:
    """What :func:`build` chose: the plan, the head, the inputs' layout, and what it tried."""

    model_type: str
    plan: str
    task: str
    head: str
    layout: str
    probed: bool
    tried: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Choice:
    """A candidate: plan, head, inputs layout, and what was added to make it run."""

    plan: Plan
    task: str
    head: str
    layout: str
    probed: bool
    tried: list[str]
    fixes: tuple[Fix, ...] = ()
    named: tuple[str, ...] = ()  # optional inputs the model's own error asked for
    shaped: tuple[tuple[str, tuple[int, ...]], ...] = ()  # inputs remade at the shape the first layer asked for
    tokens: tuple[str, int] | None = None  # (media kind, count): tokens a real run's check asked the text to hold
    # how the search ended on it: "passed" (a probe or a real run passed it), "stopped" (its probe
    # met fake tensors' limits, and export may pass), or "first" (nothing passed)
    ended: str = "passed"

    @property
    def passed(self) -> bool:
        return self.ended == "passed"


_CHOICES: dict[tuple[Any, ...], _Choice] = {}


def _choose(model_type: str, overrides: Mapping[str, Any], batch: int, seq: int, seed: int) -> _Choice:
    """Search plans x heads x input layouts on the meta device; the first whose forward runs wins."""
    key = (model_type, tuple(sorted((k, repr(v)) for k, v in overrides.items())), batch, seq, seed)
    if key in _CHOICES:
        return _CHOICES[key]
    tf = _transformers()
    heads = head_classes(model_type)
    try:
        enc_dec = bool(_get(CONFIG_MAPPING_CLS(model_type)(), "is_encoder_decoder", False))
    except Exception:  # a default config that cannot be built: make_config below says why
        enc_dec = False
    if enc_dec:
        heads.sort(key=lambda h: h[0] not in ("seq_to_seq_causal_lm", "speech_seq_2_seq"))
    if not heads:
        raise HFError(f"{model_type} has no model class in transformers' auto mappings (a configuration-only or "
                      "sub-model type)")
    refusals = {name: _uncallable(tf, name) for _, name, _ in heads}
    uncallable = {name: reason for name, reason in refusals.items() if reason is not None}
    heads = [h for h in heads if h[1] not in uncallable]
    if not heads:
        classes = "; ".join(f"{name.rpartition(':')[2]} {reason}" for name, reason in uncallable.items())
        raise HFError(f"{model_type}'s model class {classes}: there is no call on tensors to capture (its parts "
                      "that are types of their own build as hf:<type>)")
    tried: list[str] = []
    first: _Choice | None = None
    t0 = time.perf_counter()
    config_errors: list[str] = []
    previous: set[str] | None = None
    hopeless: set[tuple[str, str]] = set()  # (head, layout) pairs that fail whatever the size
    refused_ids: set[tuple[str, str]] = set()  # (plan, head) whose input_ids the model refused by name
    limited: _Choice | None = None  # the first candidate a real run passed where fake tensors could not decide
    limited_inputs: frozenset[str] = frozenset()

    def drops_limited(used: Mapping[str, Any]) -> bool:
        """Whether inputs leave out some a real run took (Kimi-K2.5's text without its image):
        the layouts come most faithful first, so the earlier candidate is kept."""
        return limited is not None and frozenset(used) < limited_inputs

    stopped: tuple[_Choice, frozenset[str]] | None = None  # the first candidate a value branch stopped

    def with_tokens(inputs: dict[str, Any], config: Any, asked: list[str], said: tuple[str, int] | None
                    ) -> tuple[dict[str, Any], tuple[str, int]] | None:
        """The text holding ``said`` media tokens, where a real run passes on it (else on as many
        over the embedding width, where the check counted numbers): the inputs and the tokens."""
        for _ in range(2):
            if said is None:
                break
            remade = _with_tokens(inputs, config, said)  # masks as long as the text:
            remade.update(_named_inputs(asked, config, remade, batch, seq, seed, _declared(model)))
            again = _real_run(tf, head, config, remade, seed, model)
            if again is None:
                return remade, said
            # the same count again: the message counted numbers, not feature vectors (Mistral 3's
            # "tokens: 2048, features: 2048" for 64 vectors as wide as its text embeddings)
            width = _embedding_width(model) if _tokens_said(again, config, inputs) == said else 0
            said = (said[0], said[1] // width) if width and said[1] % width == 0 else None
        return None

    def real_run(inputs: dict[str, Any], config: Any = None, asked: list[str] | None = None
                 ) -> tuple[str | None, dict[str, Any], tuple[str, int] | None]:
        """A real run of the candidate (of ``config``, else the plan's), and where it failed for
        want of media tokens in the text, of the text holding them: its failure, the inputs it
        ran, the tokens it added."""
        config = cfg if config is None else config
        real = _real_run(tf, head, config, inputs, seed, model)
        placed = with_tokens(inputs, config, named if asked is None else asked, _tokens_said(real or "", config, inputs))
        return (None, *placed) if placed else (real, inputs, None)

    def media_tokens(inputs: dict[str, Any], config: Any, named: list[str], tower: nn.Module
                     ) -> tuple[str, int] | None:
        """Media beside text that passed on fake tensors, which defer the check that the text holds
        one token per feature: a real run counts them (Granite Docling's images came with none,
        and the CPU example failed); where the count its failure says is not the features'
        (Granite Speech's says the batch), ``tower`` counts them, as the layouts do."""
        if "input_ids" not in inputs or not _runs_on_cpu(model) or not any(
                isinstance(v, torch.Tensor) and v.is_floating_point() for v in inputs.values()):
            return None
        ids = inputs["input_ids"]
        held = (_media_token(config, kind) for kind in ("image", "video", "audio"))
        if isinstance(ids, torch.Tensor) and any(_is_int(t) and bool((ids == int(t)).any()) for t in held):
            return None  # the layout placed its tokens already (LLaVA's counted images): nothing to count
        real, _, said = real_run(inputs, config, named)
        if real is None:
            return said
        counted = _counted_by_tower(tower, config, inputs)
        placed = with_tokens(inputs, config, named, counted) if counted != said else None
        return placed[1] if placed else None

    for plan in PLANS:
        failures: set[str] = set()
        try:
            cfg = make_config(model_type, overrides, plan)
        except OverrideError:
            raise
        except HFError as err:
            config_errors.append(str(err))
            tried.append(f"{plan.name}: {err}")
            continue
        plain_cfg = cfg
        for task, head, labels in heads:
            try:
                model, built = _instantiate_repaired(tf, head, plain_cfg, seed)
                model.eval()
            except Exception as err:
                tried.append(f"{plan.name}/{head}: build: {_short(err, 160)}")
                continue
            cfg = _apply_fixes(plain_cfg, built)
            try:
                _default_language(model, cfg)
                layouts = _input_layouts(model, _for_class(type(model), cfg), labels, batch, seq, seed)
            except Exception as err:
                tried.append(f"{plan.name}/{head}: inputs: {_short(err, 160)}")
                continue
            for layout, inputs in layouts:
                if first is None:
                    first = _Choice(plan, task, head, layout, False, tried, built, ended="first")
                if (head, layout) in hopeless or ("*", layout) in hopeless:
                    continue
                if layout == _EMBEDS and (plan.name, head) not in refused_ids:
                    continue  # embeddings only where the ids were refused: they skip the model's own table
                why = _probe(model, inputs)
                fixes = _repair(cfg, why, inputs) if why is not None else ()
                if fixes:
                    try:
                        with torch.device("meta"):
                            torch.manual_seed(seed)
                            repaired = _instantiate(tf, head, _apply_fixes(cfg, fixes))
                        repaired.eval()
                        if _probe(repaired, inputs) is None:
                            choice = _Choice(plan, task, head, layout, True, tried, (*built, *fixes),
                                             tokens=media_tokens(inputs, _apply_fixes(cfg, fixes), [], repaired))
                            _CHOICES[key] = limited if limited and drops_limited(inputs) else choice
                            return _CHOICES[key]
                    except Exception as err:
                        tried.append(f"{plan.name}/{head}/{layout} repaired: {_short(err, 160)}")
                named: list[str] = []
                current = inputs
                while why is not None and len(named) < 4 and (asked := _asked_for(model, current, why)):
                    named += asked  # "You have to specify bbox": give it one and try again
                    current = {**inputs, **_named_inputs(named, cfg, inputs, batch, seq, seed, _declared(model))}
                    why = _probe(model, current)
                shaped: tuple[tuple[str, tuple[int, ...]], ...] = ()
                if why is not None and _loss_refuses_labels(why, current) and (rows := _logits_rows(model, current)):
                    # labels in the logits' shape (Dia's, one row per codebook), where they pass
                    relabelled = _with_shapes(current, (("labels", rows),), seed)
                    if _probe(model, relabelled) is None:
                        shaped, current, why = (("labels", rows),), relabelled, None
                for _ in range(2):  # the layer reading an input says the shape it wants
                    if why is None:
                        break
                    results = [((*shaped, *os), t, _probe(model, t)) for o in _reshaped(why, current, cfg)
                               for os in _with_companions(current, o) for t in [_with_shapes(current, os, seed)]]
                    best = next((r for r in results if r[2] is None), None) or next((r for r in results if r[2] != why), None)
                    if best is None:
                        break
                    shaped, current, why = best
                # layouts holding every input the first stopped one holds (MiniCPM-V's packed patches
                # with their grid, after the image alone): a real run trades no input away
                same_inputs = stopped is None or (stopped[1] <= frozenset(inputs) and stopped[0].head == head)
                if why is not None and limited is None and same_inputs and _probe_limited(why):
                    # export may manage it; where fake tensors cannot decide, a real run decides
                    # between layouts of the same inputs (a waveform with or without its channel
                    # axis); the first such candidate stays the choice if no real run passes, so a
                    # real-run failure never trades inputs away (GLM-5-Next keeps its image)
                    if stopped is None:
                        stopped = (_Choice(plan, task, head, layout, False, tried, built, tuple(named), shaped,
                                           ended="stopped"),
                                   frozenset(inputs))
                    real, current, tokens = real_run(current)
                    for o in _reshaped(real or "", current, cfg):  # the real run's error shows an input's shape
                        again, remade, said = real_run(_with_shapes(current, (o,), seed))
                        more = _asked_for(model, remade, again) if again is not None else []
                        if more:  # the reshaped input let the run on to an argument it names (PI0's
                            # robot state, then its cameras' pixel_attention_mask)
                            again, remade, said = real_run({**remade, **_named_inputs([*named, *more], cfg, remade,
                                                                                      batch, seq, seed, _declared(model))})
                        if again is None:
                            shaped, current, real, tokens, named = (*shaped, o), remade, None, said, [*named, *more]
                            break
                    asked = _asked_for(model, current, real) if real is not None else []
                    run_fixes: tuple[Fix, ...] = ()
                    if asked:  # the real run's error names an optional argument (UDOP's bbox)
                        remade = {**current, **_named_inputs(asked, cfg, current, batch, seq, seed, _declared(model))}
                        again, run_fixes = _real_run_repaired(tf, head, cfg, remade, seed, model)
                        if again is None:
                            named, current, real = [*named, *asked], remade, None
                    elif real is not None:
                        real, run_fixes = _real_run_repaired(tf, head, cfg, current, seed, model, real)
                    if real is None:
                        limited = _Choice(plan, task, head, layout, False, tried, (*built, *run_fixes), tuple(named),
                                          shaped, tokens)
                        # a run too large to make proves nothing: it does not outrank what the probe passes
                        limited_inputs = frozenset(current) if _runs_on_cpu(model) else frozenset()
                    else:
                        why = f"{why}; on real values: {real}"
                if why is None and limited and drops_limited(current):
                    _CHOICES[key] = limited
                    return limited
                if why is None:
                    asked = _asked_in_training(model, current)
                    if asked:  # Molmo2 needs ``mm_token_type_ids`` in training only
                        remade = {**current, **_named_inputs(asked, cfg, current, batch, seq, seed, _declared(model))}
                        if _probe(model, remade) is None:
                            named, current = [*named, *asked], remade
                    choice = _Choice(plan, task, head, layout, True, tried, built, tuple(named), shaped,
                                     media_tokens(current, cfg, named, model))
                    _CHOICES[key] = choice
                    return choice
                tried.append(f"{plan.name}/{head}/{layout}: {why}")
                failures.add(why)
                if layout == "input_ids" and "input_ids" in why:
                    refused_ids.add((plan.name, head))
                if any(k in why for k in _SIZE_INDEPENDENT):
                    # a branch on values fails in every head that runs the same tower
                    hopeless.add(("*" if "ata-dependent" in why or "DataDependent" in why else head, layout))
            if time.perf_counter() - t0 > _BUDGET_S and first is not None:
                break
        if time.perf_counter() - t0 > _BUDGET_S and first is not None:
            break
        if plan.name == "layers-only" and first is not None and previous is not None and failures and failures <= previous:
            break  # unshrunk widths failed the same way: size is not the cause, skip the full-size default
        if plan.name == "small":
            previous = failures
    if first is None:
        why = tried[0] if tried else (config_errors[0] if config_errors else "no input layout for its forward")
        missing = re.search(r"requires the (\w+) library", " ".join(tried))
        if missing:
            why = f"its model class needs the {missing.group(1)} library, which is not installed"
        raise HFError(f"cannot build {model_type} on CPU from its config: {why}")
    _CHOICES[key] = limited or (stopped[0] if stopped else None) or first
    return _CHOICES[key]


def build(
    model_type: str,
    overrides: Mapping[str, Any] | None = None,
    batch: int = 2,
    seq: int = 16,
    seed: int = 0,
    device: str | torch.device = "cpu",
    info: list[Built] | None = None,
) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The model (the first head that returns a loss, else the base model) and its keyword inputs.

    A block of another model (:mod:`.parts`) is built as its parent calls it, and so is a
    sub-model whose inputs no candidate passed or only guesses gave; where nothing passes at
    ``batch``, batch 1 is tried. ``info``, when given, receives a :class:`Built` saying which
    plan, head and inputs were chosen."""
    model_type = resolve_type(model_type)
    heads = head_classes(model_type)

    def made(parent: Built, parent_type: str, block: nn.Module, given: str) -> Built:
        # probed: a real run of the block on these inputs returned, which no probe outranks
        return Built(model_type, parent.plan, PART, type(block).__name__,
                     f"as {parent_type} calls it ({parent.layout}{given})", True, parent.tried)

    given = dict(overrides or {})

    def as_called(head: str | None) -> tuple[nn.Module, dict[str, torch.Tensor]]:
        return build_part(model_type, head, given, batch, seq, seed, device, build, info, made)

    try:
        if (heads[0][0] == PART) if heads else _parents(model_type):  # a block of another model
            return as_called(heads[0][1] if heads else None)
        with _quiet():
            choice = _choose(model_type, given, batch, seq, seed)
        # inputs no main input name gave (labels in the logits' shape are the head's, not a guess)
        guessed = "(by name)" in choice.layout or any(name != "labels" for name, _ in choice.shaped)
        if (not choice.passed or guessed and not has_base_model(model_type)) and _parents(model_type):
            # a sub-model its parent calls: the call's inputs are what it is given (SAM 3's mask
            # decoder gets the backbone's three feature levels, not queries reshaped to pass)
            try:
                return as_called(choice.head)
            except HFError as err:  # the type's own candidate stays; the build's record says why
                said = f"as its parent calls it: {_short(err, 200)}"
                if said not in choice.tried:
                    choice.tried.append(said)
        if choice.ended == "first" and batch > 1 and _passes_alone(model_type, given, seq, seed):
            model, inputs = _build(model_type, given, 1, seq, seed, device, info)  # nothing passed at this batch
            if info:
                info[-1].layout += f" (batch 1: none passed at batch {batch})"
            return model, inputs
        return _build(model_type, given, batch, seq, seed, device, info)
    except HFError:
        raise
    except Exception as err:  # transformers code raising on a config it shipped: a one-line reason
        raise HFError(f"cannot build {model_type}: {_short(err)}") from None


def _passes_alone(model_type: str, overrides: dict[str, Any], seq: int, seed: int) -> bool:
    """Does a candidate pass at batch 1? Some models only run on one example: TVP's grid
    positions are viewed as ``(batch_size, 1, width, hidden)`` from a ``(width, hidden)`` table."""
    try:
        with _quiet():
            return _choose(model_type, overrides, 1, seq, seed).passed
    except HFError:
        return False


def _build(model_type: str, overrides: dict[str, Any], batch: int, seq: int, seed: int,
           device: str | torch.device, info: list[Built] | None) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    tf = _transformers()
    with _quiet():
        choice = _choose(model_type, overrides, batch, seq, seed)
        plan, task, head, layout, probed, tried, fixes = (choice.plan, choice.task, choice.head, choice.layout,
                                                          choice.probed, choice.tried, choice.fixes)
        cfg = _apply_fixes(make_config(model_type, overrides, plan), fixes)
        if str(device) != "meta":
            _check_fits_on_cpu(model_type, tf, head, cfg)
        try:
            model, more = _instantiate_repaired(tf, head, cfg, seed, device)
        except Exception as err:
            raise HFError(f"cannot build {model_type} ({head}): {_short(err)}") from None
        fixes = (*fixes, *more)
        model.eval()
        _default_language(model, cfg)
        layouts = dict(_input_layouts(model, _for_class(type(model), cfg), _label_kind(model_type, head), batch, seq,
                                      seed, only=layout))
    inputs = layouts.get(layout) or next(iter(layouts.values()))
    if choice.named:
        inputs = {**inputs, **_named_inputs(list(choice.named), cfg, inputs, batch, seq, seed, _declared(model))}
        layout = "+".join((layout, *choice.named))
    for i, (name, shape) in enumerate(choice.shaped):
        inputs = _with_shapes(inputs, choice.shaped[i:i + 1], seed)
        layout += f" ({name} as {list(shape)})"
    if choice.tokens:
        inputs = _with_tokens(inputs, cfg, choice.tokens)
        inputs.update(_named_inputs(list(choice.named), cfg, inputs, batch, seq, seed, _declared(model)))
        layout += f" ({choice.tokens[1]} {choice.tokens[0]} tokens)"
    if info is not None:
        repaired = sorted({".".join((*path, what)) for path, _, _, what in fixes})
        name = plan.name + (f" (repaired {', '.join(repaired)})" if repaired else "")
        info.append(Built(model_type, name, task, head.rpartition(":")[2], layout, probed, list(tried)))
    return model, inputs


def cpu_memory() -> int:
    """Bytes of memory this machine has (8 GiB where it cannot say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        return 8 * 2**30


def _check_fits_on_cpu(model_type: str, tf: Any, head: str, cfg: Any) -> None:
    """Refuse, in one line, a model whose float32 weights alone take half the machine's memory
    (a type no plan could shrink: dots3's 20B, Molmo 2's 8.7B): building it gets the process
    killed, not an error."""
    with torch.device("meta"):
        probe = _instantiate(tf, head, cfg)
    n = sum(p.numel() for p in probe.parameters())
    if 4 * n > cpu_memory() // 2:
        raise HFError(f"cannot build {model_type} on CPU: {n / 1e9:.1f}B parameters take {4 * n / 2**30:.0f} GiB "
                      f"in float32, more than half this machine's {cpu_memory() / 2**30:.0f} GiB")
