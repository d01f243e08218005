{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "specdecode-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; the release name alone when it already contains the chart name. */}}
{{- define "specdecode-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "specdecode-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator's pods (its Deployment, Service, PodDisruptionBudget, ServiceMonitor, and the
control-port NetworkPolicy the operator renders for every SpecDecodeDeployment, which admits pods labelled
app.kubernetes.io/name=specdecode-operator). Fixed: nameOverride and fullnameOverride rename objects, never change
what selects what. */}}
{{- define "specdecode-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "specdecode-operator.labels" -}}
helm.sh/chart: {{ include "specdecode-operator.chart" . }}
{{ include "specdecode-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specdecode
{{- end }}

{{- define "specdecode-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specdecode-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "specdecode-operator.image" -}}
{{- include "specdecode-operator.fromRegistry" (list . (printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag))) }}
{{- end }}

{{/* (list $ IMAGE): IMAGE pulled from global.imageRegistry when that is set. The registry IMAGE names (its part
before the first "/" where that has a "." or ":" or is localhost, as Docker reads a reference) is replaced; an
image of Docker Hub's, which names none, gets the registry in front. */}}
{{- define "specdecode-operator.fromRegistry" -}}
{{- $root := index . 0 }}
{{- $image := index . 1 }}
{{- $registry := trimSuffix "/" ((default (dict) $root.Values.global).imageRegistry | default "") }}
{{- if $registry }}
{{- $parts := splitList "/" $image }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $image = join "/" (rest $parts) }}
{{- end }}
{{- printf "%s/%s" $registry $image }}
{{- else }}
{{- $image }}
{{- end }}
{{- end }}

{{/* The leader-election Lease: only the replica holding it acts (one replica or many, and during rollouts). */}}
{{- define "specdecode-operator.leaseName" -}}
{{- default (include "specdecode-operator.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The RBAC rules, generated from specdecode_operator.rbac into files/rbac-rules.yaml. */}}
{{- define "specdecode-operator.rbacRules" -}}
{{- .Files.Get "files/rbac-rules.yaml" | fromYaml | toJson }}
{{- end }}

{{/* "true" when the prometheus-operator kind (ServiceMonitor, PrometheusRule) may be rendered: the cluster serves
monitoring.coreos.com/v1/<kind> (helm install/upgrade ask it; `helm template` knows only --api-versions), or
metrics.assumeMonitoringAPI says so. Without the CRDs, an object of that kind would fail the whole install. */}}
{{- define "specdecode-operator.monitoringAPI" -}}
{{- $root := index . 0 }}
{{- if or $root.Values.metrics.assumeMonitoringAPI ($root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" (index . 1))) -}}
true
{{- end }}
{{- end }}

{{/* "true" when the ServiceMonitor is rendered. */}}
{{- define "specdecode-operator.serviceMonitor" -}}
{{- if and .Values.metrics.enabled .Values.metrics.serviceMonitor.enabled (include "specdecode-operator.monitoringAPI" (list . "ServiceMonitor")) -}}
true
{{- end }}
{{- end }}

{{/* "true" when the chart makes the scraper's credentials: a secure ServiceMonitor without a Secret of the user's. */}}
{{- define "specdecode-operator.scraperToken" -}}
{{- if and (include "specdecode-operator.serviceMonitor" .) .Values.metrics.secure (not .Values.metrics.serviceMonitor.authorization.secretName) -}}
true
{{- end }}
{{- end }}

{{/* The ServiceAccount Prometheus scrapes the operator as (its token Secret carries the same name + "-token"). */}}
{{- define "specdecode-operator.scraperName" -}}
{{- printf "%s-metrics-scraper" (include "specdecode-operator.fullname" .) }}
{{- end }}

{{/* An alert's runbook: the section of docs/runbooks.md named after it (GitHub's anchor: the heading in lower case). */}}
{{- define "specdecode-operator.runbook" -}}
{{- printf "%s#%s" (index . 0).Values.metrics.prometheusRule.runbookBaseURL (lower (index . 1)) }}
{{- end }}
