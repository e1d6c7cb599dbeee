"""The method registry: every method has one module and one record, and nothing outside the
registry (and the catalog, which says which method a checkpoint is for) names a method to
decide a rule."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import tuner
from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods import METHODS, Method, MethodFamily, method_of, speculating
from tuner.config.vllm_version import parse_version

ROOT = Path(tuner.__file__).parent
_MEMBER = re.compile(r"SpecMethod\.(?!NONE\b|parse\b)([A-Z_0-9]+)")
# Where a name stands for a method as text, not as a rule: each line and why.
_NAMING = {
    # The earlier `draft: [none, ngram, suffix, mtp, MODEL]` form spells methods as strings.
    "config/choices.py": "draft == SpecMethod.",
    # ... and a stored ngram choice is labelled by its name.
    "config/space.py": "NGRAM = str(SpecMethod.NGRAM)",
    # Advice: which catalog heads and drafters to offer instead of a V1 config.
    "config/runner_report.py": "if h.method is SpecMethod.EAGLE3",
    # The fake server's parser infers the method from --speculative-model, as vLLM does.
    "sim/server/args.py": "method = SpecMethod.",
    # The reference pair (the field notes' 0.5B draft) is a draft model.
    "sim/reference.py": "method: SpecMethod = SpecMethod.DRAFT_MODEL",
    # `spectune estimate --draft MODEL`: a model that is neither head nor block drafter.
    "sim/estimate.py": "or SpecMethod.DRAFT_MODEL",
    # Colours: no speculation first, then prompt lookup, then the rest by name.
    "report/figure.py": "d != SpecMethod.NGRAM",
}
_ALSO_ALLOWED = {
    "config/choices.py": ("SpecChoice(SpecMethod.", "SpecMethod.SUFFIX, None, k"),
    "config/runner_report.py": ("if d.method is SpecMethod.DFLASH",),
}


def test_every_method_has_a_record_named_as_it() -> None:
    assert set(METHODS) == set(SpecMethod)
    assert all(method_of(m).name is m for m in SpecMethod)
    assert [m.name for m in speculating()] == [m for m in SpecMethod if m is not SpecMethod.NONE]


def test_every_method_lives_in_a_module_of_its_own() -> None:
    homes: dict[SpecMethod, list[str]] = {}
    for path in sorted((ROOT / "config" / "methods").glob("*.py")):
        module = importlib.import_module(f"tuner.config.methods.{path.stem}")
        if path.stem == "__init__":
            continue
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, Method):
                homes.setdefault(value.name, []).append(path.stem)
    assert {m: len(h) for m, h in homes.items()} == {m: 1 for m in SpecMethod}


def test_no_module_outside_the_registry_names_a_method_to_decide_a_rule() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where.startswith(("config/methods/", "catalog/")):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not _MEMBER.search(line):
                continue
            allowed = (_NAMING.get(where, "\0"), *_ALSO_ALLOWED.get(where, ()))
            if not any(text in line for text in allowed):
                found.append(f"{where}:{number}: {line.strip()}")
    assert found == [], "ask tuner.config.methods.method_of(...) instead:\n" + "\n".join(found)


def test_the_v2_runner_dates_per_method_are_vllms() -> None:
    # _get_v2_model_runner_unsupported_features (vllm/config/vllm.py) per release.
    def on_v1(version: str) -> set[str]:
        release = parse_version(version)
        return {str(m.name) for m in speculating() if m.v1_reason(release) is not None}

    assert on_v1("0.28.0") == {"ngram", "ngram_gpu", "suffix", "draft_model"}
    assert on_v1("0.31.0") == {"ngram", "ngram_gpu", "suffix"}
    assert on_v1("0.32.0") == on_v1("0.33.0") == {"suffix"}
    assert on_v1("0.34.0") == set()


def test_families_group_the_methods_the_simulator_prices_alike() -> None:
    families = {str(m.name): m.family for m in METHODS.values()}
    assert families["ngram_gpu"] is families["suffix"] is MethodFamily.LOOKUP
    assert families["dflash"] is families["dspark"] is MethodFamily.BLOCK
    assert method_of(SpecMethod.DSPARK).takes_model and not method_of(SpecMethod.DSPARK).needs_model
