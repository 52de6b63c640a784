{{/* The chart's version and appVersion (a test keeps them equal to Chart.yaml's). */}}
{{- define "troupe-server.version" -}}
0.1.0
{{- end -}}

{{- define "troupe-server.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "troupe-server.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "troupe-server.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "troupe-server.selectorLabels" -}}
app.kubernetes.io/name: {{ include "troupe-server.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "troupe-server.labels" -}}
{{ include "troupe-server.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default (include "troupe-server.version" .) | quote }}
app.kubernetes.io/component: control-plane
app.kubernetes.io/part-of: troupe
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "troupe-server.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "troupe-server.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "troupe-server.secretName" -}}
{{- default (include "troupe-server.fullname" .) .Values.secret.name -}}
{{- end -}}

{{- define "troupe-server.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default (include "troupe-server.version" .)) -}}
{{- end -}}
