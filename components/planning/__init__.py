"""tpuray.components.planning: pure planners, stack config -> plain data.

Node pools per slice pool (:mod:`.node_pools`), KubeRay RayCluster/RayJob manifests (:mod:`.kuberay`), the checks
KubeRay and the TPU webhook apply to them (:mod:`.kuberay_checks`), the training entrypoint (:mod:`.entrypoint`)
and the one config -> stack plan mapping (:mod:`.stack_plan`, every component's data).

May import: :mod:`tpuray.components.topology`, :mod:`tpuray.components.names`, :mod:`tpuray.components.config` and
each other. Never Pulumi, never :mod:`tpuray.components.review`.
"""
