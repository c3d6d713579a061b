"""``python -m knowledge_agent``: the ``knowledge-agent`` command."""

from knowledge_agent.cli import main

if __name__ == "__main__":
    main()
