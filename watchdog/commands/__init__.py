"""One module per sub-command; each has ``register(subparsers)`` (cheap imports only)."""

COMMANDS = ("check", "record", "replay", "rules", "run", "status", "train", "alerts",
            "silence")
