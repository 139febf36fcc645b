"""`kvtable prove`: every obligation passes, counterexamples are concrete and real, failures fail loudly."""

from __future__ import annotations

import argparse
import json
import random
import time

import pytest
import z3

import kvtable.cli
from kvtable.errors import ContractViolation
from kvtable.exitcodes import EXIT_FAILED, EXIT_INCONCLUSIVE, EXIT_PASSED, EXIT_TOO_SLOW, UsageError, most_serious
from kvtable.prover import prove
from kvtable.prover.obligations.registry import OBLIGATIONS, Obligation, obligation
from kvtable.prover.solver.discharge import Query, conjuncts, discharge
from kvtable.prover.solver.encoding import INT32_MAX, int32, int64, widen
from kvtable.prover.solver.intblast import IntBlaster, Interval, UnsupportedOperation, harvest_bounds
from kvtable.reference.locs import decode_locs, verify_locs
from kvtable.spec.clauses import CLAUSES


@pytest.fixture
def results(proved_registry: dict[str, prove.Result]) -> dict[str, prove.Result]:
    """The session's one proof of the registry (tests/prover/conftest.py)."""
    return proved_registry


def model(results: dict[str, prove.Result], name: str, *small: str) -> dict[str, int | bool]:
    """The counterexample's values; the inputs named in ``small`` come from the small-values search."""
    outcome = results[name].outcome
    assert outcome.status == "counterexample", (name, outcome)
    values = dict(outcome.model)
    assert all(abs(values[k]) <= prove.SMALL_VALUES for k in small), values  # small enough to build a table
    return values


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    prove.add_arguments(parser)
    return parser.parse_args(argv)


# The registry ------------------------------------------------------------------------------------
def test_registry_names_clauses_and_statements() -> None:
    ids = {c.id for c in CLAUSES}
    names = [ob.name for ob in OBLIGATIONS]
    assert len(names) == len(set(names))
    for ob in OBLIGATIONS:
        assert ob.clause in ids and ob.name.startswith(ob.clause + ".")
        assert ob.statement and "\n" not in ob.statement
        assert obligation(ob.name) is ob
    with pytest.raises(KeyError, match="no proof obligation"):
        obligation("W1.no-such-thing")
    with pytest.raises(KeyError):
        Obligation("X9.bogus", "X9", "a clause that does not exist", lambda: Query((), z3.BoolVal(True)))


def test_registry_covers_the_issue() -> None:
    required = {
        "W1.in-bounds", "W2.in-bounds", "W4.in-bounds", "W3.in-bounds", "W5.no-overflow", "W5.int64-exact",
        "W0.decode-agrees", "W0.verify-agrees", "W0.reanchor-agrees", "W0.extend-agrees",
        "E3.unit-invariance", "E3.block-formula", "D1.own-page", "D2.distinct-in-row",
        "T7.distinct-across-rows", "G4.dummy-rows-read-column-0", "G4.masked-load-in-bounds",
        *(f"T5.{mode}-holes-safe" for mode in ("decode", "verify", "extend")),
        *(f"T5.{mode}-bound-is-weakest" for mode in ("decode", "verify", "extend")),
    }
    expected_counterexamples = {
        "T9.decode-needs-seq-len-1", "T8.decode-needs-width", "W2.needs-seq-len-n", "W5.int32-product-wraps",
        *(f"T5.{mode}-one-past" for mode in ("decode", "verify", "extend")),
    }
    by_name = {ob.name: ob for ob in OBLIGATIONS}
    assert required <= set(by_name) and expected_counterexamples <= set(by_name)
    assert all(by_name[n].expect == "proved" for n in required)
    assert all(by_name[n].expect == "counterexample" for n in expected_counterexamples)


# Every obligation passes -------------------------------------------------------------------------
@pytest.mark.slow
def test_every_obligation_passes(results: dict[str, prove.Result]) -> None:
    failed = {n: (r.verdict, r.outcome.detail) for n, r in results.items() if not r.passed}
    assert not failed
    for ob in OBLIGATIONS:
        outcome = results[ob.name].outcome
        assert outcome.status == ob.expect
        assert bool(outcome.model) == (ob.expect == "counterexample")


@pytest.mark.slow
def test_dropped_lengths_give_concrete_counterexamples(results: dict[str, prove.Result]) -> None:
    m = model(results, "T9.decode-needs-seq-len-1", "width", "page_size")
    assert m["seq_len"] == 0 and m["pos"] == 0  # the clamp reads position 0 of an empty row
    with pytest.raises(ContractViolation, match="T9"):
        decode_locs([[1] * m["width"]], [m["seq_len"]], m["page_size"])

    m = model(results, "T8.decode-needs-width", "width", "page_size", "seq_len")
    assert m["seq_len"] > m["width"] * m["page_size"] and m["col"] >= m["width"]
    assert m["page"] == -1 and 0 <= m["loc"] < m["page_size"]  # masked: the write sinks into page 0
    with pytest.raises(ContractViolation, match="T8"):
        decode_locs([list(range(1, m["width"] + 1))], [m["seq_len"]], m["page_size"])

    m = model(results, "W2.needs-seq-len-n", "width", "page_size", "seq_len", "N")
    assert m["seq_len"] < m["N"] and m["t_a"] != m["t_b"]
    assert m["pos_a"] == m["pos_b"] == 0 and m["loc_a"] == m["loc_b"]  # one slot written twice
    with pytest.raises(ContractViolation, match="W2"):
        verify_locs([[1] * m["width"]], [m["seq_len"]], m["page_size"], m["N"])


@pytest.mark.slow
def test_negative_positions_give_concrete_counterexamples(results: dict[str, prove.Result]) -> None:
    m = model(results, "T9.extend-needs-prefix-0")
    assert m["prefix"] < 0 and m["col"] < 0 < m["width"]  # passes `col < width`, reads before the row

    m = model(results, "T9.negative-position-leaves-page")
    assert m["pos"] == -1 and m["col"] == 0 and m["loc"] // m["page_size"] != m["page"]

    m = model(results, "W0.truncation-differs-below-zero")
    pos, ps = m["pos"], m["page_size"]
    assert pos < 0 and m["pos // ps in torch"] == pos // ps and m["pos % ps in torch"] == pos % ps
    assert m["pos // ps in Triton"] == int(pos / ps) and m["pos % ps in Triton"] == pos - ps * int(pos / ps)


@pytest.mark.slow
def test_int32_counterexamples(results: dict[str, prove.Result]) -> None:
    m = model(results, "W5.int32-product-wraps")
    exact = m["page"] * m["page_size"] + m["pos"] % m["page_size"]
    assert m["loc in int64 arithmetic"] == exact and exact > INT32_MAX
    assert m["loc in int32 arithmetic"] == (exact + 2**31) % 2**32 - 2**31

    m = model(results, "W5.needed-for-the-store")
    page = m["page"]
    assert (page + 1) * m["page_size"] > 2**31 and m["loc before the int32 store"] > INT32_MAX
    assert m["loc"] == (m["loc before the int32 store"] + 2**31) % 2**32 - 2**31


@pytest.mark.slow
def test_swa_one_past_and_e1_counterexamples(results: dict[str, prove.Result]) -> None:
    for mode in ("decode", "verify", "extend"):
        m = model(results, f"T5.{mode}-one-past")
        assert m["holes"] * m["page_size"] == m["read_start"] + 1  # exactly one token past the bound
        assert m["key column"] < m["holes"] and m["query"] - m["window"] < m["key"] <= m["query"]

    m = model(results, "E1.needs-a-multiple")
    assert m["block_size"] % m["kernel_page_size"] != 0
    assert m["block loc"] != m["kernel loc"]


# The command -------------------------------------------------------------------------------------
def test_table_shows_progress_and_counterexamples(capsys: pytest.CaptureFixture[str]) -> None:
    rc = prove.run(parse("--only", "T9.*", "--only", "W1.in-bounds", "--show-counterexamples"))
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["obligation", "clause", "result", "time"]
    assert lines[1].startswith("W1.in-bounds") and "W1 decode-loc" in lines[1] and "proved" in lines[1]
    assert "T9.decode-needs-seq-len-1" in out and "counterexample (expected)" in out
    assert "counterexample: " in out and "seq_len=0" in out
    # T9.kernel-* too
    assert "5 obligations: 1 proved, 4 counterexamples found as expected, 0 failed, 0 unknown" in lines[-1]


@pytest.mark.slow
def test_json_through_the_cli(results: dict[str, prove.Result], monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI renders the session's results as JSON (the proving itself is the table test's and the fixture's)."""
    # Only the prove subcommand: the others are built by other modules and need not exist yet.
    monkeypatch.setattr(kvtable.cli, "SUBCOMMANDS", {"prove": kvtable.cli.SUBCOMMANDS["prove"]})
    monkeypatch.setattr(prove, "prove", lambda chosen, *_, **__: [results[ob.name] for ob in chosen])
    patterns = ["W*", "T9.*", "E*", "*.kernel-extend-locs-*"]  # every kind of row
    chosen = prove.select(patterns)
    rc = kvtable.cli.main(["prove", "--json", *(arg for p in patterns for arg in ("--only", p))])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert report["summary"]["total"] == len(chosen) and report["summary"]["failed"] == 0
    assert [row["name"] for row in report["obligations"]] == [ob.name for ob in chosen]
    for row, ob in zip(report["obligations"], chosen, strict=True):
        assert row["clause"] == ob.clause and row["statement"] == ob.statement and row["passed"]
        assert row["seconds"] == round(results[ob.name].seconds, 4)
        if ob.expect == "counterexample":
            assert row["result"] == "counterexample (expected)" and row["counterexample"]
        else:
            assert row["result"] == "proved" and row["counterexample"] is None
    seq0 = next(row for row in report["obligations"] if row["name"] == "T9.decode-needs-seq-len-1")
    assert seq0["counterexample"]["seq_len"] == 0


def test_only_without_a_match_is_an_error() -> None:
    with pytest.raises(UsageError, match="no proof obligation matches"):  # the CLI's one line, exit 2
        prove.run(parse("--only", "Z9.*"))


def _fake(name: str, build, expect: str = "proved") -> Obligation:
    return Obligation(name, "W5", "a fake obligation for the failure paths", build, expect=expect)


def test_a_false_claim_fails_with_its_counterexample(capsys: pytest.CaptureFixture[str]) -> None:
    x = int32("x")
    wraps = _fake("W5.fake-increment", lambda: Query((), x + 1 > x))
    provable = _fake("W5.fake-expected", lambda: Query((), widen(x) + 1 > widen(x)), expect="counterexample")
    rc = prove.run(parse(), obligations=[wraps, provable])
    out = capsys.readouterr().out
    assert rc == 1
    assert "W5.fake-increment" in out and f"counterexample: x={INT32_MAX}" in out  # int32 wraps
    assert "proved (counterexample expected)" in out
    assert "failed: W5.fake-increment, W5.fake-expected" in out


def _nested_divisions() -> Query:
    """E3's identity without its proof steps: far beyond a tiny resource limit."""
    k, r, b = (widen(int32(n)) for n in ("k", "r", "b"))
    pos = int64("pos")
    big = r * k
    pre = (k >= 1, r >= 1, b >= 1, pos >= 0, big <= INT32_MAX, (b + 1) * big <= 2**31)
    j = (pos % big) / k
    return Query(pre, (b * r + j) * k + pos % k == b * big + pos % big)


def test_the_resource_limit_is_unknown_not_a_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    hard = _fake("W5.fake-hard", _nested_divisions)
    for isolate in (True, False):
        result = prove.prove_one(hard, prove.Limits(rlimit=2000), isolate=isolate)
        assert result.outcome.status == "unknown" and not result.passed and result.verdict == "unknown"
        assert result.outcome.detail.endswith("resource limit reached")
        parts = len(conjuncts(_nested_divisions().goal)) + 1  # each part of the goal, and the premises, has its own
        assert 2000 <= result.outcome.work < (2000 + 1000) * parts  # limit: spent up to it, the same on any machine
    rc = prove.run(parse("--rlimit", "2000", "--only", "W5.*"), obligations=[hard])
    lines = capsys.readouterr().out.splitlines()
    assert rc == EXIT_INCONCLUSIVE == 4  # no verdict about the contract: not 1
    assert lines[1].split()[:4] == ["W5.fake-hard", "W5", "int32-locs", "unknown"]
    assert lines[-2] == "1 obligations: 0 proved, 0 counterexamples found as expected, 0 failed, 1 unknown" \
        + lines[-2][lines[-2].index(" ("):]
    assert lines[-1] == "unknown (a limit was reached or a shape is not modelled: no verdict): W5.fake-hard"


def test_a_wrong_verdict_outweighs_an_unknown() -> None:
    x = int32("x")
    wraps = _fake("W5.fake-increment", lambda: Query((), x + 1 > x))
    results = prove.prove([_fake("W5.fake-hard", _nested_divisions), wraps], prove.Limits(rlimit=2000))
    assert [r.outcome.status for r in results] == ["unknown", "counterexample"]
    assert prove.exit_status(results) == EXIT_FAILED and prove.exit_status(results[:1]) == EXIT_INCONCLUSIVE
    assert most_serious(EXIT_PASSED, EXIT_INCONCLUSIVE) == EXIT_INCONCLUSIVE  # kvtable check's combination
    assert most_serious(EXIT_INCONCLUSIVE, EXIT_FAILED) == most_serious(EXIT_FAILED, EXIT_PASSED) == EXIT_FAILED


def test_workers_give_the_verdicts_of_one_in_registry_order() -> None:
    """Two obligations at a time, each its own process and resource limit: the same verdicts and work as one at a
    time, reported in the order given, however the processes finish (a hard one first, easy ones behind it)."""
    x = int32("x")
    chosen = [_fake("W5.fake-hard", _nested_divisions), _fake("W5.fake-increment", lambda: Query((), x + 1 > x)),
              _fake("W5.fake-true", lambda: Query((), x == x)), _fake("W5.fake-hard-too", _nested_divisions)]
    limits = prove.Limits(rlimit=2000)
    runs = {}
    for workers in (1, 2):
        seen: list[str] = []
        runs[workers] = prove.prove(chosen, limits, on_result=lambda r, seen=seen: seen.append(r.obligation.name),
                                    workers=workers)
        assert seen == [ob.name for ob in chosen] == [r.obligation.name for r in runs[workers]]
    verdicts = {w: [(r.outcome.status, r.outcome.work) for r in results] for w, results in runs.items()}
    assert verdicts[1] == verdicts[2]
    assert [status for status, _ in verdicts[2]] == ["unknown", "counterexample", "proved", "unknown"]


def test_an_overrunning_obligation_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    def stuck() -> Query:
        time.sleep(30)
        raise AssertionError("not reached")

    monkeypatch.setattr(prove, "GRACE_S", 0.5)
    result = prove.prove_one(_fake("W5.fake-stuck", stuck), prove.Limits(guard_s=0.1), isolate=True)
    assert result.outcome.status == "too slow" and result.verdict == "too slow" and not result.passed
    assert result.outcome.detail.startswith("the machine was too slow: killed by the hang guard after 0.6 s")
    assert prove.exit_status([result]) == EXIT_TOO_SLOW == 5  # neither unknown (4) nor a verdict (0, 1)


def test_the_hang_guard_is_too_slow_never_unknown_nor_a_later_strategys_verdict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A check cut short by the wall clock ends the whole query as "too slow": no other strategy is tried after
    it (one might answer where the clock ran out on a loaded machine, so the verdict would depend on the load)."""
    from kvtable.prover.solver import discharge as solver

    x, y, z = int64("x"), int64("y"), int64("z")
    fermat = Query((x > 0, y > 0, z > 0, x < 2**20, y < 2**20, z < 2**20), x * x * x + y * y * y != z * z * z)
    clock = iter(range(0, 10**9, 10**6))  # every reading a million seconds later: the guard is always past
    monkeypatch.setattr(solver.time, "perf_counter", lambda: next(clock))
    tried: list[str] = []
    monkeypatch.setattr(solver, "STRATEGIES", tuple((name, lambda ctx, name=name, make=make: tried.append(name)
                                                     or make(ctx)) for name, make in solver.STRATEGIES))
    outcome = discharge(fermat, guard_ms=1000)
    assert outcome.status == "too slow" and "the machine was too slow" in outcome.detail
    assert set(tried) == {"nia"}  # the first check cut short ends it: no other strategy is tried after it
    result = prove.Result(_fake("W5.fake-fermat", lambda: fermat), outcome, 1.0)
    assert result.verdict == "too slow" and prove.exit_status([result]) == EXIT_TOO_SLOW


# The bit-vector semantics ----------------------------------------------------------------------
def test_wrapping_is_modelled_not_unbounded_integers() -> None:
    x = int32("x")
    outcome = discharge(Query((), x + 1 > x), 5000)
    assert outcome.status == "counterexample" and dict(outcome.model) == {"x": INT32_MAX}
    assert discharge(Query((), widen(x) + 1 > widen(x)), 5000).status == "proved"
    assert discharge(Query((x >= 0,), z3.Extract(31, 0, widen(x) * 2) >= 0), 5000).status == "counterexample"


_OPS = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "neg": lambda x, y: -x,
    "sdiv": lambda x, y: x / y, "srem": z3.SRem, "smod": lambda x, y: x % y, "udiv": z3.UDiv, "urem": z3.URem,
    "sext": lambda x, y: z3.SignExt(5, x), "zext": lambda x, y: z3.ZeroExt(3, x),
    "extract-mid": lambda x, y: z3.Extract(5, 2, x), "extract-low": lambda x, y: z3.Extract(4, 0, x),
    "concat": z3.Concat, "min": lambda x, y: z3.If(x < y, x, y), "max": lambda x, y: z3.If(x > y, x, y),
    "ule": lambda x, y: z3.If(z3.ULE(x, y), x, y),
    "bv2int": lambda x, y: z3.Int2BV(z3.BV2Int(x, is_signed=True) * 3 + z3.BV2Int(y), 8),
    "wide-product": lambda x, y: z3.Extract(x.size() - 1, 0, z3.SignExt(x.size(), x) * z3.SignExt(x.size(), y)),
}


@pytest.mark.parametrize("width", [8, 32, 64])
def test_integer_reading_matches_z3_bit_vectors(width: int) -> None:
    """Symbolic translation, evaluated at concrete values, equals z3's own bit-vector evaluation."""
    rng = random.Random(width)
    low, high = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    edges = [0, 1, 2, -1, -2, low, high, low + 1]
    x, y = z3.BitVec("x", width), z3.BitVec("y", width)
    for name, op in _OPS.items():
        for _ in range(40):
            a, b = (rng.choice([*edges, rng.randint(low, high)]) for _ in range(2))
            facts = [x >= a if a >= 0 else x <= a, y >= 1 if b >= 1 else y <= b] if rng.random() < 0.5 else []
            term = op(x, y)
            want = z3.simplify(z3.substitute(term, (x, z3.BitVecVal(a, width)), (y, z3.BitVecVal(b, width))))
            blaster = IntBlaster(facts)
            image = blaster.translate(term)
            values = {"x": a, "y": b}
            got = z3.simplify(z3.substitute(image, *[(img, z3.IntVal(values[n]))
                                                     for n, (_, img) in blaster.variables.items()]))
            assert got.as_long() == want.as_signed_long(), (name, width, a, b, facts)


def test_bounds_come_from_top_level_facts_at_the_term_width() -> None:
    wide, narrow = z3.BitVec("wide", 128), int32("narrow")
    facts = [z3.And(wide >= 5, narrow < 7), z3.Or(narrow > 100, narrow < -100), widen(narrow) >= -3]
    bounds = harvest_bounds(facts)
    assert bounds[wide.get_id()] == Interval(5, 2**127 - 1)
    assert bounds[narrow.get_id()] == Interval(-3, 6)  # the disjunction gives none; the sign extension does
    assert bounds[widen(narrow).get_id()] == Interval(-3, 2**63 - 1)


def test_unsupported_operations_are_refused() -> None:
    x = int32("x")
    with pytest.raises(UnsupportedOperation):
        IntBlaster().translate(x & 1 == 0)


def test_a_kernel_counterexample_reads_as_inputs_then_the_accesses_that_happen() -> None:
    model = (("N", 1), ("undefined#3", -7), ("table[1, 1]", 64),
             ("load 2 table@path1 mask", True), ("load 2 table@path1 line", 47), ("load 2 table@path1 index[0]", 1),
             ("load 2 table@path1 index[1]", 1), ("load 2 table@path2 mask", False), ("load 2 table@path2 index[0]", 0),
             ("store 3 out mask", True), ("store 3 out index[0]", 0), ("store 3 out value", 4096),
             ("store 3 out expected", -1), ("store 3 out page", 64))
    assert prove.kernel_model_text(model) == [
        "N=1, table[1, 1]=64",  # a masked-off load's free value (undefined#) is no input
        "load 2 table[1, 1] (line 47) on path1",  # path2's load has its mask off: it does not happen
        "store 3 out[0]: value 4096, expected -1, page 64"]
