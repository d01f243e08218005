"""specdecode operator: the SpecDecodeDeployment API, its renderer, the kopf operator and the step autotuner."""

__version__ = "0.1.0"
