"""``kvtable engines list|install``: the engines kvtable drives, and a venv for one beside torch 2.13.0."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from kvtable.engines.base import ENGINES, TORCH_PIN, EngineInfo
from kvtable.exitcodes import EXIT_PASSED, UsageError

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout kvtable runs from: installed into each engine venv in editable mode."""


def default_venv(name: str, version: str) -> Path:
    """Where ``install`` puts an engine's venv by default: kept across clones (a cache, keyed by version)."""
    base = Path(os.environ.get("KVTABLE_ENGINES_DIR") or Path.home() / ".cache" / "kvtable" / "engines")
    return base / f"{name}-{version}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="engines_command", required=True, metavar="ACTION")
    sub.add_parser("list", help="the engines kvtable drives, with versions, profiles and install state")
    install = sub.add_parser("install", help="make a venv with the engine beside torch 2.13.0 and kvtable")
    install.add_argument("name", choices=ENGINES)
    install.add_argument("--venv", type=Path, default=None, help="the venv folder (default: "
                         "$KVTABLE_ENGINES_DIR or ~/.cache/kvtable/engines, then NAME-VERSION)")
    install.add_argument("--print", dest="print_only", action="store_true",
                         help="print the commands instead of running them")


def run(args: argparse.Namespace) -> int:
    from kvtable.engines import load_engine

    if args.engines_command == "list":
        for name in ENGINES:
            info = load_engine(name).ENGINE
            venv = default_venv(name, info.version)
            state = f"venv {venv}" if (venv / "bin" / "python").exists() else "not installed"
            print(f"{name:13} {info.distribution + '==' + info.version:22} profile {info.profile:13} {state}")
        return EXIT_PASSED
    info = load_engine(args.name).ENGINE
    venv = args.venv or default_venv(info.name, info.version)
    for command in install_commands(info, venv):
        if command[-1] == PINNED and not args.print_only:
            pins = [str(venv / "bin" / "python"), "-m", "kvtable.engines.pins", info.distribution,
                    *info.dependencies]
            command = [*command[:-1], *subprocess.run(pins, capture_output=True, text=True,
                                                      check=True).stdout.split()]
        print("$ " + " ".join(command), flush=True)
        if not args.print_only and subprocess.run(command).returncode != 0:
            raise UsageError(f"install of {info.name} failed at: {' '.join(command)}")
    if not args.print_only:
        print(f"{info.name} {info.version} installed in {venv}: run {venv}/bin/kvtable ...")
    return EXIT_PASSED


PINNED = "<its dependencies, as the engine's own metadata pins them>"
"""Stands for the engine's dependencies in a printed recipe; ``run`` asks the venv for them once it has the engine."""


def install_commands(info: EngineInfo, venv: Path) -> list[list[str]]:
    """The commands that make ``venv``: torch 2.13.0, kvtable from this checkout, then the engine, and for an
    engine installed ``--no-deps`` its pure-Python dependencies at the versions its own metadata states."""
    if not (REPO_ROOT / "pyproject.toml").is_file():
        raise UsageError(f"kvtable is not installed from a checkout ({REPO_ROOT}): install engines from a clone")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    steps = [[sys.executable, "-m", "venv", str(venv)]] if not (venv / "bin" / "python").exists() else []
    steps.append([*pip, TORCH_PIN, "packaging"])
    steps.append([*pip, "-e", str(REPO_ROOT), TORCH_PIN])
    engine = f"{info.distribution}=={info.version}"
    if not info.no_deps:
        return [*steps, [*pip, engine, TORCH_PIN]]
    return [*steps, [*pip, "--no-deps", engine], [*pip, TORCH_PIN, PINNED]]

