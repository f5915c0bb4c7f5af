{{/* The name of every object: the release name. */}}
{{- define "convoy.fullname" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels selecting the scheduler's pods. */}}
{{- define "convoy.selectorLabels" -}}
app.kubernetes.io/name: convoy-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "convoy.labels" -}}
{{ include "convoy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The container image. */}}
{{- define "convoy.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The leader-election Lease, in the release namespace: the release name
(the lease Role grants that name only). */}}
{{- define "convoy.leaseName" -}}
{{ include "convoy.fullname" . }}
{{- end -}}

{{/* PromQL label matchers selecting the scheduler's series: those the
ServiceMonitor scrapes (job = the release name, namespace = the release's),
or prometheusRule.selector. */}}
{{- define "convoy.promSelector" -}}
{{- if .Values.prometheusRule.selector -}}
{{ .Values.prometheusRule.selector }}
{{- else -}}
job="{{ include "convoy.fullname" . }}",namespace="{{ .Release.Namespace }}"
{{- end -}}
{{- end -}}
