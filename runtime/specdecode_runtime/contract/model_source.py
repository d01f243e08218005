"""Where a model's weights come from: a path, a PersistentVolumeClaim or the Hugging Face Hub.

``spec.target.model`` and ``spec.draft.model`` take one of three forms, and this module is the one place that
parses them and names the paths both sides agree on:

* an absolute path (``/models/GLM-5``): handed to SGLang as it is (the runtime also takes any other string without
  ``://`` as a path, for a runtime.yaml written by hand; admission refuses those in a SpecDecodeDeployment, with a
  hint, see ``api/rules.py``);
* ``pvc://CLAIM/PATH``: the claim is mounted read-only at ``PVC_MOUNT_ROOT/CLAIM`` in every runtime pod (leader and
  workers alike), and SGLang gets ``PVC_MOUNT_ROOT/CLAIM/PATH``;
* ``hf://ORG/NAME[@REVISION]``: an init container fetches the snapshot once into the hub cache volume mounted at
  ``MODEL_CACHE_DIR`` (the Hugging Face ``HF_HOME`` layout, so a volume filled by ``hf download`` elsewhere is
  reused as it is); the runtime then runs offline and gives SGLang the snapshot's directory.

The regular expressions are RE2-compatible and free of backslashes (they sit in CEL string literals): the same
strings are the CRD's CEL rules, so the API server, ``specdecode validate`` and the runtime agree on every
``pvc://`` and ``hf://`` form. Standard library only (the operator image has no hub client).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PVC_SCHEME = "pvc://"
HF_SCHEME = "hf://"
PVC_MOUNT_ROOT = "/mnt/pvc"  # pvc://CLAIM/PATH -> /mnt/pvc/CLAIM/PATH
MODEL_CACHE_DIR = "/var/cache/specdecode/models"  # HF_HOME of the fetch and of the runtime
HUB_CACHE_DIR = f"{MODEL_CACHE_DIR}/hub"  # HF_HUB_CACHE: HF_HOME's own default layout
DEFAULT_REVISION = "main"

# A claim name is a DNS-1123 subdomain; path segments are plain names (no '.' or '..' segments, no hidden files), so
# a model path can never leave its claim.
CLAIM = "[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
SEGMENT = r"[A-Za-z0-9_][-A-Za-z0-9_.]*"
PVC_PATTERN = rf"^pvc://{CLAIM}(/{SEGMENT})*/?$"
# Hub repository ids are ORG/NAME; a revision is a branch, a tag or a commit (refs/pr/N included), in segments that
# cannot be '.' or '..' (the offline lookup joins it into a path under the cache).
REPO_PART = r"[A-Za-z0-9][-A-Za-z0-9_.]*"
REVISION = rf"{SEGMENT}(/{SEGMENT})*"
HF_PATTERN = rf"^hf://{REPO_PART}/{REPO_PART}(@{REVISION})?$"
SCHEME_PATTERN = r"^[A-Za-z][-A-Za-z0-9+.]*://"

FORMS = "a path, pvc://CLAIM/PATH or hf://ORG/NAME[@REVISION]"


class ModelSourceError(ValueError):
    """A model string that is none of the accepted forms; the message names the form that was expected."""


@dataclass(frozen=True)
class PathSource:
    path: str

    def local_path(self) -> str:
        return self.path


@dataclass(frozen=True)
class PvcSource:
    claim: str
    path: str  # inside the claim, without leading or trailing '/'; empty: the claim's root

    def mount_path(self) -> str:
        return f"{PVC_MOUNT_ROOT}/{self.claim}"

    def local_path(self) -> str:
        return f"{self.mount_path()}/{self.path}" if self.path else self.mount_path()


@dataclass(frozen=True)
class HubSource:
    repo_id: str
    revision: str  # DEFAULT_REVISION when the string names none

    @property
    def uri(self) -> str:
        return f"{HF_SCHEME}{self.repo_id}@{self.revision}"


ModelSource = PathSource | PvcSource | HubSource


def parse(model: str, field: str = "model") -> ModelSource:
    """The source ``model`` names; :class:`ModelSourceError` naming ``field`` and the accepted forms otherwise."""
    if model.startswith(PVC_SCHEME):
        if not re.match(PVC_PATTERN, model):
            raise ModelSourceError(
                f"{field}: {model!r} is not pvc://CLAIM/PATH (CLAIM a PersistentVolumeClaim name, "
                "PATH segments of letters, digits, '-', '_' and '.', none starting with '.')"
            )
        claim, _, path = model[len(PVC_SCHEME) :].partition("/")
        return PvcSource(claim, path.strip("/"))
    if model.startswith(HF_SCHEME):
        if not re.match(HF_PATTERN, model):
            raise ModelSourceError(
                f"{field}: {model!r} is not hf://ORG/NAME[@REVISION] (a Hugging Face Hub "
                "repository id, optionally a branch, tag or commit after '@')"
            )
        repo_id, _, revision = model[len(HF_SCHEME) :].partition("@")
        return HubSource(repo_id, revision or DEFAULT_REVISION)
    if re.match(SCHEME_PATTERN, model):
        raise ModelSourceError(f"{field}: {model!r} has a scheme that is not supported; use {FORMS}")
    return PathSource(model)


def hub_sources(*models: str) -> list[HubSource]:
    """The distinct hub sources among ``models``, in order (a target and a draft from one repository fetch once)."""
    found: list[HubSource] = []
    for model in models:
        source = parse(model)
        if isinstance(source, HubSource) and source not in found:
            found.append(source)
    return found


def pvc_claims(*models: str) -> list[str]:
    """The distinct claims among ``models``, in order: one read-only volume each."""
    claims: list[str] = []
    for model in models:
        source = parse(model)
        if isinstance(source, PvcSource) and source.claim not in claims:
            claims.append(source.claim)
    return claims
