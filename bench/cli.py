"""``kvtable bench``: implementation and tester speed, each candidate timed beside its baseline in one run."""

from __future__ import annotations

import argparse
import importlib
import os
import time
from pathlib import Path

from kvtable.argtypes import positive_int, writable_file
from kvtable.exitcodes import UsageError

BENCHMARKS: dict[str, str] = {
    "ops": "kvtable.bench.ops",
    "extend": "kvtable.bench.extend",
    "decode": "kvtable.bench.decode",
    "replay": "kvtable.bench.replay",
    "scaling": "kvtable.bench.scaling",
    "tester": "kvtable.bench.tester",
    "trace": "kvtable.bench.trace",
}
"""Benchmark name -> module providing ``run(settings) -> Section``."""

DEFAULT_JSON = Path("bench-results") / "bench.json"
"""Under the current directory, never inside the installed package."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="fewer cases and samples: the whole run in under "
                        "a minute on 2 cores (the target cases are kept)")
    parser.add_argument("--smoke", action="store_true", help="tiny cases, one sample each: checks the pipeline "
                        "end to end (for tests); its numbers mean nothing")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), metavar="NAME",
                        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, metavar="PATH",
                        help=f"where to write the results (default {DEFAULT_JSON}, under the current directory); "
                        "checked writable before the benchmarks run")
    parser.add_argument("--baseline", action="append", default=[], metavar="PYTHON",
                        help="the tester section also times fuzz and conform in this interpreter of another "
                        "checkout (its venv's python; repeatable), interleaved with this one")
    parser.add_argument("--threads", type=positive_int, default=1, metavar="N",
                        help="torch intra-op threads (default 1: on shared or busy cores a second thread "
                        "that gets descheduled stalls every large op, which skews the ratios)")


def command_line(args: argparse.Namespace) -> str:
    """The ``kvtable bench`` command that reproduces this run's settings."""
    flags = ["--smoke"] if args.smoke else ["--quick"] if args.quick else []
    flags += [f"--only {name}" for name in args.only or ()]
    flags += [f"--threads {args.threads}"] if args.threads != 1 else []
    flags += [f"--baseline {os.path.relpath(python)}" for python in args.baseline]  # a path outside: relative
    return " ".join(["kvtable bench", *flags, f"--json {args.json}"])


def run(args: argparse.Namespace) -> int:
    writable_file(args.json, "--json")
    for python in args.baseline:
        if not os.access(python, os.X_OK) or os.path.isdir(python):
            raise UsageError(f"--baseline {python}: not an executable interpreter (another checkout's venv's python)")
    import torch

    from kvtable.bench.harness import Settings, Size, host_info, write_json

    torch.set_num_threads(args.threads)
    size: Size = "smoke" if args.smoke else "quick" if args.quick else "full"
    settings = Settings.for_size(size, args.baseline)
    host = host_info()
    print(f"kvtable bench ({size}): torch {host['torch']}, {host['torch_threads']} thread(s) of "
          f"{host['cpu_count']} cpus, cuda {'yes: ' + host['cuda_device'] if host['cuda'] else 'no'}")
    print("speed figures are ratios of candidates timed interleaved in this one run; absolute times "
          "depend on the machine and its load")
    sections = []
    for name in args.only or list(BENCHMARKS):
        start = time.perf_counter()
        section = importlib.import_module(BENCHMARKS[name]).run(settings)
        print()
        print(section.render())
        print(f"({name}: {time.perf_counter() - start:.1f} s)")
        sections.append(section)
    write_json(args.json, sections, settings, command=command_line(args), started=host)
    print(f"\nresults: {args.json}")
    return 0
