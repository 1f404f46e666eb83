{{/* Names, labels, image and size helpers shared by every template. */}}

{{/* Chart name, truncated to 63 characters (a DNS label). */}}
{{- define "microview.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>", or the release name alone when it already holds the chart name;
truncated to 63 characters. */}}
{{- define "microview.fullname" -}}
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

{{/* Name of one component's objects: "<fullname>-<component>", truncated to 63 characters.
Call as (include "microview.componentName" (list . "agent")). */}}
{{- define "microview.componentName" -}}
{{- $ctx := index . 0 -}}
{{- $fullname := include "microview.fullname" $ctx -}}
{{- $suffix := printf "-%s" (index . 1) -}}
{{- printf "%s%s" ($fullname | trunc (int (sub 63 (len $suffix))) | trimSuffix "-") $suffix -}}
{{- end -}}

{{- define "microview.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of a component. Call with (list . "agent"). */}}
{{- define "microview.selectorLabels" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: {{ include "microview.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The selector labels of a component as a label selector string ("k=v,k=v"), the form the
scaler's --collector-selector takes. Call with (list . "collector"). */}}
{{- define "microview.selectorString" -}}
{{- $ctx := index . 0 -}}
{{- printf "app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s,app.kubernetes.io/component=%s" (include "microview.name" $ctx) ($ctx.Release.Name | trunc 63 | trimSuffix "-") (index . 1) -}}
{{- end -}}

{{/* All labels of a component's objects. Call with (list . "agent"). */}}
{{- define "microview.labels" -}}
{{- $ctx := index . 0 -}}
helm.sh/chart: {{ include "microview.chart" $ctx }}
{{ include "microview.selectorLabels" . }}
app.kubernetes.io/version: {{ $ctx.Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ $ctx.Release.Service }}
app.kubernetes.io/part-of: microview
{{- with $ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Image reference: [registry/]repository[:tag][@digest]; the tag defaults to appVersion.
Call with (dict "root" . "override" .Values.collector.image) or (dict "root" .). */}}
{{- define "microview.image" -}}
{{- $img := .root.Values.image -}}
{{- $o := default dict (get . "override") -}}
{{- $repo := default $img.repository (get $o "repository") -}}
{{- $tag := default (default .root.Chart.AppVersion $img.tag) (get $o "tag") -}}
{{- $digest := default $img.digest (get $o "digest") -}}
{{- $ref := $repo -}}
{{- if $img.registry }}{{ $ref = printf "%s/%s" $img.registry $repo }}{{ end -}}
{{- if $tag }}{{ $ref = printf "%s:%s" $ref $tag }}{{ end -}}
{{- if $digest }}{{ $ref = printf "%s@%s" $ref $digest }}{{ end -}}
{{- $ref -}}
{{- end -}}

{{/* Bytes of a size written as digits with an optional Ki, Mi or Gi suffix (the agent's
form). Fails on anything else. */}}
{{- define "microview.bytes" -}}
{{- $s := toString . -}}
{{- if regexMatch "^[0-9]+$" $s -}}
{{- $s -}}
{{- else if regexMatch "^[0-9]+Ki$" $s -}}
{{- mul (trimSuffix "Ki" $s | int64) 1024 -}}
{{- else if regexMatch "^[0-9]+Mi$" $s -}}
{{- mul (trimSuffix "Mi" $s | int64) 1048576 -}}
{{- else if regexMatch "^[0-9]+Gi$" $s -}}
{{- mul (trimSuffix "Gi" $s | int64) 1073741824 -}}
{{- else -}}
{{- fail (printf "size %q: want bytes or a number with Ki, Mi or Gi" $s) -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret holding the collector token. */}}
{{- define "microview.tokenSecretName" -}}
{{- default (include "microview.componentName" (list . "collector-token")) .Values.collectorToken.existingSecret -}}
{{- end -}}

{{/* Whether the agent serves remote collectors, so the token is needed ("true" or ""). */}}
{{- define "microview.tokenNeeded" -}}
{{- if or (and .Values.agent.enabled (or .Values.agent.remote.enabled .Values.agent.rdma.enabled)) (and .Values.collector.enabled (eq .Values.collector.mode "dpu")) -}}
true
{{- end -}}
{{- end -}}

{{/* The agent's unix socket, where collectors and the probes reach it. */}}
{{- define "microview.agentSocket" -}}
{{- printf "%s/agent.sock" (.Values.global.stateDir | trimSuffix "/") -}}
{{- end -}}

{{/* Mount path of the collector token in agent and collector containers. */}}
{{- define "microview.tokenDir" -}}
/etc/microview/token
{{- end -}}

{{/* Name of the webhook's serving-certificate Secret. */}}
{{- define "microview.webhookTLSSecret" -}}
{{- if eq .Values.webhook.tls.mode "secret" -}}
{{- .Values.webhook.tls.existingSecret -}}
{{- else -}}
{{- include "microview.componentName" (list . "webhook-tls") -}}
{{- end -}}
{{- end -}}

{{/* DNS names the webhook's certificate must carry (its Service). */}}
{{- define "microview.webhookDNSNames" -}}
{{- $svc := include "microview.componentName" (list . "webhook") -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{/* Pages one pod may ask for: webhook.maxPagesPerPod, or 0 = the agent's pool in pages. */}}
{{- define "microview.maxPagesPerPod" -}}
{{- if .Values.webhook.maxPagesPerPod -}}
{{- .Values.webhook.maxPagesPerPod -}}
{{- else -}}
{{- div (include "microview.bytes" .Values.agent.poolSize | int64) (include "microview.bytes" .Values.global.pageSize | int64) -}}
{{- end -}}
{{- end -}}
