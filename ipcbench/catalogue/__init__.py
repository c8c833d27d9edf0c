"""The catalogue: facts both sides of the house read, at its bottom (it imports nothing of ipcbench but
results.py's row vocabulary). The methods and their facts (methods.py), the suites and what their rows are
(suites.py), the link rates (links.py). The measuring side (core/, suites/) builds on these tables; the
reading side (record/, report/, check/) reads them without importing any measuring code. docs/architecture.md.
"""
