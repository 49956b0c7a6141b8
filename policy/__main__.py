"""tpuray's CrossGuard policy pack: ``pulumi preview --policy-pack policy``.

The rules live in ``tpuray.components.review.rules`` (pure functions, also run by ``tpuray plan``); this file
only builds the pack, because constructing a ``PolicyPack`` starts the analyzer server.
"""

from pulumi_policy import EnforcementLevel, Policy, PolicyPack

from tpuray.components.review.policy_pack import POLICIES, STACK_POLICIES

policies: list[Policy] = [*POLICIES, *STACK_POLICIES]
PolicyPack(name="tpuray", enforcement_level=EnforcementLevel.MANDATORY, policies=policies)
