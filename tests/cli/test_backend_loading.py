"""Loading backends: partial backends load, what they lack is listed, and a non-backend is a one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from kvtable.backends import (
    OPERATIONS,
    NoDebugMode,
    NotABackend,
    is_backend,
    load,
    missing_methods,
    present_methods,
    spec_of,
)
from kvtable.backends.torch_backend import TorchBackend
from kvtable.cli import main
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance


class DecodeOnly:
    """A partial backend: one operation of the protocol, no name, no device, no debug mode."""

    def decode_locs(self, table: torch.Tensor, seq_lens: torch.Tensor, page_size: int) -> torch.Tensor:
        pos = seq_lens.long() - 1
        return table[torch.arange(len(seq_lens)), pos // page_size] * page_size + pos % page_size


class Nothing:
    def decode(self) -> None:  # not a protocol operation
        return None


DECODE_ONLY = DecodeOnly()


def test_an_object_with_one_operation_loads_and_lists_what_it_lacks() -> None:
    backend = load(f"{__name__}:DecodeOnly")
    assert isinstance(backend, DecodeOnly) and is_backend(backend)
    assert present_methods(backend) == ("decode_locs",)
    assert missing_methods(backend) == OPERATIONS[1:]
    assert load(f"{__name__}:DECODE_ONLY") is DECODE_ONLY
    assert missing_methods(load("torch")) == ()  # every operation, the allocator step (impl.allocation) too


def test_an_object_with_no_operation_is_a_one_line_error_naming_them() -> None:
    with pytest.raises(NotABackend, match=r"gave Nothing, which has none of the operations .*decode_locs.*graph"):
        load(f"{__name__}:Nothing")


def test_a_factory_without_debug_has_no_debug_mode() -> None:
    assert isinstance(load(f"{__name__}:DecodeOnly", debug=False), DecodeOnly)
    with pytest.raises(NoDebugMode, match="no debug mode"):
        load(f"{__name__}:DecodeOnly", debug=True)


def _kvtable(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed command, run as a user would: from ``cwd``, with no PYTHONPATH help."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", "import sys; from kvtable.cli import main; sys.exit(main())",
                           *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_cli_names_what_is_missing_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "notone.py").write_text("class Thing:\n    def decode(self):\n        return None\n")
    result = _kvtable("conform", "--backend", "notone.py:Thing", "--property", "decode_locs", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "has none of the operations" in lines[0] and "decode_locs" in lines[0]


@pytest.mark.slow
def test_a_file_path_and_a_module_in_the_current_directory_both_load(tmp_path: Path) -> None:
    (tmp_path / "pkgdir").mkdir()
    source = textwrap.dedent('''
        import torch
        class Decode:
            def decode_locs(self, table, seq_lens, page_size):
                pos = seq_lens.long() - 1
                return (table[torch.arange(len(seq_lens)), pos // page_size] * page_size
                        + pos % page_size).to(torch.int32)
        ''')
    (tmp_path / "pkgdir" / "mine.py").write_text(source)
    by_path = load(str(tmp_path / "pkgdir" / "mine.py") + ":Decode")
    assert spec_of(by_path) == f"{tmp_path / 'pkgdir' / 'mine.py'}:Decode"
    assert load(spec_of(by_path)).__class__ is by_path.__class__  # the name it reports loads it again
    report = run_conformance(spec_of(by_path), examples=20, seed=0, properties=select(["decode_locs"]))
    assert report.passed
    result = _kvtable("conform", "--backend", "pkgdir.mine:Decode", "--property", "decode_locs", "--examples", "20",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "decode_locs" in result.stdout


def test_torch_stacked_is_the_torch_backend_through_the_proved_stacked_formula() -> None:
    """``torch-stacked``: eager calls take ``stacked_locs`` / ``stacked_extend_locs`` (no grouped path); same values."""
    backend = load("torch-stacked")
    assert (backend.name, spec_of(backend), backend.kernels.grouped_locs) == ("torch-stacked", "torch-stacked", None)
    table = torch.tensor([[3, 7], [5, 9]], dtype=torch.int32)
    locs = backend.verify_locs(table, torch.tensor([6, 3], dtype=torch.int32), 4, 2)
    assert locs.tolist() == [28, 29, 21, 22]
    assert load("torch").verify_locs(table, torch.tensor([6, 3], dtype=torch.int32), 4, 2).tolist() == [28, 29, 21, 22]
    report = run_conformance(backend, properties=select(["kernels/grouped-locs", "kernels/replay-fill",
                                                         "group_locs/extend"]),
                             examples=20, seed=0, isolate=False)
    assert sorted((r.property, r.status) for r in report.results) == [
        ("group_locs/extend", "passed"), ("kernels/grouped-locs", "not applicable"), ("kernels/replay-fill", "passed")]


def test_a_file_backend_imports_its_sibling_modules_from_any_directory(tmp_path: Path) -> None:
    """An adapter beside the engine code it wraps (``adapter.py`` importing ``engine.py``) loads by path from
    elsewhere, as ``python adapter.py`` would run it, in the command's workers too."""
    (tmp_path / "engine.py").write_text("def slot(page, pos, ps):\n    return page * ps + pos % ps\n")
    (tmp_path / "adapter.py").write_text(textwrap.dedent('''
        import torch
        import engine
        class Decode:
            def decode_locs(self, table, seq_lens, page_size):
                pos = seq_lens.long() - 1
                return engine.slot(table[torch.arange(len(seq_lens)), pos // page_size], pos, page_size).to(
                    torch.int32)
        '''))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _kvtable("conform", "--backend", str(tmp_path / "adapter.py") + ":Decode", "--property", "decode_locs",
                      "--examples", "10", cwd=elsewhere)
    assert result.returncode == 0, result.stdout + result.stderr


class Counted(TorchBackend):
    """The torch backend, counting the plain (``debug=False``) instances built."""

    built = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        Counted.built += not self.debug


def test_conform_loads_its_backend_once(capsys: pytest.CaptureFixture[str]) -> None:
    """preflight loads the backend to check it; the run uses that one rather than loading it again."""
    Counted.built = 0
    status = main(["conform", "--backend", f"{__name__}:Counted", "--no-isolate", "--property", "decode_locs",
                   "--examples", "3", "--no-progress"])
    assert status == 0, capsys.readouterr().out
    assert Counted.built == 1
