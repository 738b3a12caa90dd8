"""SIGTERM as an exception, for the runners: the names live in ``rlfast.utils.interrupts``
(below every layer that trains, so the ES loop beside the runners uses the same guard) and
are importable from here as before."""
from rlfast.utils.interrupts import SigtermGuard, TrainingInterrupted, signal_name

__all__ = ["SigtermGuard", "TrainingInterrupted", "signal_name"]
