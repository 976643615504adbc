{{/* The prefix of every object name: "gpuwarden" for a release of that name. */}}
{{- define "gpuwarden.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The labels of deploy/kubernetes, plus Helm's own on object metadata. */}}
{{- define "gpuwarden.labels" -}}
app.kubernetes.io/part-of: gpuwarden
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpuwarden.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{- define "gpuwarden.agentName" -}}{{ include "gpuwarden.fullname" . }}-agent{{- end -}}
{{- define "gpuwarden.serverName" -}}{{ include "gpuwarden.fullname" . }}-server{{- end -}}
{{- define "gpuwarden.postgresName" -}}{{ include "gpuwarden.fullname" . }}-postgres{{- end -}}
{{- define "gpuwarden.agentTokenSecret" -}}{{ default (printf "%s-agent-token" (include "gpuwarden.fullname" .)) .Values.agent.tokenSecret }}{{- end -}}
{{- define "gpuwarden.tlsSecret" -}}{{ default (printf "%s-server-tls" (include "gpuwarden.fullname" .)) .Values.server.tlsSecret }}{{- end -}}
{{- define "gpuwarden.dbSecret" -}}{{ default (printf "%s-db" (include "gpuwarden.fullname" .)) .Values.database.existingSecret }}{{- end -}}
{{- define "gpuwarden.postgresSecret" -}}{{ default (printf "%s-postgres" (include "gpuwarden.fullname" .)) .Values.postgres.passwordSecret }}{{- end -}}
{{/* The Service name agents use, which the server's certificate must name. */}}
{{- define "gpuwarden.serverHost" -}}{{ include "gpuwarden.serverName" . }}.{{ .Release.Namespace }}.svc{{- end -}}
