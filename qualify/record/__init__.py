"""Record stage: results.json, README.md and the plots from a record's trial files; checking and merging records.

assemble  trials + plan + lock -> Results; writes results.json, README.md and the plots
plots     the record's SVG plots (matplotlib), drawn from the raw samples, and their check
render    Results + plan -> README.md text (jinja2 template, formatting filters)
check     recompute everything a record claims and list every disagreement
merge     records of one plan from several devices or hosts -> one record
"""
