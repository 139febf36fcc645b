"""bench/RESULTS.md is exactly what its JSON files render to (``python -m kvtable.bench.results``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kvtable.bench.results import main, render

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "RESULTS.md"


def test_results_md_is_generated_from_its_json() -> None:
    text = RESULTS.read_text()
    names = re.findall(r"^## (\S+\.json)$", text, flags=re.MULTILINE)
    assert "bench-quick.json" in names
    paths = [ROOT / "bench" / "results" / name for name in names]
    assert render(paths) == text, "bench/RESULTS.md differs from its JSON: regenerate it (see its first lines)"


def test_a_run_shows_its_command_commit_load_and_every_target(tmp_path: Path, capsys) -> None:
    doc = {"created": "2026-01-01T00:00:00+00:00", "command": "kvtable bench --quick", "commit": "abc", "dirty": False,
           "host": {"torch": "2.13", "torch_threads": 1, "cpu_count": 2, "loadavg_start": [1.0, 2.0, 3.0],
                    "loadavg": [4.0, 5.0, 6.0]},
           "sections": {"decode": {"targets": [{"name": "t", "want": ">= 2x", "verdict": "MISSED",
                                                "got": {"min": 1.0, "median": 1.5, "max": 2.5}}], "skipped": []},
                        "scaling": {"targets": []}}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "`kvtable bench --quick`" in out and "commit: abc;" in out and "1.0, 2.0, 3.0" in out
    assert "| t | >= 2x | 1.5 (1-2.5) | MISSED |" in out and "### scaling" not in out
    assert main([]) == 2
