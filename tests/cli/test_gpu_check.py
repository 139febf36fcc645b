"""bench/gpu_check.py's CPU side: the plan (every GPU route conformed on CUDA), the budget, the one JSON file."""

from __future__ import annotations

import json
import time

from kvtable.bench import gpu_check
from kvtable.bench.gpu_check import Outcome, Step, check, parse, plan, summarize, write


def test_the_plan_conforms_every_gpu_route_on_cuda_within_the_budget() -> None:
    steps = plan("py", examples=5)
    conform = [s for s in steps if s.name.startswith("conform")]
    assert [s.argv[s.argv.index("--backend") + 1] for s in conform] == [
        "kvtable.bench.gpu_check:torch_cuda", "kvtable.bench.gpu_check:torch_stacked_cuda",
        "kvtable.bench.gpu_check:triton_cuda"]
    assert all(callable(getattr(gpu_check, s.argv[s.argv.index("--backend") + 1].split(":")[1])) for s in conform)
    assert all("--json" in s.argv and s.json_stdout and s.argv[s.argv.index("--examples") + 1] == "5"
               for s in conform)
    assert sum(s.cap_s for s in steps) <= gpu_check.BUDGET_S < 8 * 60 + 1
    assert steps[0].argv[3] == "tests/unit/test_triton_kernels.py"


def test_arguments_and_defaults() -> None:
    args = parse(["--out", "x/y.json", "--budget", "60", "--examples", "2"])
    assert (str(args.out), args.budget, args.examples) == ("x/y.json", 60.0, 2)
    assert parse([]).budget == gpu_check.BUDGET_S


def test_a_spent_budget_leaves_later_steps_not_run_and_the_json_says_so(tmp_path) -> None:
    def slow(step: Step, cap: float) -> Outcome:
        time.sleep(0.2)
        report = {"results": [{"property": "a", "status": "passed"}, {"property": "b", "status": "failed"},
                              {"property": "c", "status": "not applicable"}]}
        return Outcome(step.name, list(step.argv), 1, 0.2, False, "tail", report, summarize(report))

    steps = [Step("one", ("true",), 10), Step("two", ("true",), 10)]
    outcomes = check(steps, budget_s=5.1, runner=slow)
    assert [(o.name, o.rc, o.timed_out) for o in outcomes] == [("one", 1, False), ("two", None, True)]
    assert outcomes[0].summary == {"passed": 1, "not_applicable": 1, "failed": ["b"]}
    path = tmp_path / "gpu.json"
    doc = write(path, outcomes, 5.1, "a device")
    assert json.loads(path.read_text()) == doc and doc["ok"] is False and doc["device"] == "a device"
    assert doc["steps"][1]["output_tail"] == "not run: the budget was spent" and "commit" in doc


def test_a_real_step_runs_and_a_hung_one_is_cut_at_its_cap() -> None:
    import sys
    done = gpu_check.run_step(Step("ok", (sys.executable, "-c", "print('{\"results\": []}')"), 10, True), 10)
    assert (done.rc, done.timed_out, done.report) == (0, False, {"results": []})
    hung = gpu_check.run_step(Step("hang", (sys.executable, "-c", "import time; time.sleep(30)"), 1), 1)
    assert (hung.rc, hung.timed_out) == (None, True) and hung.seconds < 10
