"""The repository root never shadows kvtable: from the root, with no editable install to help, the source folder
imports every subpackage (as after a non-editable ``pip install .``), and ``bench`` writes under the current
directory, never into the installed package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kvtable.bench.cli import DEFAULT_JSON

REPO = Path(__file__).resolve().parents[2]
WITHOUT_EDITABLE_FINDER = (
    "import sys\n"
    "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]\n"
    "import kvtable.impl, kvtable.spec, kvtable.prover, kvtable.reference, kvtable.bench, kvtable.cli\n"
    "print(kvtable.impl.__file__)\n"
    "sys.exit(kvtable.cli.main(['prove', '--only', 'W1.in-bounds']))\n"
)


def test_the_source_folder_imports_every_subpackage_from_the_root() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_EDITABLE_FINDER], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(REPO / "impl" / "__init__.py")


def test_bench_writes_under_the_current_directory() -> None:
    assert not DEFAULT_JSON.is_absolute() and DEFAULT_JSON.parts[0] == "bench-results"
