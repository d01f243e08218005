"""The SpecDecodeDeployment API: typed models are the single source of the CRD, its CEL rules and validation."""

from .models import GROUP, KIND, PLURAL, SHORT_NAME, SINGULAR, VERSION, SpecDecodeDeployment, SpecDecodeDeploymentSpec

__all__ = [
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAME",
    "SINGULAR",
    "VERSION",
    "SpecDecodeDeployment",
    "SpecDecodeDeploymentSpec",
]
