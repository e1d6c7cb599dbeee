"""Speculation choices of a search space, suggested as Optuna's conditional parameters.

Each :class:`SpecChoice` is one value of the ``draft`` parameter (its :attr:`~SpecChoice.label`:
``none``, ``ngram``, ``suffix``, ``mtp``, a draft model's id, ``eagle3:HEAD``); once Optuna has
chosen it (define-by-run), the choice asks for its own parameters: K (``num_speculative_tokens``,
in the choice's own range) and the method's settings (``prompt_lookup_min``/``_max``, the
``suffix_decoding_*`` keys). A setting given as one value is fixed and never asked for.

:func:`choices_from_search` turns the ``search`` section into choices, the earlier form
(``draft: [none, ngram, suffix, mtp, MODEL...]`` with one K range, ngram's window fixed at 1-4,
suffix at vLLM's defaults) included, and
:func:`check_choices` keeps only what the target supports: a head of this target, MTP layers in
its checkpoint, a draft that passes the vocabulary rules, a method the vLLM release knows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import optuna

from tuner.catalog.heads import check_head, check_mtp
from tuner.catalog.models import ModelSpec, Release, check_draft, load_model
from tuner.config.methods import (
    DraftMethod,
    HeadMethod,
    MtpMethod,
    NgramMethod,
    NoMethod,
    SearchModel,
    SuffixMethod,
)
from tuner.config.sections import RangeSection
from tuner.config.trial import HEAD_METHODS, SpecMethod, SpeculativeConfig, choice_label
from tuner.config.vllm_methods import check_method
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError

__all__ = ["Range", "SpecChoice", "check_choices", "choices_from_search"]

K_PARAM = "num_speculative_tokens"
# Settings that are integers (the rest are floats); the order is the order they are asked for.
_INTEGER_SETTINGS = frozenset(
    {
        "prompt_lookup_min",
        "prompt_lookup_max",
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
    }
)
# The earlier form fixed prompt lookup at 1-4; stored studies keep meaning what they meant.
_EARLIER_NGRAM = (("prompt_lookup_min", 1.0), ("prompt_lookup_max", 4.0))


@dataclass(frozen=True)
class Range:
    """A numeric interval; ``step`` discretises it (ints always step by 1)."""

    low: float
    high: float
    step: float | None = None


@dataclass(frozen=True)
class SpecChoice:
    """One speculation choice: a method, its model (draft or head), K's range, its settings.

    Attributes:
        method: the vLLM method.
        model: the draft or head id; None for none, ngram, suffix and mtp.
        k: the range of ``num_speculative_tokens`` (unused for ``none``).
        settings: the method's own settings, name and range (low == high: fixed).
    """

    method: SpecMethod
    model: str | None = None
    k: Range = Range(1, 8)
    settings: tuple[tuple[str, Range], ...] = ()

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
        return (*names, *(name for name, r in self.settings if r.low < r.high))

    def defaults(self) -> dict[str, float]:
        """Each setting's value when not tuned: the middle of its range (rounded for ints)."""
        values: dict[str, float] = {}
        for name, value in self.settings:
            middle = (value.low + value.high) / 2
            values[name] = float(round(middle)) if name in _INTEGER_SETTINGS else middle
        if "prompt_lookup_max" in values:  # vLLM refuses min > max
            values["prompt_lookup_min"] = min(
                values["prompt_lookup_min"], values["prompt_lookup_max"]
            )
        return values

    def params(self, k: int) -> dict[str, int | float]:
        """This choice's Optuna parameters at K = ``k`` and default settings (for enqueueing)."""
        if self.method == SpecMethod.NONE:
            return {}
        tuned = set(self.tuned)
        own = {
            name: int(value) if name in _INTEGER_SETTINGS else value
            for name, value in self.defaults().items()
            if name in tuned
        }
        return {K_PARAM: k, **own}

    def speculative(
        self, k: int, values: Mapping[str, float] | None = None
    ) -> SpeculativeConfig | None:
        """The vLLM settings at K = ``k``; unnamed settings take :meth:`defaults`."""
        if self.method == SpecMethod.NONE:
            return None
        chosen = {**self.defaults(), **(values or {})}
        typed = {n: int(v) if n in _INTEGER_SETTINGS else float(v) for n, v in chosen.items()}
        return SpeculativeConfig(self.method, k, model=self.model, **typed)  # type: ignore[arg-type]

    def suggest(self, trial: optuna.Trial) -> SpeculativeConfig | None:
        """Asks ``trial`` for K and the tuned settings of this choice (after the choice)."""
        if self.method == SpecMethod.NONE:
            return None
        k = trial.suggest_int(K_PARAM, int(self.k.low), int(self.k.high))
        values: dict[str, float] = {}
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
        return self.speculative(k, values)


def _range(value: float | RangeSection) -> Range:
    if isinstance(value, RangeSection):
        step = getattr(value, "step", None)
        return Range(float(value.low), float(value.high), None if step is None else float(step))
    return Range(float(value), float(value))


def _settings(model: NgramMethod | SuffixMethod) -> tuple[tuple[str, Range], ...]:
    names = [n for n in type(model).model_fields if n not in ("method", K_PARAM)]
    return tuple((name, _range(getattr(model, name))) for name in names)


def _from_methods(search: SearchModel) -> Iterator[SpecChoice]:
    for entry in search.methods or ():
        if isinstance(entry, NoMethod):
            yield SpecChoice(SpecMethod.NONE)
        elif isinstance(entry, NgramMethod | SuffixMethod):
            method = SpecMethod(entry.method)
            yield SpecChoice(method, None, _range(entry.num_speculative_tokens), _settings(entry))
        elif isinstance(entry, MtpMethod):
            yield SpecChoice(SpecMethod.MTP, None, _range(entry.num_speculative_tokens))
        elif isinstance(entry, DraftMethod | HeadMethod):
            for model in entry.model:
                method = SpecMethod(entry.method)
                yield SpecChoice(method, model, _range(entry.num_speculative_tokens))


def _from_drafts(search: SearchModel) -> Iterator[SpecChoice]:
    k = _range(search.num_speculative_tokens)
    for draft in search.draft:
        if draft == SpecMethod.NONE:
            yield SpecChoice(SpecMethod.NONE)
        elif draft == SpecMethod.NGRAM:
            fixed = tuple((name, Range(v, v)) for name, v in _EARLIER_NGRAM)
            yield SpecChoice(SpecMethod.NGRAM, None, k, fixed)
        elif draft == SpecMethod.SUFFIX:  # vLLM's own suffix settings
            yield SpecChoice(SpecMethod.SUFFIX, None, k, _settings(SuffixMethod(method="suffix")))
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


def check_choices(
    choices: tuple[SpecChoice, ...], target: ModelSpec, version: VllmVersion | None
) -> None:
    """Refuses a choice the target (or the vLLM release) cannot run, in one line.

    Raises:
        ConfigError: the first choice at fault (an :class:`IncompatibleDraftError` for pairs).
    """
    release: Release | None = version
    for choice in choices:
        if choice.method == SpecMethod.NONE:
            continue
        if version is not None:
            check_method(choice.method, version)
        if choice.method == SpecMethod.DRAFT_MODEL:
            check_draft(target, load_model(str(choice.model)), release)
        elif choice.method in HEAD_METHODS:
            head = load_model(str(choice.model))
            check_head(target.hf_id, target.config, head.hf_id, head.config, choice.method)
        elif choice.method == SpecMethod.MTP:
            check_mtp(target.hf_id, target.config)
