"""What a GPU node has: its GPUs, their memory and processes, and how NVLink joins them.

The node agent registers this inventory with the control plane, and both sides use
`fit` to decide whether a replica's profile can run on a node (and, when it cannot,
to say why in words an operator can act on). The inventory comes from NVML
(`nvml.py`, through nvidia-ml-py) or, where NVML cannot be loaded, from `nvidia-smi`'s
CSV and topology outputs (`smi.py`); `probe.probe` tries them in that order.
"""

from fairgate.inventory.fit import Fit, NoFit, fit
from fairgate.inventory.model import Gpu, Inventory, domains_from_links
from fairgate.inventory.probe import probe

__all__ = ["Fit", "Gpu", "Inventory", "NoFit", "domains_from_links", "fit", "probe"]
