"""``python -m knowledge_agent`` and the ``knowledge-agent`` command."""

import sys


def main() -> None:
    """Console-script entry point. A Ctrl-C while the command line is still loading ends it
    the way one during a command does: "interrupted" on stderr, exit code 130, no traceback."""
    try:
        from knowledge_agent.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    cli_main()


if __name__ == "__main__":
    main()
