"""``python -m goondan`` runs the CLI."""

from goondan.cli import main

main()
