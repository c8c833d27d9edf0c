"""ipcbench: measure CUDA IPC bandwidth and latency between the processes of one node."""

__version__ = "0.1.0"
