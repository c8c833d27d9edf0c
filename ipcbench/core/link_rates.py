"""The link rates now live in the catalogue (ipcbench/catalogue/links.py), which the reading side reads too;
this name stays for the measuring side's imports (core/topology.py). One implementation: re-exported."""

from ipcbench.catalogue.links import (CONVENTION, LINK_KINDS, NVLINK, NVML_ENUM, PCIE, PLANNED_KINDS, LinkRates,
                                      NvlinkGen, PcieGen, link_rates, rates_of_entry)

__all__ = ["CONVENTION", "LINK_KINDS", "NVLINK", "NVML_ENUM", "PCIE", "PLANNED_KINDS", "LinkRates", "NvlinkGen",
           "PcieGen", "link_rates", "rates_of_entry"]
