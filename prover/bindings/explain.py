"""Counterexamples explained in words: a stored value that is the clause's wrapped at 32 bits names the int32
product that wrapped (vLLM V2's ``block_numbers * block_size``), with its kernel line; an allocator's request
whose prefix exceeds its length is named (SPEC 6a's broken lengths)."""

from __future__ import annotations

import linecache
from collections.abc import Mapping

from kvtable.prover.bindings.binding import Binding
from kvtable.prover.bindings.queries import symbolic_run
from kvtable.prover.bindings.replay import evaluate
from kvtable.prover.symexec.values import mentions

_VALUE = " value"


def wrap_hint(binding: Binding, model: Mapping[str, int | bool]) -> list[str]:
    """For each store the model makes whose value differs from the clause's by a multiple of 2^32, with the
    clause's outside int32: the 32-bit products its value is computed from, each with its kernel line."""
    lines = []
    for key, value in model.items():
        if not key.endswith(_VALUE) or not key.startswith("store "):
            continue
        label = key.removesuffix(_VALUE)
        expected = model.get(f"{label} expected", model.get(f"{label} slot"))  # safety: the token's own slot
        if not model.get(f"{label} mask") or expected is None or value == expected:
            continue
        if (int(value) - int(expected)) % 2**32 or -(2**31) <= int(expected) < 2**31:
            continue
        _, trace = symbolic_run(binding)
        store = next((a for a in trace.stores if a.label == label), None)
        products = [site for site, term in trace.products if store is not None and mentions(store.value.term, term)]
        said = "; ".join(f"line {site.rsplit(':', 1)[1]}: {_source(site)}" for site in dict.fromkeys(products))
        why = (f"an int32 product overflowed before it was widened ({said})" if said else
               "the value was narrowed to 32 bits on its way (a 32-bit output or intermediate)")
        lines.append(f"{label} stored {value}, the clause's {expected} wrapped modulo 2^32: {why}")
    return lines


def _source(site: str) -> str:
    path, _, line = site.rpartition(":")
    return linecache.getline(path, int(line)).strip()


def length_hint(binding: Binding, model: Mapping[str, int | bool]) -> list[str]:
    """Each request of an allocator binding (roles ``prefix_lens``, ``lengths``) whose prefix in the model is longer
    than its sequence: its extend length is negative, so every later request's output starts too early."""
    prefix, lengths = binding.roles.get("prefix_lens"), binding.roles.get("lengths")
    if prefix is None or lengths is None or prefix not in binding.tensors or lengths not in binding.tensors:
        return []
    params = {p: int(model.get(p, lo)) for p, (lo, _) in binding.params.items()}
    requests = evaluate(binding.tensors[lengths].sizes[0], params)
    out = []
    for key, value in model.items():
        if key.startswith(f"{prefix}[") and key.endswith("]") and key[len(prefix) + 1:-1].isdigit():
            index = key[len(prefix) + 1:-1]
            if int(index) >= requests:  # no such request in this launch
                continue
            length = model.get(f"{lengths}[{index}]")
            if length is not None and int(value) > int(length):
                out.append(f"request {index}'s prefix ({prefix}[{index}] = {value}) is longer than its sequence"
                           f" ({lengths}[{index}] = {length}): its extend length is {int(length) - int(value)}, so the"
                           f" requests after it start before their output (the binding does not state"
                           f" '{prefix}[{index}] <= {lengths}[{index}]', which the host must check)")
    return out
