"""The tpuray Pulumi program: typed config in, one environment out."""

import pulumi

from tpuray.components.stack import deploy
from tpuray.components.stack_config import from_pulumi_config

cfg = from_pulumi_config()  # raises ConfigError, naming every bad key, before any resource exists
stack = deploy(cfg, pulumi.get_stack())

pulumi.export("clusterName", stack.cluster.cluster_name)
pulumi.export("kubeconfig", stack.cluster.kubeconfig)  # secret
pulumi.export("rayClusterName", stack.ray.name)
pulumi.export("rayDashboardService", stack.ray.dashboard_service)
pulumi.export("rayAuthSecret", stack.platform.auth_secret_ref)  # <namespace>/<name> of the Ray token (key auth_token)
pulumi.export("checkpointBucket", stack.platform.bucket_name)
pulumi.export("topology", stack.topology)
