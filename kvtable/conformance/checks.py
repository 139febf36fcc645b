"""What a property needs to judge a backend: recorded calls (the replayable counterexample) and verdicts.

Every backend (and graph-runner) call a property makes goes through a ``Recorded`` proxy, which
writes it into the ``Transcript`` as a Python statement; when an example fails, the transcript of the
shrunk example is the counterexample. Verdict helpers raise ``Mismatch`` naming the clause broken.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kvtable.conformance.levels import LATENT, SAFETY
from kvtable.conformance.watch import watched
from kvtable.errors import ContractViolation, Unsupported

Where = tuple[str | None, int | None, int | None]
"""An offending entry (group, row, col) a refusal should name; None where any value will do."""

BACKEND_CALLS = frozenset({"decode_locs", "verify_locs", "reanchor_locs", "extend_locs", "group_locs",
                           "expand_table", "check_write_locs", "graph", "alloc_decode", "alloc_verify",
                           "alloc_extend", "ring_locs"})
RUNNER_CALLS = frozenset({"capture", "replay"})
KERNEL_CALLS = frozenset({"stacked_locs", "stacked_extend_locs", "replay_fill", "grouped_locs",
                          "grouped_extend_locs"})
"""The fused operations of ``backend.kernels``: they write their outputs in place and return None."""
RECORDED_CALLS = BACKEND_CALLS | RUNNER_CALLS | KERNEL_CALLS
"""Every call a ``Recorded`` proxy records (the others pass through)."""


class Mismatch(AssertionError):
    """A backend broke ``clause``: wrong value, wrong error, a crash, or a touched buffer region.

    ``tier`` is the promise broken (``core.TIERS``): ``safety`` (a write outside the allowed slots),
    ``correctness`` (a wrong value, a crash or a refusal on valid input), ``strictness`` (broken input
    refused without naming the clause and the offending entry), or ``""``: the property's own tier
    (broken input accepted: what that costs is what the property guards). ``kind`` says what went
    wrong in a few words, so distinct failures of one property can be told apart.
    """

    def __init__(self, clause: str, message: str, *, tier: str = "correctness", kind: str = "") -> None:
        self.clause = clause.split()[0]
        self.tier = tier
        self.kind = kind or tier
        super().__init__(f"[{self.clause}] {message}")


def latent(check: Callable[[Any, Any], None], needs: str) -> Callable[[Any, Any], None]:
    """``check`` whose safety failures are latent: reachable only past the size ``needs`` states (reported at the
    ``latent`` tier, failing a run only with ``--latent``)."""
    def run(ctx: Any, case: Any) -> None:
        try:
            check(ctx, case)
        except Mismatch as err:
            if err.tier not in (SAFETY, ""):
                raise
            message = str(err).split("] ", 1)[-1]
            raise Mismatch(err.clause, f"{needs}: {message}", tier=LATENT, kind=err.kind) from err

    return run


INT32_POOL = "latent: needs >= 2^31 slots in one pool (256 GiB at 128 B/token)"
"""The size an int32 wrap of a slot needs before any real run reaches it."""


def render(value: Any) -> str:
    """Python source that rebuilds ``value`` (tensors as ``torch.tensor(...)``)."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype)
        device = "" if value.device.type == "cpu" else f", device={str(value.device)!r}"
        if value.numel() == 0 or value.is_meta:  # a meta tensor has a shape and no values
            return f"torch.zeros({tuple(value.shape)}, dtype={dtype}{device})"
        return f"torch.tensor({value.tolist()}, dtype={dtype}{device})"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(render(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(render(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def summarize(value: Any) -> str:
    """A short rendering of a call's result for the transcript's comments."""
    if isinstance(value, torch.Tensor):
        return f"{value.tolist()} ({str(value.dtype).removeprefix('torch.')}, shape {tuple(value.shape)})"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {summarize(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(summarize(v) for v in value) + ")"
    return repr(value)


@dataclass
class Transcript:
    """The calls of the current example, as Python statements with their outcomes as comments."""

    lines: list[str] = field(default_factory=list)
    runners: int = 0
    aliases: dict[tuple[Any, ...], str] = field(default_factory=dict)
    """Tensors the transcript names (a captured buffer view), by where their data lives."""
    on_call: Callable[[str], object] | None = None
    """Told of each call before it runs (in this process: the memory watch of ``kvtable.conformance.memory``)."""

    def reset(self) -> None:
        self.lines.clear()
        self.runners = 0
        self.aliases.clear()

    def alias(self, tensor: torch.Tensor, name: str) -> None:
        """Render ``tensor`` as ``name`` from now on: a view of a runner's buffer replays as that view, not a copy."""
        self.aliases[_where(tensor)] = name

    def render(self, value: Any) -> str:
        """``render(value)``, or the name of an aliased tensor."""
        if isinstance(value, torch.Tensor) and (name := self.aliases.get(_where(value))):
            return name
        return render(value)

    def note(self, line: str) -> None:
        self.lines.append(line)

    def calling(self, statement: str) -> None:
        """A call is about to run; a worker's streaming transcript sends it ahead, so it survives a crash."""
        if self.on_call is not None:
            self.on_call(statement)

    def text(self) -> str:
        return "\n".join(self.lines)


def _where(tensor: torch.Tensor) -> tuple[Any, ...]:
    """What makes two tensors the same view: storage, offset, shape, strides, dtype, device."""
    return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(),
            tensor.dtype, str(tensor.device))


def to_device(value: Any, device: str | None) -> Any:
    """Tensors (also inside dicts, lists and tuples) moved to ``device``; views already there stay views."""
    if device is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, Mapping):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_device(v, device) for v in value)
    return value


class Recorded:
    """A proxy that records the protocol calls made on ``target`` (a backend, its kernels or a graph runner).

    Tensor arguments are moved to the backend's device first (the protocol's tensors live there), so
    on CUDA every length the backend gets is a device tensor it cannot read without a sync.
    """

    def __init__(self, target: Any, name: str, transcript: Transcript, device: str | None = None) -> None:
        self._target = target
        self._name = name
        self._transcript = transcript
        device = device if device is not None else getattr(target, "device", None)
        # the strategies build CPU tensors: on a CPU backend there is nothing to move (and no call to pay for it)
        self._device = None if device is None or str(device) == "cpu" else device

    @property
    def target(self) -> Any:
        return self._target

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if attr == "kernels" and value is not None:
            self._transcript.note(f"kernels = {self._name}.kernels")
            return Recorded(value, "kernels", self._transcript, self._device)
        if attr not in RECORDED_CALLS or not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = to_device(args, self._device), to_device(kwargs, self._device)
            render_arg = self._transcript.render
            parts = [render_arg(a) for a in args] + [f"{k}={render_arg(v)}" for k, v in kwargs.items()]
            statement = f"{self._name}.{attr}({', '.join(parts)})"
            if attr == "graph":
                self._transcript.runners += 1
                runner_name = "runner" if self._transcript.runners == 1 else f"runner{self._transcript.runners}"
                statement = f"{runner_name} = {statement}"
            elif attr not in {"replay", "check_write_locs"} | KERNEL_CALLS:
                statement = f"{'views' if attr == 'capture' else 'out'} = {statement}"
            self._transcript.calling(statement)
            try:
                with watched(f"{self._name}.{attr}", value, args, kwargs, self._own_buffers()):
                    result = value(*args, **kwargs)
            except Exception as err:
                self._transcript.note(f"{statement}\n#   raised {type(err).__name__}: {err}")
                raise
            if attr == "graph":
                self._transcript.note(statement)
                return Recorded(result, runner_name, self._transcript, self._device)
            comment = "" if result is None else f"\n#   -> {summarize(result)}"
            self._transcript.note(statement + comment)
            return result

        return call

    def _own_buffers(self) -> list[torch.Tensor]:
        """A graph runner's persistent buffers: its replay refills them by design, even through a caller's view."""
        buffers = [getattr(self._target, name, None) for name in ("table_buffers", "loc_buffers")]
        return [t for b in buffers if isinstance(b, dict) for t in b.values() if isinstance(t, torch.Tensor)]


# ------------------------------------------------------------------------------------------------
# Verdicts
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What a call did: returned ``value`` or raised a ContractViolation naming ``clause`` (``error``)."""

    value: Any = None
    clause: str | None = None
    error: ContractViolation | None = None

    @property
    def raised(self) -> bool:
        return self.clause is not None


def as_plain(value: Any) -> Any:
    """Tensors to lists, mappings to dicts of lists, for comparison with the reference."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, Mapping):
        return {k: as_plain(v) for k, v in value.items()}
    return value


def first_difference(got: Sequence[Any], expected: Sequence[Any]) -> str:
    """Where two flat or 2-D lists first differ, in words."""
    if len(got) != len(expected):
        return f"length {len(got)}, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if g != e:
            if isinstance(g, list) and isinstance(e, list):
                return f"row {i}: {first_difference(g, e)}"
            return f"index {i}: got {g}, expected {e}"
    return "equal"


def check_tensor(clause: str, what: str, got: Any, expected: list[Any], *, device: str | None = None,
                 dtypes: tuple[torch.dtype, ...] = (torch.int32,)) -> None:
    """``got`` is a tensor of one of ``dtypes`` (on ``device``) holding exactly ``expected`` (compared by value)."""
    names = " or ".join(str(d) for d in dtypes)
    if not isinstance(got, torch.Tensor):
        raise Mismatch(clause, f"{what}: returned {type(got).__name__}, expected a {names} tensor")
    if got.dtype not in dtypes:
        raise Mismatch(clause, f"{what}: dtype {got.dtype}, expected {names}")
    if device is not None and got.device.type != torch.device(device).type:
        raise Mismatch(clause, f"{what}: on device {got.device}, expected {device}")
    values = got.tolist()
    if values != expected:
        raise Mismatch(clause, f"{what}: {first_difference(values, expected)}\n  got      {values}\n"
                       f"  expected {expected}")


def call_backend(fn: Callable[[], Any]) -> Outcome:
    """Run a call, the backend's or the reference's: a ContractViolation becomes its clause (kept as ``error``),
    any other exception propagates."""
    try:
        return Outcome(value=fn())
    except ContractViolation as err:
        return Outcome(clause=err.clause_id, error=err)


reference_outcome = call_backend
"""A reference computation run the same way: its ContractViolation is the clause the backend must raise."""


def judge(clause: str, what: str, expected: Outcome, call: Callable[[], Any],
          compare: Callable[[Any, Any], None], *, where: frozenset[Where] = frozenset()) -> Any:
    """The backend call must raise the clause the reference raised, or return what ``compare`` accepts.

    ``clause`` is the property's clause: charged when the backend crashes on valid input, refuses it
    (inventing a breach) or returns a wrong value (correctness); a missed or misnamed breach, or one
    that does not name an entry of ``where``, is charged to the clause the reference raised (strictness).
    Any refusal of broken input is safe: another exception is "refused, unnamed".
    """
    try:
        got = call_backend(call)
    except Unsupported:
        raise
    except Exception as err:  # a crash deep inside the backend instead of a ContractViolation
        if expected.raised:
            raise Mismatch(expected.clause or clause, f"{what}: refused, unnamed: {type(err).__name__}: {err} "
                           f"(expected ContractViolation [{expected.clause}])", tier="strictness",
                           kind="refused, unnamed") from err
        raise Mismatch(clause, f"{what}: crashed with {type(err).__name__}: {err} (expected a result)",
                       kind=f"crashed ({type(err).__name__})") from err
    if expected.raised:
        if not got.raised:
            raise Mismatch(expected.clause or clause, f"{what}: accepted input that breaks "
                           f"{expected.clause}; returned {summarize(got.value)}", tier="",
                           kind="accepted broken input")
        if got.clause != expected.clause:
            raise Mismatch(expected.clause or clause, f"{what}: raised [{got.clause}], expected "
                           f"[{expected.clause}]", tier="strictness", kind=f"refused as {got.clause}")
        if where and not any(_names(got.error, entry) for entry in where):
            raise Mismatch(expected.clause or clause, f"{what}: raised [{got.clause}] at {_located(got.error)}, "
                           f"expected one of {_entries(where)}", tier="strictness", kind="misplaced refusal")
        return None
    if got.raised:
        raise Mismatch(clause, f"{what}: raised [{got.clause}] on input the contract accepts",
                       kind=f"refused valid input as {got.clause}")
    compare(got.value, expected.value)
    return got.value


def _names(err: ContractViolation | None, entry: Where) -> bool:
    """The refusal names the entry's group, row and column (each one the entry has)."""
    if err is None:
        return False
    return all(want is None or got == want for got, want in zip((err.group, err.row, err.col), entry, strict=True))


def _located(err: ContractViolation | None) -> str:
    return "(nowhere)" if err is None else f"(group {err.group!r}, row {err.row}, col {err.col})"


def _entries(where: frozenset[Where]) -> str:
    shown = sorted(where, key=lambda e: tuple((x is None, x if x is not None else 0) for x in e))[:6]
    more = f" and {len(where) - 6} more" if len(where) > 6 else ""
    return ", ".join(f"(group {g!r}, row {r}, col {c})" for g, r, c in shown) + more


def expect_raises(clause: str, what: str, call: Callable[[], Any], *, where: frozenset[Where] = frozenset()) -> None:
    """The backend must raise a ContractViolation naming ``clause`` (and an entry of ``where``, if given)."""
    judge(clause, what, Outcome(clause=clause.split()[0]), call, lambda _g, _e: None, where=where)
