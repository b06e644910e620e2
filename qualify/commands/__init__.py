"""Commands: what each `qualify` command does, below the click face (qualify/cli/).

check      plan check and plan freeze
changed    which frozen inputs changed since the lock
doctor     what this host can run, and why not
refreeze   replacing a lock whose inputs changed, naming the records it orphans
scaffold   plan new: a skeleton plan for a kernel or library pair
golden     golden make: a plan's golden from a float64 reference
rehearse   plan rehearse: the fidelity gate on the CPU, against a simulated candidate
pipeline   run and compare: the frozen plan to the record and the exit code
probe      one launch per case and arm, to choose a fidelity bound before freezing
summary    the CI summary of a record that checks
history    a protocol's records across commits, as one static HTML page
gate       every protocol a change touches, each arm at the base revision against the working tree
           (gate_plans: the plans it derives; gate_tree: the two trees, side by side)

The processes `run` and `compare` start are `qualify.procs`'s; what a command needs that is no
command lives in the layer it belongs to (a kernel's declaration in `build`, NVML in `run`).
"""
