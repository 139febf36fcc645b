"""Record what an engine really did, step by step, and judge the run against the contract.

``Recorder`` (the calls an engine makes), ``wrap`` (any backend, recorded transparently), ``check_trace``
(every step judged, and the rules across steps), and the serving-loop simulator in ``kvtable.trace.simulate``.
"""

from kvtable.trace.check import Report, check_trace
from kvtable.trace.recorder import Recorder
from kvtable.trace.store import TraceReader
from kvtable.trace.wrap import wrap

__all__ = ["Recorder", "Report", "TraceReader", "check_trace", "wrap"]
