"""tpuray.components: Pulumi components for TPU slices, GKE and KubeRay, and the pure planning logic behind them.

Kept light on purpose: importing ``tpuray.components.topology`` must not import Pulumi, so nothing here
imports a submodule. Import what you need from its module, e.g. ``from tpuray.components.topology import TpuSlice``.
"""
