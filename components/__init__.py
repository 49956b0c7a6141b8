"""tpuray.components: the Pulumi components for TPU slices on GKE with KubeRay and Kueue, and beneath them one
folder per job.

- This level: the components (:mod:`.gke_cluster`, :mod:`.tpu_slice_pool`, :mod:`.ray_cluster`, :mod:`.kueue`,
  :mod:`.tpu_webhook`, :mod:`.stack_monitoring`) and the entry points: :mod:`.stack` (the program's wiring),
  :mod:`.stack_config` (its config read) and :mod:`.cli` (the ``tpuray`` command).
- :mod:`.catalog`: TPU facts, names, ports, metric names, limits, images and price arithmetic. No Pulumi, no
  pydantic; all that ``tpuray.workloads`` may import besides the config.
- :mod:`.config`: the typed stack config (pydantic), its value types and its readers.
- :mod:`.planning`: the pure plan, config -> plain data that the components declare. No Pulumi.
- Tools the Pulumi program never imports: :mod:`.review` (plan, diff, policy rules, port check), :mod:`.doctor`,
  :mod:`.pricing` (price table, ``tpuray compare``).

tests/test_layers.py holds these rules. Nothing here imports a submodule, so
``from tpuray.components.catalog.topology import TpuSlice`` loads no Pulumi.
"""
