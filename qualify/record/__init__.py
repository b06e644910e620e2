"""Record stage: results.json and README.md from a record's trial files; checking and merging records.

assemble  trials + plan + lock -> Results; writes results.json, README.md and the plots
check     recompute everything a record claims and list every disagreement
evidence  what a trial file says about itself, checked against the plan and lock
merge     records of one plan from several devices or hosts -> one record

Presentation (README text, plots) lives in qualify.render, which never imports this package.
"""
