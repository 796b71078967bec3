"""What each mode's routes need beyond validation: checks before a run starts, and the run's answer in the
mode's wire shape (running graphs is the run engine's, in `runs/`)."""
