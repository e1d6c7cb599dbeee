"""What one trial runs: the server side (restart on change) and the request side (no restart)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.catalog.models import ModelSpec, load_model
from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods import MethodFamily, method_of
from tuner.config.verification import DraftHead, DraftSampling, Verification
from tuner.config.workload import WorkloadSpec

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = [
    "ClientConfig",
    "FlagValue",
    "LaunchContext",
    "ServerConfig",
    "SpecMethod",
    "SpeculativeConfig",
    "TrialConfig",
    "choice_label",
    "is_secret_flag",
    "load_draft",
    "server_from_dict",
    "server_to_dict",
]

FlagValue = str | int | float | bool

# A flag is secret when one of its dash-separated words names a credential: --api-key,
# --hf-token, --ssl-password; not --tokenizer or --max-num-batched-tokens.
_SECRET_FLAG = re.compile(
    r"(^|-)(key|token|secret|password|passwd|credentials?)($|-)", re.IGNORECASE
)
# vLLM's own credential flags. Its parser accepts any unambiguous prefix (argparse's
# allow_abbrev), so `--api SECRET` can reach --api-key: a prefix of one of these is secret too.
_CREDENTIAL_FLAGS = ("api-key", "hf-token", "s3-access-key-id", "s3-secret-access-key")


def is_secret_flag(name: str) -> bool:
    """Whether a vLLM flag carries a credential (which must never be stored or exported).

    ``name`` is a flag as a search space spells it: with or without dashes, with underscores,
    or with its value glued on (``api-key=SECRET``).
    """
    flag = name.partition("=")[0].strip().lstrip("-").replace("_", "-").lower()
    return _SECRET_FLAG.search(flag) is not None or (
        len(flag) >= 2 and any(known.startswith(flag) for known in _CREDENTIAL_FLAGS)
    )


@dataclass(frozen=True)
class SpeculativeConfig:
    """vLLM's speculative decoding settings, independent of the flag dialect that spells them."""

    # Parsed where the config is made (a name is converted; an unknown one is refused there),
    # so that everything downstream compares members.
    method: SpecMethod
    num_speculative_tokens: int
    # The draft, the EAGLE head or the block drafter; None for ngram, suffix, mtp, and for
    # dspark drafting with stages inside the target's own checkpoint (DeepSeek-V4).
    model: str | None = None
    prompt_lookup_max: int | None = None
    prompt_lookup_min: int | None = None
    # Suffix decoding's own settings, named as vLLM 0.32's SpeculativeConfig names them
    # (None: vLLM's default).
    suffix_decoding_max_tree_depth: int | None = None
    suffix_decoding_max_spec_factor: float | None = None
    suffix_decoding_min_token_prob: float | None = None
    suffix_decoding_max_cached_requests: int | None = None
    # vLLM 0.24+'s num_speculative_tokens_per_batch_size: (first, last batch size, K) ranges
    # from 1, K = 0 for none; past the last range its K holds. Empty: one K at every batch size.
    k_by_batch_size: tuple[tuple[int, int, int], ...] = ()
    # P-EAGLE: an EAGLE/EAGLE-3 head trained to draft all K tokens in one pass. Block drafters
    # (dflash, dspark) always draft that way; vLLM sets the flag for them itself.
    parallel_drafting: bool = False
    rejection_sample_method: Verification = Verification.STANDARD
    draft_sample_method: DraftSampling = DraftSampling.GREEDY
    # Each request's draft budget sized from its confidence, step by step (V2 runner only).
    enable_adaptive_verification: bool = False
    # DSpark (Qwen3 drafters): the Markov projection evaluated on the top-k base logits only.
    dspark_draft_topk: int | None = None
    # EAGLE heads and MTP (0.33+, V2 only): the drafter's LM head quantized.
    draft_lm_head_quantization: DraftHead = DraftHead.NONE
    # XPress DFlash drafters (0.33+): the candidates its head projects onto (None: 512, or the
    # checkpoint's).
    xpress_topc: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", SpecMethod.parse(self.method))
        # Stored as JSON strings.
        object.__setattr__(
            self, "rejection_sample_method", Verification(self.rejection_sample_method)
        )
        object.__setattr__(self, "draft_sample_method", DraftSampling(self.draft_sample_method))
        object.__setattr__(
            self, "draft_lm_head_quantization", DraftHead(self.draft_lm_head_quantization)
        )
        # Stored as JSON lists; a tuple keeps the config hashable (equal servers are shared).
        table = tuple((int(a), int(b), int(k)) for a, b, k in self.k_by_batch_size)
        object.__setattr__(self, "k_by_batch_size", table)

    def k_at(self, batch_size: int) -> int:
        """The K a step of ``batch_size`` requests drafts (capped at num_speculative_tokens)."""
        for first, last, k in self.k_by_batch_size:
            if first <= batch_size <= last:
                return min(k, self.num_speculative_tokens)
        if self.k_by_batch_size and batch_size > self.k_by_batch_size[-1][1]:
            return min(self.k_by_batch_size[-1][2], self.num_speculative_tokens)
        return self.num_speculative_tokens


def choice_label(spec: SpeculativeConfig | None) -> str:
    """The name a search space gives this speculation: ``none``, ``ngram``, ``suffix``, ``mtp``,
    the draft model's id, or ``METHOD:MODEL`` for a head or a block drafter (``eagle3:HEAD``,
    ``dflash:DRAFTER``)."""
    if spec is None:
        return str(SpecMethod.NONE)
    method = method_of(spec.method)
    if method.family is MethodFamily.DRAFT:
        return str(spec.model)
    if method.takes_model and spec.model:
        return f"{spec.method}:{spec.model}"
    return str(spec.method)


@dataclass(frozen=True)
class ServerConfig:
    """Everything fixed when vLLM starts; two trials with equal ServerConfigs share a server."""

    model: str
    tensor_parallel_size: int
    max_model_len: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    speculative: SpeculativeConfig | None = None
    quantization: str | None = None
    enable_chunked_prefill: bool = True
    served_model_name: str | None = None
    # Flags spectune does not model but passes through, e.g. enforce-eager on the CPU test bed.
    extra_flags: tuple[tuple[str, FlagValue], ...] = field(default=())

    @property
    def method(self) -> SpecMethod:
        """How the server speculates; :attr:`SpecMethod.NONE` without speculation."""
        return SpecMethod.NONE if self.speculative is None else self.speculative.method

    @property
    def memory_label(self) -> str:
        """``--gpu-memory-utilization`` as a table prints it: ``unset`` for 1.0, which spectune
        proposes only where vLLM sizes the KV cache from measured memory (0.34+) and then leaves
        the flag out (:func:`tuner.config.vllm_args.writes_memory_share`)."""
        share = self.gpu_memory_utilization
        return "unset" if share >= 1.0 else f"{share:.2f}"

    @property
    def family(self) -> MethodFamily:
        """How the server speculates, by cost structure (a draft model, a head, ...)."""
        return method_of(self.method).family

    @property
    def draft(self) -> str | None:
        """How the server speculates, as a search space's choice names it: the draft model id,
        ``eagle3:HEAD`` for a head (``dflash:DRAFTER`` for a block drafter), the method's name
        (``"ngram"``), or None without speculation.
        """
        return None if self.speculative is None else choice_label(self.speculative)

    @property
    def draft_model(self) -> str | None:
        """The draft model's, head's or block drafter's id or path; None for ngram, suffix,
        mtp or none."""
        spec = self.speculative
        return spec.model if spec is not None and method_of(spec.method).takes_model else None

    @property
    def k(self) -> int:
        return self.speculative.num_speculative_tokens if self.speculative else 0


@dataclass(frozen=True)
class ClientConfig:
    """Request-side settings: changing them never restarts the server."""

    # What the requests sample at: the trial's temperature where the space tunes it; with a
    # workload mix, each condition's own (tuner.trial.traffic sets it per condition), the
    # mix's weighted mean on the trial's config before it is split.
    sampling_temperature: float
    workload: WorkloadSpec


@dataclass(frozen=True)
class LaunchContext:
    """Who a server is started for: names containers, labels them, places logs."""

    study: str
    trial: int
    log_dir: Path


@dataclass(frozen=True)
class TrialConfig:
    server: ServerConfig
    client: ClientConfig
    # The GPUs' power limit per GPU while the trial runs (``search.power_limit_w``): neither a
    # server flag nor a request setting, so changing it never restarts the server. None: the
    # limit is left as it is.
    power_limit_w: int | None = None

    def with_temperature(self, temperature: float) -> TrialConfig:
        return replace(self, client=replace(self.client, sampling_temperature=temperature))


def server_to_dict(server: ServerConfig) -> dict[str, Any]:
    """Plain JSON data for the study database; :func:`server_from_dict` reverses it."""
    data: dict[str, Any] = _server_adapter().dump_python(server, mode="json")
    return data


def server_from_dict(data: dict[str, Any]) -> ServerConfig:
    spec = data.get("speculative")
    if spec:  # a method this version lacks is refused by name, as everywhere else
        data = {**data, "speculative": {**spec, "method": SpecMethod.parse(spec["method"])}}
    return _server_adapter().validate_python(data)


@functools.cache  # built on first use: commands that store nothing never import pydantic here
def _server_adapter() -> TypeAdapter[ServerConfig]:
    from pydantic import TypeAdapter

    return TypeAdapter(ServerConfig)


def load_draft(server: ServerConfig) -> ModelSpec | None:
    """The draft model (or EAGLE head) of a server config; None for ngram, suffix, mtp, none."""
    return load_model(server.draft_model) if server.draft_model else None
