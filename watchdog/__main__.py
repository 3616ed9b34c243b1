"""``python -m watchdog`` runs the command line."""

from watchdog.cli import main

raise SystemExit(main())
