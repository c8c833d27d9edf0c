"""The judging layer: a recorded run's rows and evidence held against expectations, baselines and each other.

Below report/ (which renders what is judged here) and check/ (the gate: its command, inputs, outputs and
plan); above record/, evidence/ and the catalogue. It holds row matching, validity, ceilings, significance,
compare's engine, check's judge with its expectations, evidence rules and findings, the one row identity
(row_key.RowKey) and the one row verdict vocabulary (row_verdict.RowVerdict). docs/architecture.md.
"""
