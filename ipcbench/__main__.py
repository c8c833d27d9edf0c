"""`python -m ipcbench` is the same as the `ipcbench` console script."""

from ipcbench.cli import main

raise SystemExit(main())
