-- Argo CD resource health check for specdecode.io/SpecDecodeDeployment.
-- Install it in argocd-cm (see docs/gitops.md):
--   resource.customizations.health.specdecode.io_SpecDecodeDeployment: |
--     <this file>
-- Conditions (kstatus-compatible): Ready, Progressing, Degraded, SpecValid, Paused, Stalled; status.observedGeneration.
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

-- First match wins: an invalid spec outranks a pause, a pause outranks degradation, and Ready is last.
local rules = {
  {"SpecValid", "False", "Degraded", "The spec is invalid"},
  {"Paused", "True", "Suspended", "Reconciliation is paused"},
  {"Degraded", "True", "Degraded", "Degraded"},
  {"Ready", "True", "Healthy", "Ready"},
}
for _, rule in ipairs(rules) do
  local c = condition(rule[1])
  if c ~= nil and c.status == rule[2] then
    hs.status = rule[3]
    hs.message = text(c, rule[4])
    return hs
  end
end

local ready = condition("Ready")
local progressing = condition("Progressing")
hs.status = "Progressing"
hs.message = text(progressing, text(ready, "Waiting for the workloads to become ready"))
return hs
