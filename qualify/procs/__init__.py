"""Every process `qualify run` and `compare` start, in one place.

`invocation`: what the process the user started resolves once (the frozen plan checked, the
libraries bound and checked, the record folder, the device identified) and every child reads
instead of the command line. `runner`: the one worker protocol and the two ways of waiting for
workers (in turn, together). `trials`: on one device, each trial in a fresh process of its own,
the record re-derived once by the parent. `fleet`: `--devices`, one worker process per GPU into
one record. This layer sits between `cli` and `commands`: it starts processes that each carry out
a command, and it decides nothing a command decides (the frozen plan's checks, the verdict:
`commands.pipeline`). The exit code several processes add up to is `qualify.errors.most_severe`.

The workers of the device floor (`run/worker.py`: the isolated preflight and the sanitizer, one
arm's cases at a time) and of the build floor (`build/compile_worker.py`: NVRTC in a confined
process) stay in their layers: those layers start them, and nothing above may be imported there.
"""
