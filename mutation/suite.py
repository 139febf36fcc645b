"""The conformance suite as cosmic-ray's test command: ``kvtable fuzz`` on the torch backend, stopping at the first
failing property.

Each property runs with the examples and seed that ``kvtable fuzz --examples N --seed S --level L`` gives it (its
share of N by weight); the run exits 1 at the first property that fails (the mutant is killed) and 0 when all pass.
The level is ``strict`` by default: a mutant that makes impl accept a breach it must refuse fails only the
strictness tier (the ``rejects/*`` properties), and that is a defect of impl all the same.

    python mutation/suite.py [--examples N] [--seed S] [--level L]   # the suite, in this process
    python mutation/suite.py --serve SOCKET &                    # preload torch, hypothesis, the conformance suite
    python mutation/suite.py --via SOCKET                        # the test command: the server forks a child that
                                                                 # imports impl afresh from disk (the mutant)

The server saves each mutant the ~4 s of importing torch and hypothesis; it never imports the packages under
mutation (``kvtable.impl`` and ``kvtable.reference``) itself, and so never the conformance suite, which imports both.
The same server judges mutants of impl/ (mutation/cosmic-ray.toml) and of reference/ (cosmic-ray-reference.toml).
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import socket
import sys
from collections.abc import Callable

CHILD_TIMEOUT_S = 600
"""A mutant that hangs the suite this long is killed (and counts as killed, as a cosmic-ray timeout does)."""
MUTATED = ("kvtable.impl", "kvtable.reference")
"""The packages cosmic-ray mutates; a child must import them afresh from disk."""


def run_suite(examples: int, seed: int, level: str = "strict", say: Callable[[str], object] = print) -> int:
    """0 when every property passes at its ``kvtable fuzz`` budget, 1 at the first that fails (named via ``say``)."""
    from kvtable.backends import load
    from kvtable.conformance.fuzz import budget, fuzz
    from kvtable.conformance.properties import PROPERTIES

    backend = load("torch")
    shares = budget(examples, PROPERTIES)
    for prop in PROPERTIES:
        report = fuzz(backend, examples=shares[prop.name], seed=seed, database=None, properties=[prop], level=level)
        if report.failures:  # a property not applicable to the torch backend (under its profile) kills nothing
            say(f"killed by {prop.name}: {report.failures[0].message[:300]}")
            return 1
    say("survived: every property passed")
    return 0


def serve(path: str, examples: int, seed: int, level: str) -> None:
    """Answer each connection with the exit status of one suite run in a forked child."""
    import hypothesis  # noqa: F401  (preloaded for the children)
    import torch  # noqa: F401

    mutated = [name for name in sys.modules if name.startswith(MUTATED)]
    if mutated:
        raise RuntimeError(f"the server imported {mutated[0]}; its children would test the unmutated code")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        while True:
            conn, _ = server.accept()
            with conn:
                pid = os.fork()
                if pid == 0:
                    signal.alarm(CHILD_TIMEOUT_S)
                    os._exit(run_suite(examples, seed, level, say=functools.partial(_send_line, conn)))
                _, status = os.waitpid(pid, 0)
                conn.sendall(b"exit %d\n" % (0 if os.waitstatus_to_exitcode(status) == 0 else 1))


def _send_line(conn: socket.socket, line: str) -> None:
    conn.sendall(line.encode() + b"\n")


def via(path: str) -> int:
    """One suite run on the server at ``path``: its report on stdout, its exit status returned."""
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(path)
        answer = b"".join(iter(lambda: client.recv(4096), b"")).decode()
    print(answer, end="")
    return 0 if answer.endswith("exit 0\n") else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="kvtable fuzz's budget (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--level", default="strict", help="the verdict tiers that fail a property (default strict)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--serve", metavar="SOCKET", help="preload and serve suite runs on this unix socket")
    mode.add_argument("--via", metavar="SOCKET", help="run the suite on the server at this socket")
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.examples, args.seed, args.level)
        return 0
    if args.via:
        return via(args.via)
    return run_suite(args.examples, args.seed, args.level)


if __name__ == "__main__":
    sys.exit(main())
