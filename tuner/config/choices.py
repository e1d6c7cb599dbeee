"""Speculation choices of a search space, suggested as Optuna's conditional parameters.

Each :class:`SpecChoice` is one value of the ``draft`` parameter (its :attr:`~SpecChoice.label`:
``none``, ``ngram``, ``suffix``, ``mtp``, a draft model's id, ``eagle3:HEAD``,
``dflash:DRAFTER``); once Optuna has chosen it (define-by-run), the choice asks for its own
parameters: K (``num_speculative_tokens``, in the choice's own range), the method's numeric
settings (``prompt_lookup_min``/``_max``, the ``suffix_decoding_*`` keys, ``dspark_draft_topk``)
and its options (``parallel_drafting``, ``draft_sample_method``, ``rejection_sample_method``,
``enable_adaptive_verification``, ``draft_lm_head_quantization``: categorical). A setting given
as one value is fixed and never asked for.

:func:`choices_from_search` turns the ``search`` section into choices, the earlier form
(``draft: [none, ngram, suffix, mtp, MODEL...]`` with one K range, ngram's window fixed at 1-4,
suffix at vLLM's defaults) included; :mod:`tuner.config.choice_rules` then keeps only what the
target, its drafters and the vLLM release support.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.config.methods import UNRESOLVED_K, Range, method_of
from tuner.config.methods.fields import SectionModel
from tuner.config.methods.suffix import SuffixMethod
from tuner.config.schema_base import RangeModel
from tuner.config.search_section import SearchModel
from tuner.config.trial import SpecMethod, SpeculativeConfig, choice_label
from tuner.config.verification import DraftHead, DraftSampling, Verification
from tuner.errors import ConfigError

__all__ = ["K_PARAM", "OPTION_ORDER", "Option", "Range", "SpecChoice", "choices_from_search"]

K_PARAM = "num_speculative_tokens"
_DEFAULT_K = Range(1, 8)
# Settings that are integers (the rest are floats); the order is the order they are asked for.
_INTEGER_SETTINGS = frozenset(
    {
        "prompt_lookup_min",
        "prompt_lookup_max",
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "dspark_draft_topk",
        "xpress_topc",
    }
)
Option = str | bool
# The categorical options, in the order they are asked: parallel drafting first, since a
# P-EAGLE head lands on the V1 model runner, where the V2-only options below do not exist.
OPTION_ORDER = (
    "parallel_drafting",
    "draft_sample_method",
    "rejection_sample_method",
    "enable_adaptive_verification",
    "draft_lm_head_quantization",
)

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second
# What the V2-only options must be on the V1 runner (V1 has no block verification and refuses
# adaptive verification: vllm/v1/sample/rejection_sampler.py, VllmConfig.
# _get_v1_model_runner_unsupported_features in vllm/config/vllm.py). Every release through
# 0.33 runs parallel drafting on an EAGLE head on V1 (_get_v2_model_runner_unsupported_features
# lists it), so a P-EAGLE variant takes these values and is never asked for them.
V1_VALUES: dict[str, Option] = {
    "rejection_sample_method": str(Verification.STANDARD),
    "enable_adaptive_verification": False,
    # 0.33's _get_v2_model_runner_unsupported_features keeps it off V1 (vllm/config/vllm.py:3119)
    "draft_lm_head_quantization": str(DraftHead.NONE),
}
# The vLLM default of each option: the value a choice without it runs.
_OPTION_DEFAULTS: dict[str, Option] = {
    "parallel_drafting": False,
    "draft_sample_method": str(DraftSampling.GREEDY),
    "rejection_sample_method": str(Verification.STANDARD),
    "enable_adaptive_verification": False,
    "draft_lm_head_quantization": str(DraftHead.NONE),
}
# A setting's levels in a grid or a design: every integer of a shorter range, else this many.
_LEVELS = 11
# The same in a screen's one-at-a-time design: both ends and the middle of a longer range.
_DESIGN_LEVELS = 3
# The earlier form fixed prompt lookup at 1-4; stored studies keep meaning what they meant.
_EARLIER_NGRAM = (("prompt_lookup_min", 1.0), ("prompt_lookup_max", 4.0))


@dataclass(frozen=True)
class SpecChoice:
    """One speculation choice: a method, its model (draft, head, drafter), K's range, its
    numeric settings and its options.

    Attributes:
        method: the vLLM method.
        model: the draft, head or block drafter id; None for none, ngram, suffix and mtp.
        k: the range of ``num_speculative_tokens`` (unused for ``none``).
        settings: the method's numeric settings, name and range (low == high: fixed).
        options: the method's categorical options, name and the values to search, in
            :data:`OPTION_ORDER` (one value: fixed).
    """

    method: SpecMethod
    model: str | None = None
    k: Range = _DEFAULT_K
    settings: tuple[tuple[str, Range], ...] = ()
    options: tuple[tuple[str, tuple[Option, ...]], ...] = ()

    @property
    def label(self) -> str:
        """The value of the ``draft`` parameter that selects this choice."""
        return choice_label(self.speculative(1) if self.method != SpecMethod.NONE else None)

    @property
    def tuned(self) -> tuple[str, ...]:
        """The parameters this choice asks Optuna for that can take more than one value."""
        if self.method == SpecMethod.NONE:
            return ()
        names = [K_PARAM] if self.k.low < self.k.high else []
        names += [name for name, r in self.settings if r.low < r.high]
        return (*names, *(name for name, values in self.options if len(values) > 1))

    def allowed(self, name: str) -> tuple[Option, ...]:
        """The values this choice searches for option ``name`` (vLLM's default when unset)."""
        return dict(self.options).get(name, (_OPTION_DEFAULTS[name],))

    def defaults(self) -> dict[str, float]:
        """Each setting's value when not tuned: the middle of its range (rounded for ints)."""
        values: dict[str, float] = {}
        for name, value in self.settings:
            middle = (value.low + value.high) / 2
            values[name] = float(round(middle)) if name in _INTEGER_SETTINGS else middle
        return method_of(self.method).settled(values)

    def design(self) -> tuple[dict[str, Any], ...]:
        """The own values a screen forecasts (settings and options): the defaults with each
        option's first value, then each other value of each searched option, and each other
        level of each searched setting, one at a time. The settings act mostly alone, so this
        one-at-a-time design covers each one's effect without the whole product; a P-EAGLE
        variant keeps the V1 values."""
        base = self._own(self.defaults(), {name: values[0] for name, values in self.options})
        found = [base]
        changes: list[tuple[str, Any]] = [
            (name, value) for name, values in self.options for value in values[1:]
        ]
        changes += [
            (name, level)
            for name, value in self.settings
            for level in _levels(name, value, _DESIGN_LEVELS)
            if level != base[name]
        ]
        for name, value in changes:
            variant = self._own(base, {name: value})
            if self._holds(variant) and variant not in found:
                found.append(variant)
        return tuple(found)

    def grid(self) -> Iterator[dict[str, Any]]:
        """Every combination of the own values (settings at :func:`_levels`, every option
        value): the whole space a benchmark's truth is taken over."""
        names = [name for name, _ in self.settings] + [name for name, _ in self.options]
        axes: list[tuple[Any, ...]] = [_levels(name, value) for name, value in self.settings]
        axes += [values for _, values in self.options]
        seen: list[dict[str, Any]] = []
        for values in itertools.product(*axes):
            variant = self._own({}, dict(zip(names, values, strict=True)))
            if self._holds(variant) and variant not in seen:
                seen.append(variant)
                yield variant

    def _holds(self, own: Mapping[str, Any]) -> bool:
        """Whether vLLM accepts ``own`` together (a screen skips a combination it refuses)."""
        return method_of(self.method).settled(own) == dict(own)

    def own(self, spec: SpeculativeConfig) -> dict[str, Any]:
        """The own values ``spec`` runs with, as :meth:`design` names them."""
        names = [name for name, _ in self.settings] + [name for name, _ in self.options]
        return self._own({}, {name: getattr(spec, name) for name in names})

    def _own(self, base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
        """``base`` with ``changes``, each value in the type a trial's parameters carry, the
        V2-only options at their V1 values on a P-EAGLE variant."""
        merged = {**base, **changes}
        typed = {
            name: (
                int(value)
                if name in _INTEGER_SETTINGS
                else value
                if name in OPTION_ORDER
                else float(value)
            )
            for name, value in merged.items()
        }
        options = {
            name: value if isinstance(value, bool) else str(value)
            for name, value in typed.items()
            if name in OPTION_ORDER
        }
        return {**typed, **self.fitted(options)}

    def fitted(self, options: Mapping[str, Option]) -> dict[str, Option]:
        """``options`` with the V2-only options at their V1 values on a P-EAGLE variant."""
        if not options.get("parallel_drafting"):
            return dict(options)
        return {name: V1_VALUES.get(name, value) for name, value in options.items()}

    def params(self, k: int, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """This choice's Optuna parameters at K = ``k`` with its own ``values`` (settings and
        options; the defaults and first values where not given), for enqueueing."""
        if self.method == SpecMethod.NONE:
            return {}
        given = dict(values or {})
        tuned = set(self.tuned)
        settings = {**self.defaults(), **{n: v for n, v in given.items() if n not in OPTION_ORDER}}
        own: dict[str, Any] = {
            name: int(value) if name in _INTEGER_SETTINGS else value
            for name, value in settings.items()
            if name in tuned
        }
        options = {n: v for n, v in given.items() if n in OPTION_ORDER}
        chosen = self.fitted({name: values[0] for name, values in self.options} | options)
        asked = self._asked(chosen)
        own.update({name: value for name, value in chosen.items() if name in asked})
        return {K_PARAM: k, **own}

    def speculative(
        self, k: int, values: Mapping[str, Any] | None = None
    ) -> SpeculativeConfig | None:
        """The vLLM settings at K = ``k``; unnamed settings take :meth:`defaults`, unnamed
        options their first value."""
        if self.method == SpecMethod.NONE:
            return None
        given = dict(values or {})
        chosen = {**self.defaults(), **{n: v for n, v in given.items() if n not in OPTION_ORDER}}
        typed: dict[str, Any] = {
            n: int(v) if n in _INTEGER_SETTINGS else float(v) for n, v in chosen.items()
        }
        options = {name: values[0] for name, values in self.options}
        options.update({n: v for n, v in given.items() if n in OPTION_ORDER})
        typed.update(self.fitted(options))
        return SpeculativeConfig(self.method, k, model=self.model, **typed)

    def suggest(self, trial: optuna.Trial) -> SpeculativeConfig | None:
        """Asks ``trial`` for K, the tuned settings and the options of this choice (after the
        choice)."""
        if self.method == SpecMethod.NONE:
            return None
        k = trial.suggest_int(K_PARAM, int(self.k.low), int(self.k.high))
        values: dict[str, Any] = {}
        for name, value in self.settings:
            low = value.low
            if name == "prompt_lookup_max":  # the window's max is asked at or above its min
                low = max(low, values.get("prompt_lookup_min", low))
            if value.high <= low:
                values[name] = value.high if value.high < low else low
            elif name in _INTEGER_SETTINGS:
                values[name] = trial.suggest_int(name, int(low), int(value.high))
            else:
                values[name] = trial.suggest_float(name, low, value.high, step=value.step)
        for name, allowed in self.options:
            if name in self._asked(values):
                values[name] = trial.suggest_categorical(name, list(allowed))
            else:
                values[name] = self.fitted({**values, name: allowed[0]})[name]
        return self.speculative(k, values)

    def _asked(self, chosen: Mapping[str, Any]) -> set[str]:
        """The options Optuna is asked for, given the values chosen before them."""
        asked = {name for name, values in self.options if len(values) > 1}
        return asked - set(V1_VALUES) if chosen.get("parallel_drafting") else asked


def _range(value: float | RangeModel) -> Range:
    if isinstance(value, RangeModel):
        step = getattr(value, "step", None)
        return Range(float(value.low), float(value.high), None if step is None else float(step))
    return Range(float(value), float(value))


def _settings(model: SectionModel) -> tuple[tuple[str, Range], ...]:
    names = [
        n
        for n in type(model).model_fields
        if n not in ("method", "model", K_PARAM, *OPTION_ORDER) and getattr(model, n) is not None
    ]
    return tuple((name, _range(getattr(model, name))) for name in names)


def _options(model: SectionModel) -> tuple[tuple[str, tuple[Option, ...]], ...]:
    """The model's options, each value once, in :data:`OPTION_ORDER` and the enums' order."""
    found = []
    for name in OPTION_ORDER:
        if name not in type(model).model_fields:
            continue
        written = getattr(model, name)
        order: list[Option] = (
            [False, True] if isinstance(written[0], bool) else [str(v) for v in type(written[0])]
        )
        values = tuple(v for v in order if v in written)
        found.append((name, values))
    return tuple(found)


def _k(value: float | RangeModel | None) -> Range:
    return UNRESOLVED_K if value is None else _range(value)


def _from_methods(search: SearchModel) -> Iterator[SpecChoice]:
    for entry in search.methods or ():
        if not method_of(entry.method).speculates:
            yield SpecChoice(entry.method)
            continue
        k = _k(getattr(entry, K_PARAM))
        settings, options = _settings(entry), _options(entry)
        for model in entry.models():
            yield SpecChoice(entry.method, model, k, settings, options)


def _from_drafts(search: SearchModel) -> Iterator[SpecChoice]:
    k = _range(search.num_speculative_tokens)
    for draft in search.draft:
        if draft == SpecMethod.NONE:
            yield SpecChoice(SpecMethod.NONE)
        elif draft == SpecMethod.NGRAM:
            fixed = tuple((name, Range(v, v)) for name, v in _EARLIER_NGRAM)
            yield SpecChoice(SpecMethod.NGRAM, None, k, fixed)
        elif draft == SpecMethod.SUFFIX:  # vLLM's own suffix settings
            yield SpecChoice(
                SpecMethod.SUFFIX, None, k, _settings(SuffixMethod(method=SpecMethod.SUFFIX))
            )
        elif draft == SpecMethod.MTP:
            yield SpecChoice(SpecMethod.MTP, None, k)
        else:
            yield SpecChoice(SpecMethod.DRAFT_MODEL, draft, k)


def choices_from_search(search: SearchModel, origin: str) -> tuple[SpecChoice, ...]:
    """The speculation choices of a ``search`` section, in the order written.

    Raises:
        ConfigError: both forms are used, or one choice is listed twice.
    """
    if search.methods is not None and search.earlier_form:
        raise ConfigError(
            f"{origin}: search.methods and search.draft/num_speculative_tokens both set: list "
            "every choice under methods (each with its own num_speculative_tokens)"
        )
    choices = tuple(_from_methods(search) if search.methods is not None else _from_drafts(search))
    labels = [c.label for c in choices]
    twice = next((label for label in labels if labels.count(label) > 1), None)
    if twice is not None:
        raise ConfigError(f"{origin}: search lists the choice {twice!r} twice: keep one")
    return choices


def _levels(name: str, value: Range, levels: int = _LEVELS) -> tuple[float, ...]:
    """The values of a setting a grid (or a design, with fewer ``levels``) takes: every
    integer of an integer range shorter than ``levels``, else its step's points where they
    are no more, else ``levels`` - 1 equal intervals."""
    if value.high <= value.low:
        return (value.low,)
    if name in _INTEGER_SETTINGS and value.high - value.low < levels:
        return tuple(float(v) for v in range(int(value.low), int(value.high) + 1))
    step = value.step or 0.0
    if not step or (value.high - value.low) / step >= levels:
        step = (value.high - value.low) / (levels - 1)
    count = math.floor((value.high - value.low) / step + 1e-9)
    points = (value.low + i * step for i in range(count + 1))
    if name in _INTEGER_SETTINGS:
        return tuple(dict.fromkeys(float(round(p)) for p in points))
    return tuple(round(p, 10) for p in points)
