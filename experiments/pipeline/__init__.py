"""The stages of a run, their ledger, the run layout of a work directory and the stage worker."""
