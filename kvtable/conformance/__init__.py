"""The conformance tester: properties (``properties/``) run against a backend, judged against the reference.

A run flows one way: ``conform``/``fuzz`` (the commands) -> ``runner`` (the run) -> ``isolation`` (worker
processes, when asked) -> ``execute`` (one property) -> ``search`` (one Hypothesis search) and ``result`` (its
failures and verdict) -> ``counterexample`` (the snippet, re-judged by ``reproduce``); ``report`` renders the
results. ``core`` (``Property``, ``Context``), ``context``, ``checks``, ``calls`` and the watchers below them.
"""
