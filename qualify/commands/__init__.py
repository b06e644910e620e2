"""Commands: what each `qualify` command does, below the click face (qualify/cli.py).

check      plan check and plan freeze
changed    which frozen inputs changed since the lock
doctor     what this host can run, and why not
refreeze   replacing a lock whose inputs changed, naming the records it orphans
scaffold   plan new: a skeleton plan for a kernel or library pair
libcheck   a plan's shared libraries against the host and the declared symbols
pipeline   run and compare: the frozen plan to the record and the exit code
probe      one launch per case and arm, to choose a fidelity bound before freezing
fleet      one worker process per device, merged into one record
"""
