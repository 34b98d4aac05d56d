"""Click subcommands, one module each; ``goondan/cli.py`` imports them lazily."""
