{{/* Names and labels (nameOverride, fullnameOverride: every name the chart makes uses these). */}}
{{- define "kubescribe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubescribe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
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
{{- define "kubescribe.webhooks" -}}
{{- or .Values.audit.enabled .Values.admission.enabled -}}
{{- end -}}

{{- define "kubescribe.webhookArgs" -}}
{{- $operator := eq .Values.certificates.source "operator" -}}
{{- if .Values.audit.enabled }}
- --audit-addr=:{{ .Values.audit.port }}
{{- if not $operator }}
- --audit-tls-cert=/etc/kubescribe/tls/tls.crt
- --audit-tls-key=/etc/kubescribe/tls/tls.key
- --audit-client-ca=/etc/kubescribe/tls/ca.crt
{{- end }}
- --audit-route={{ .Values.audit.route }}
{{- end }}
{{- if .Values.admission.enabled }}
- --webhook-addr=:{{ .Values.admission.port }}
{{- if not $operator }}
- --webhook-tls-cert=/etc/kubescribe/tls/tls.crt
- --webhook-tls-key=/etc/kubescribe/tls/tls.key
- --webhook-client-ca=/etc/kubescribe/tls/ca.crt
{{- end }}
{{- if .Values.admission.allowAnonymous }}
- --webhook-allow-anonymous
{{- end }}
{{- if .Values.admission.changes }}
- --changes-webhook-url={{ .Values.admission.url | default (printf "https://%s.%s.svc:%v" (include "kubescribe.webhookService" .) .Release.Namespace .Values.admission.port) | trimSuffix "/validate-commitrequests" }}/validate-changes
{{- if not $operator }}
- --changes-webhook-ca=/etc/kubescribe/tls/ca.crt
{{- end }}
{{- /* One configuration per release, deleted with the release's ClusterRole (uninstall). */}}
- --changes-webhook-name={{ include "kubescribe.changesWebhook" . }}
- --owner-cluster-role={{ include "kubescribe.fullname" . }}
{{- end }}
{{- end }}
{{- if and $operator (eq (include "kubescribe.webhooks" .) "true") }}
{{- $fullname := include "kubescribe.fullname" . }}
- --webhook-cert-secret={{ $fullname }}-webhook-certs
{{- range (include "kubescribe.webhookHosts" . | fromJsonArray) }}
- --webhook-cert-host={{ . }}
{{- end }}
- --webhook-cert-validity={{ mul .Values.certificates.validityDays 86400 }}
- --webhook-ca-validity={{ mul .Values.certificates.caValidityDays 86400 }}
{{- if .Values.admission.enabled }}
- --webhook-ca-inject={{ $fullname }}-commitrequests
{{- end }}
- --apiserver-config-secret={{ $fullname }}-apiserver-config
- --apiserver-files=/etc/kubescribe/apiserver
{{- if .Values.audit.enabled }}
- --audit-webhook-url={{ include "kubescribe.auditURL" . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* DNS names and addresses of the serving certificate: the Service's, plus extraSANs. */}}
{{- define "kubescribe.webhookHosts" -}}
{{- $svc := include "kubescribe.webhookService" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- concat $hosts .Values.certificates.extraSANs | uniq | toJson -}}
{{- end -}}

{{- define "kubescribe.webhookPorts" -}}
{{- if .Values.audit.enabled }}
- name: audit
  containerPort: {{ .Values.audit.port }}
  protocol: TCP
  {{- with .Values.audit.hostPort }}
  hostPort: {{ . }}
  {{- end }}
{{- end }}
{{- if .Values.admission.enabled }}
- name: admission
  containerPort: {{ .Values.admission.port }}
  protocol: TCP
  {{- with .Values.admission.hostPort }}
  hostPort: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}

{{- define "kubescribe.webhookMounts" -}}
{{- if eq (include "kubescribe.webhooks" .) "true" }}
{{- if eq .Values.certificates.source "operator" }}
- name: apiserver-files
  mountPath: /etc/kubescribe/apiserver
  readOnly: true
{{- else }}
- name: webhook-tls
  mountPath: /etc/kubescribe/tls
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{- define "kubescribe.webhookVolumes" -}}
{{- if eq (include "kubescribe.webhooks" .) "true" }}
{{- if eq .Values.certificates.source "operator" }}
- name: apiserver-files
  configMap:
    name: {{ include "kubescribe.fullname" . }}-apiserver-files
{{- else }}
- name: webhook-tls
  secret:
    secretName: {{ include "kubescribe.fullname" . }}-webhook-tls
{{- end }}
{{- end }}
{{- end -}}

{{/* The change webhook's ValidatingWebhookConfiguration, registered by the operator. */}}
{{- define "kubescribe.changesWebhook" -}}
{{- printf "%s-attribution" (include "kubescribe.fullname" .) -}}
{{- end -}}

{{- define "kubescribe.webhookService" -}}
{{- printf "%s-webhooks" (include "kubescribe.fullname" .) -}}
{{- end -}}

{{- define "kubescribe.auditURL" -}}
{{- if .Values.audit.url -}}
{{- .Values.audit.url -}}
{{- else -}}
{{- printf "https://%s.%s.svc:%v/audit-webhook/%s" (include "kubescribe.webhookService" .) .Release.Namespace .Values.audit.port .Values.audit.route -}}
{{- end -}}
{{- end -}}
