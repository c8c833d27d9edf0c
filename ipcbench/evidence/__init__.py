"""The node's own evidence: what NVML says of each GPU before and after a run (NVLink state, speed and error
counters, PCIe training, clock events, ECC, row remaps, the compute processes on each GPU), so a slow row can be
read against its cause and check can judge the node by more than its numbers (docs/architecture.md, "Node
evidence").

`model.py` is the record (pure: what meta.json's "evidence" holds, written and read by the same classes),
`delta.py` what changed between a host's before and after (pure), `read.py` the one reader of NVML (pynvml
imported inside its functions; `python -m ipcbench.evidence.read` prints this host's snapshot as JSON).
"""
