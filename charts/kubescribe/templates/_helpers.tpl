{{/* Names and labels. */}}
{{- define "kubescribe.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubescribe.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubescribe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubescribe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kubescribe.labels" -}}
{{ include "kubescribe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kubescribe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kubescribe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kubescribe.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
API groups the cluster serves (from .Capabilities; `helm template` uses Helm's built-in list),
without the core group, plus rbac.extraApiGroups; sorted, unique.
*/}}
{{- define "kubescribe.apiGroups" -}}
{{- $groups := list -}}
{{- range $gv := .Capabilities.APIVersions -}}
{{- $parts := splitList "/" $gv -}}
{{- if and (gt (len $parts) 1) (not (regexMatch "^v[0-9]+((alpha|beta)[0-9]+)?$" (first $parts))) -}}
{{- $groups = append $groups (first $parts) -}}
{{- end -}}
{{- end -}}
{{- $groups = concat $groups .Values.rbac.extraApiGroups | uniq | sortAlpha -}}
{{- toJson $groups -}}
{{- end -}}

{{/* Audit receiver and admission webhook pieces of the Deployment (templates/webhooks.yaml). */}}
{{- define "kubescribe.webhookArgs" -}}
{{- end -}}
{{- define "kubescribe.webhookPorts" -}}
{{- end -}}
{{- define "kubescribe.webhookMounts" -}}
{{- end -}}
{{- define "kubescribe.webhookVolumes" -}}
{{- end -}}
