"""tpuray.components.planning: pure planners, stack config -> plain data.

Node pools per slice pool (:mod:`.node_pools`), KubeRay RayCluster/RayJob manifests (:mod:`.kuberay`), the checks
KubeRay and the TPU webhook apply to them (:mod:`.kuberay_checks`), the training entrypoint (:mod:`.entrypoint`)
and the one config -> KubeRay parameters mapping (:mod:`.from_config`).

May import: :mod:`tpuray.components.topology`, :mod:`tpuray.components.names`, :mod:`tpuray.components.config` and
each other. Never Pulumi, never :mod:`tpuray.components.review`.
"""
