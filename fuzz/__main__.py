import sys

from fuzz.run.interrupts import exit_now, hold_early_signals

hold_early_signals(sys.argv[1:])  # before the imports below: a signal during them is kept for the run

from fuzz.cli import main  # noqa: E402

exit_now(main())
