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
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The leader-election Lease: only the replica holding it acts (one replica or many, and during rollouts). */}}
{{- define "specdecode-operator.leaseName" -}}
{{- default (include "specdecode-operator.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The RBAC rules, generated from specdecode_operator.rbac into files/rbac-rules.yaml. */}}
{{- define "specdecode-operator.rbacRules" -}}
{{- .Files.Get "files/rbac-rules.yaml" | fromYaml | toJson }}
{{- end }}
