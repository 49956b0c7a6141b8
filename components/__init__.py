"""tpuray.components: Pulumi components for TPU slices, GKE and KubeRay, and the pure logic behind them.

Layers, each importing only the ones above it:

- facts and config, no Pulumi: :mod:`.topology` (the TPU catalog and ``TpuSlice``), :mod:`.names` (every label,
  taint, resource and port), :mod:`.config` (the typed stack config and its rules), :mod:`.project_file`;
- :mod:`.planning`: pure planners, config -> plain data (node pools, KubeRay manifests), no Pulumi;
- the Pulumi components :mod:`.gke_cluster`, :mod:`.tpu_slice_pool`, :mod:`.ray_cluster`, and the program's
  wiring :mod:`.stack` and :mod:`.stack_config`;
- :mod:`.review`: ``tpuray plan``/``diff`` and the policy rules, which the Pulumi program never imports;
- :mod:`.cli`: the ``tpuray`` command.

Kept light on purpose: nothing here imports a submodule, so ``import tpuray.components.topology`` loads no
Pulumi. Import what you need from its module, e.g. ``from tpuray.components.topology import TpuSlice``.
"""
