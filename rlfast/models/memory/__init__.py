"""Memory cores for recurrent models, behind one interface (``rlfast.models.memory.base``).

``make_core(kind, input_size, hidden_size, memory_len)`` builds one by name: ``lstm``,
``gru``, ``ln_lstm`` (layer-normalised LSTM) or ``attention`` (causal self-attention over the
last ``memory_len`` steps).  The recurrent models take ``core=`` and ``memory_len=``, and
``--set agent.core=...`` picks it from the command line.
"""
from __future__ import annotations

from rlfast.models.memory.attention import AttentionCore, AttentionState
from rlfast.models.memory.base import MemoryCore
from rlfast.models.memory.recurrent import GruCore, GruState, LnLstmCore, LstmCore, RnnState

__all__ = ["MemoryCore", "LstmCore", "GruCore", "LnLstmCore", "AttentionCore", "RnnState",
           "GruState", "AttentionState", "CORES", "STATE_TYPES", "make_core", "check_core"]

CORES = {"lstm": LstmCore, "gru": GruCore, "ln_lstm": LnLstmCore, "attention": AttentionCore}
# The cores' state types by name: a snapshot records the name and rebuilds the state from it.
STATE_TYPES = {cls.__name__: cls for cls in (RnnState, GruState, AttentionState)}


def check_core(kind: object, owner: str = "model") -> str:
    """``kind`` if it names a memory core, else a ``ValueError`` listing the choices."""
    if not isinstance(kind, str) or kind not in CORES:
        raise ValueError(f"{owner}: core must be one of {', '.join(CORES)}; got {kind!r}")
    return kind


def make_core(kind: str, input_size: int, hidden_size: int, memory_len: int = 32) -> MemoryCore:
    """The memory core ``kind`` reading ``input_size`` features per step, ``hidden_size`` wide;
    ``memory_len`` is the attention window (the other cores remember without a window)."""
    cls = CORES[check_core(kind)]
    if cls is AttentionCore:
        return AttentionCore(input_size, hidden_size, memory_len=memory_len)
    return cls(input_size, hidden_size)
