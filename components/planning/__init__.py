"""tpuray.components.planning: the pure plan, stack config -> plain data.

:mod:`.stack_plan` maps one config to every component's data (:mod:`.component_args`): node pools per slice pool
(:mod:`.node_pools`), KubeRay manifests (:mod:`.kuberay`) and the checks KubeRay and the TPU webhook apply to them
(:mod:`.kuberay_checks`), Kueue objects (:mod:`.kueue`), the pool's scheduling contract (:mod:`.scheduling`), the
NetworkPolicy, the dashboard, startup and the entrypoint.

May import the catalog, the config and each other; never Pulumi, never the tools (review, doctor, pricing's
commands).
"""
