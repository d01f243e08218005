"""Time limits of the chaos scenarios, derived from the settings of the operator under test plus stated slack.

The replicas run the chart's arguments and environment (chaoslib.chart_operator_command); the chart sets no
election timings, so the Lease settings are ``OperatorConfig``'s as the chart's environment yields them.
"""

from __future__ import annotations

from specdecode_operator.config import OperatorConfig
from tests.chaos.chaoslib import chart_operator_command

SETTINGS = OperatorConfig.from_env(chart_operator_command()[1])

# A standby takes the Lease once it has seen one record unchanged for lease_duration by its own clock, and it
# looks every retry_period (specdecode_operator/leadership.py): taken at most lease_duration + retry_period after
# the holder's last renewal, which is no later than the moment it was killed or lost the API server.
TAKEOVER_S = SETTINGS.lease_duration_seconds + SETTINGS.retry_period_seconds

# The new leader then starts kopf, lists every watched kind and gives the waiting CRs their first pass; the test
# polls every 0.5 s. Measured on an idle 2-core machine: 0.4-2.8 s (bench/results/chaos.md, "leader SIGKILL x6").
# That work is CPU-bound and shares the cores with the emulator, the standby and, under `make test`, the other test
# worker's SGLang engines (up to four processes of a TP-4 self-test at full load on the 2 cores): allowed to run at
# a quarter of its idle speed, 2.8 s x 4 = 11 s (6 s, half speed, was exceeded once by 0.04 s with the engine tier
# and another test run beside it).
START_UP_SLACK_S = 11.0

# Leader SIGKILLed (or fenced by a fault and restarted) -> a replica holds the Lease and every CR has converged.
FAILOVER_LIMIT_S = TAKEOVER_S + START_UP_SLACK_S
