"""Parse and format hardware-affinity codes: ``_``-joined ``<integer><abbreviation>`` tokens.

An affinity code is the compact, command-line-friendly form of a machine's hardware
description plus how it is shared among concurrent runs, e.g. ``0slt_8cpu_2gpu_0hto_1alt``
(run slot 0 of an 8-core, 2-GPU machine, no hyperthreads, alternating sampler). This module
only turns codes into a validated :class:`HardwareSpec` and back; how a spec lays cores and
GPUs out over runs lives in :mod:`rlfast.utils.affinity`. Tokens may appear in any
order; each at most once; booleans are ``0``/``1``. A token that is absent takes its default
(see ``DEFAULTS``), which keeps legacy rlpyt codes such as ``0slt_8cpu_2gpu_1alt`` valid; a
missing ``hto`` means no hyperthreads (``0hto``), so decoding never probes the machine.
"""
from __future__ import annotations

import dataclasses
import operator
import re
from typing import Any

# Abbreviation -> field of HardwareSpec (and keyword of encode_affinity), in writing order.
ABBREVIATIONS: dict[str, str] = {
    "slt": "run_slot",
    "cpu": "n_cpu_core",
    "gpu": "n_gpu",
    "cxg": "contexts_per_gpu",
    "gpr": "gpu_per_run",
    "cpr": "cpu_per_run",
    "cpw": "cpu_per_worker",
    "hto": "hyperthread_offset",
    "skt": "n_socket",
    "res": "cpu_reserved",
    "ass": "async_sample",
    "sgr": "sample_gpu_per_run",
    "oss": "optim_sample_share_gpu",
    "alt": "alternating",
    "saf": "set_affinity",
}
BOOLEAN_TOKENS = frozenset({"ass", "oss", "alt", "saf"})
# Smallest allowed value of each integer token.
MINIMUM: dict[str, int] = {"slt": 0, "cpu": 1, "gpu": 0, "cxg": 1, "gpr": 1, "cpr": 1,
                           "cpw": 1, "hto": 0, "skt": 1, "res": 0, "sgr": 0}
# Tokens always written by format_code (the rest only when they differ from DEFAULTS).
ALWAYS_WRITTEN = ("cpu", "gpu", "hto")
_TOKEN = re.compile(r"(\d+)([a-z]{3})")


@dataclasses.dataclass(frozen=True)
class HardwareSpec:
    """The decoded content of an affinity code (field meanings as in ``encode_affinity``)."""

    n_cpu_core: int
    n_gpu: int = 0
    contexts_per_gpu: int = 1
    gpu_per_run: int = 1
    cpu_per_run: int = 1
    cpu_per_worker: int = 1
    hyperthread_offset: int = 0
    n_socket: int = 1
    cpu_reserved: int = 0
    async_sample: bool = False
    sample_gpu_per_run: int = 0
    optim_sample_share_gpu: bool = False
    alternating: bool = False
    set_affinity: bool = True
    run_slot: int | None = None


DEFAULTS: dict[str, Any] = {abbr: f.default for f in dataclasses.fields(HardwareSpec)
                            for abbr, name in ABBREVIATIONS.items() if name == f.name
                            and f.default is not dataclasses.MISSING}


def _valid_list() -> str:
    return ", ".join(f"{abbr} ({name})" for abbr, name in ABBREVIATIONS.items())


def check_value(abbr: str, value: Any) -> int | bool:
    """Return ``value`` as the token's type (int, or bool for 0/1 tokens), or raise ValueError
    naming the token and the allowed range."""
    name = ABBREVIATIONS[abbr]
    if abbr in BOOLEAN_TOKENS:
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        raise ValueError(f"{name} ({abbr!r}) must be a boolean (0 or 1); got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} ({abbr!r}) must be an integer; got {value!r}") from None
    if isinstance(value, bool) or number < MINIMUM[abbr]:
        raise ValueError(f"{name} ({abbr!r}) must be an integer >= {MINIMUM[abbr]}; "
                         f"got {value!r}")
    return number


def parse_code(code: str) -> HardwareSpec:
    """Decode ``code`` into a HardwareSpec; ValueError on malformed, unknown, repeated or
    out-of-range tokens and on a code without the ``cpu`` token. Layout is not checked here."""
    if not isinstance(code, str) or not code.strip():
        raise ValueError(f"an affinity code must be a non-empty string like "
                         f"'0slt_8cpu_2gpu_0hto'; got {code!r}")
    values: dict[str, Any] = {}
    for token in code.strip().split("_"):
        match = _TOKEN.fullmatch(token)
        if match is None:
            raise ValueError(f"malformed token {token!r} in affinity code {code!r}: each token "
                             f"must be an integer followed by a 3-letter abbreviation, "
                             f"e.g. '8cpu'")
        number, abbr = int(match.group(1)), match.group(2)
        if abbr not in ABBREVIATIONS:
            raise ValueError(f"unknown abbreviation {abbr!r} (token {token!r}) in affinity code "
                             f"{code!r}; valid abbreviations: {_valid_list()}")
        if abbr in values:
            raise ValueError(f"token {abbr!r} appears more than once in affinity code {code!r}")
        values[abbr] = check_value(abbr, number)
    if "cpu" not in values:
        raise ValueError(f"affinity code {code!r} lacks the 'cpu' token (n_cpu_core), "
                         f"e.g. '8cpu'")
    return HardwareSpec(**{ABBREVIATIONS[abbr]: value for abbr, value in values.items()})


def format_code(spec: HardwareSpec) -> str:
    """Encode ``spec`` as a code: ``slt`` first when set, then ``cpu``, ``gpu``, ``hto`` always
    and every other token only where it differs from its default."""
    tokens = []
    for abbr, name in ABBREVIATIONS.items():
        value = getattr(spec, name)
        if abbr == "slt":
            if value is not None:
                tokens.append(f"{int(value)}slt")
        elif abbr in ALWAYS_WRITTEN or value != DEFAULTS[abbr]:
            tokens.append(f"{int(value)}{abbr}")
    return "_".join(tokens)
