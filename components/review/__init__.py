"""tpuray.components.review: what a platform team reviews in a pull request, without a cloud account.

The plan engine that runs the real Pulumi program under the SDK's mock engine (:mod:`.engine`), the plan and its
files (:mod:`.plan`, :mod:`.render`, :mod:`.svg`, :mod:`.pool_views`), ``tpuray diff`` (:mod:`.diff`,
:mod:`.git_refs`, :mod:`.replacement_fields`), the policy rules and their CrossGuard pack (:mod:`.rule_types`
shared by :mod:`.policy_rules`, :mod:`.security_rules` and :mod:`.maintenance_rules`, gathered by :mod:`.rules`;
:mod:`.policy_pack`), and the ``plan``/``diff`` commands (:mod:`.commands`).

May import anything in :mod:`tpuray.components`. Nothing outside this package imports it except the CLI and the
``policy/`` pack: the Pulumi program (``infra/``) never does.
"""
