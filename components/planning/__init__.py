"""tpuray.components.planning: the pure plan, stack config -> plain data.

:mod:`.stack_plan` maps one config to every component's data (:mod:`.component_args`): one plan per slice pool
(:mod:`.pool_plan`: its scheduling contract, :mod:`.scheduling`, its node pools, :mod:`.node_pools`, its worker
group and its Kueue flavor and quota), KubeRay manifests (:mod:`.kuberay`) and the checks KubeRay and the TPU
webhook apply to them (:mod:`.kuberay_checks`), Kueue objects (:mod:`.kueue`), the NetworkPolicy, the dashboard,
startup and the entrypoint.

May import the catalog, the config and each other; never Pulumi, never the tools (review, doctor, pricing's
commands).
"""
