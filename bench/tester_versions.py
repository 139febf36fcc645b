"""``python -m kvtable.bench.tester_versions``: only the tester's rows of ``kvtable bench`` (its runs beside earlier
commits, ``version_runs``, and its profile table), for a machine too loaded for the whole section."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kvtable.bench.tester_versions --baseline PYTHON ... --json PATH``: only the tester's runs beside
    earlier commits and its profile table (``kvtable bench --only tester`` without its other rows), for a machine
    too loaded for the whole section; the JSON is one run as ``kvtable bench`` writes it."""
    import argparse

    import torch

    from kvtable.bench.harness import Section, Settings, host_info, write_json
    from kvtable.bench.tester import CEILING_VARIANTS, profile, versions

    parser = argparse.ArgumentParser(prog="python -m kvtable.bench.tester_versions")
    parser.add_argument("--baseline", action="append", default=[], metavar="PYTHON")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--conform-examples", type=int, default=20)
    parser.add_argument("--profile-examples", type=int, default=10)
    parser.add_argument("--default-conform", action="store_true", help="also the default conform run (100 "
                        "examples per property) of this checkout, for its CPU target")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    started = host_info()
    settings = Settings.for_size("quick", args.baseline)
    section = Section("tester", "The tester beside earlier commits, and where an example's time goes", [])
    runs = [("fuzz", 2000, args.rounds), ("conform", args.conform_examples, args.rounds)]
    versions(section, settings, runs, variants=CEILING_VARIANTS)
    if args.default_conform:
        versions(section, Settings.for_size("quick"), [("conform", 100, 1)], alone=True)
    profile(section, args.profile_examples)
    command = " ".join(["python -m kvtable.bench.tester_versions", *(f"--baseline {os.path.relpath(p)}"
                                                                       for p in args.baseline),
                        f"--rounds {args.rounds} --conform-examples {args.conform_examples} --profile-examples "
                        f"{args.profile_examples}", "--default-conform" * args.default_conform, f"--json {args.json}"])
    write_json(args.json, [section], settings, command=command, started=started)
    print(section.render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
