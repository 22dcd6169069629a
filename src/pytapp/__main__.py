"""``python -m pytapp`` runs the command line."""

from pytapp.cli import main

raise SystemExit(main())
