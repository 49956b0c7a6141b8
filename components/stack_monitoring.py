"""``StackMonitoring``: the stack's Cloud Monitoring dashboard and its idle-slice alert policy.

Declares what :mod:`tpuray.components.planning.dashboard` planned: one ``gcp.monitoring.Dashboard`` (the plan's
JSON as ``dashboard_json``) and, when the idle alert is on, one ``gcp.monitoring.AlertPolicy`` with a PromQL
condition (``condition_prometheus_query_language``) over Managed Prometheus' data.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from tpuray.components.planning.component_args import StackMonitoringArgs

__all__ = ["ALERT_EVALUATION_SECONDS", "StackMonitoring", "StackMonitoringArgs"]

ALERT_EVALUATION_SECONDS = 60
"""How often the alert's query runs; the API wants a positive multiple of 30 s (pulumi-gcp
``AlertPolicyConditionConditionPrometheusQueryLanguageArgs.evaluation_interval``)."""


class StackMonitoring(pulumi.ComponentResource):
    """A dashboard with one row per slice pool and the held-but-idle slice alert."""

    dashboard: gcp.monitoring.Dashboard
    alert_policy: gcp.monitoring.AlertPolicy | None

    def __init__(self, name: str, args: StackMonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpuray:index:StackMonitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.dashboard = gcp.monitoring.Dashboard(
            f"{name}-dashboard", project=args.project, dashboard_json=args.dashboard.json_text(), opts=child
        )
        self.alert_policy = None
        alert = args.idle_alert
        if alert is not None:
            self.alert_policy = gcp.monitoring.AlertPolicy(
                f"{name}-idle-slice",
                project=args.project,
                display_name=alert.display_name,
                combiner="OR",
                severity="WARNING",
                conditions=[
                    gcp.monitoring.AlertPolicyConditionArgs(
                        display_name="TPU slice held but idle",
                        condition_prometheus_query_language=(
                            gcp.monitoring.AlertPolicyConditionConditionPrometheusQueryLanguageArgs(
                                query=alert.query,
                                duration=f"{alert.duration_seconds}s",
                                evaluation_interval=f"{ALERT_EVALUATION_SECONDS}s",
                            )
                        ),
                    )
                ],
                documentation=gcp.monitoring.AlertPolicyDocumentationArgs(
                    content=alert.documentation, mime_type="text/markdown"
                ),
                notification_channels=list(alert.notification_channels),
                user_labels=dict(args.user_labels or {}),
                opts=child,
            )
        self.register_outputs(
            {
                "dashboard": self.dashboard.id,
                "alert_policy": self.alert_policy.name if self.alert_policy is not None else None,
            }
        )
