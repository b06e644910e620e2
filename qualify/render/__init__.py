"""Renderers: turn computed results into output; none of them computes anything.

readme          Results + plan -> README.md text (jinja2 templates under templates/)
plots           the record's SVG plots (matplotlib), drawn from the raw samples, and their check
kernels_text    the kernel inventory and second timer in words
tolerance_text  a case's fidelity bound in words
summary         the summary line of a record
terminal        what `plan check` and `run` print
plain           plain-text helpers shared by the above

This package imports results, evaluate and plan, never qualify.record (which imports it) nor qualify.run.
"""
