"""Record stage: results.json and README.md from a record's trial files; checking and merging records.

assemble  trials + plan + lock -> Results; writes results.json and README.md
render    Results + plan -> README.md text (jinja2 template, formatting filters)
check     recompute everything a record claims and list every disagreement
merge     records of one plan from several devices or hosts -> one record
"""
