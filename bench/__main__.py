"""The command line's entry, `python -m bench` and the `bench` script (pyproject.toml): Ctrl-C and SIGTERM end it in
one line from its first statement on (bench.core.interrupts), while the CLI's modules load (seconds: numpy, the
report, the backends' registry) as well as later; then bench.cli.main."""

from __future__ import annotations

from bench.core.interrupts import end_at_once, ignore_while_exiting


def main() -> int:
    end_at_once("before it started anything; nothing is left running")
    from bench.cli import main as cli_main  # after the handlers: the import is what takes the time

    try:
        return cli_main()
    finally:
        ignore_while_exiting()


if __name__ == "__main__":
    raise SystemExit(main())
