-- Argo CD resource health check for specdecode.io/SpecDecodeDeployment.
-- Install it in argocd-cm (see docs/gitops.md):
--   resource.customizations.health.specdecode.io_SpecDecodeDeployment: |
--     <this file>
-- Conditions (kstatus-compatible): Ready, Progressing, Degraded, SpecValid, Paused; status.observedGeneration.
local hs = {}

local function condition(t)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == t then
      return c
    end
  end
  return nil
end

local function text(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local specValid = condition("SpecValid")
if specValid ~= nil and specValid.status == "False" then
  hs.status = "Degraded"
  hs.message = text(specValid, "The spec is invalid")
  return hs
end

local paused = condition("Paused")
if paused ~= nil and paused.status == "True" then
  hs.status = "Suspended"
  hs.message = text(paused, "Reconciliation is paused")
  return hs
end

local degraded = condition("Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = text(degraded, "Degraded")
  return hs
end

local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = text(ready, "Ready")
  return hs
end

local progressing = condition("Progressing")
hs.status = "Progressing"
hs.message = text(progressing, text(ready, "Waiting for the workloads to become ready"))
return hs
