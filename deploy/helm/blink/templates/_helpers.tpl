{{/* Names, labels and the generated gateway config shared by the templates. */}}

{{- define "blink.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "blink.fullname" -}}
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

{{/* "<fullname>-<component>", e.g. blink-gateway. 40 characters of fullname keep the longest
name ("-engine-headless") inside 63, and StatefulSet names inside 52 (the controller appends an
11-character revision hash to them in a label limited to 63). */}}
{{- define "blink.component" -}}
{{- printf "%s-%s" (include "blink.fullname" .root | trunc 40 | trimSuffix "-") .component }}
{{- end }}

{{- define "blink.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "blink.selectorLabels" . }}
{{- end }}

{{- define "blink.selectorLabels" -}}
app.kubernetes.io/name: {{ include "blink.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "blink.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "blink.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "blink.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* In-cluster DNS suffix of a Service. */}}
{{- define "blink.svcHost" -}}
{{- printf "%s.%s.svc" .name .root.Release.Namespace }}
{{- end }}

{{/* Whether a Redis URL / PostgreSQL DSN reaches the gateway (in-chart, external or existing Secret). */}}
{{- define "blink.hasRedis" -}}
{{- if or .Values.redis.enabled .Values.redis.url .Values.redis.existingSecret.name }}true{{ end }}
{{- end }}
{{- define "blink.hasPostgres" -}}
{{- if or .Values.postgres.enabled .Values.postgres.dsn .Values.postgres.existingSecret.name }}true{{ end }}
{{- end }}

{{/* The gateway's blink.yaml: one pooled model per engine / vLLM Service, the shared stores, then .Values.config merged on top (the user's settings win). Secrets (Redis
URL, PostgreSQL DSN, upstream keys) never appear here: they arrive as BLINK_* env vars. */}}
{{- define "blink.gatewayConfig" -}}
{{- $models := list }}
{{- $default := "" }}
{{- if .Values.engine.enabled }}
{{- $e := .Values.engine }}
{{- /* One pooled model over the headless Service: the gateway resolves it to every ready replica,
balances across them and health-checks each on /ready (model loaded). Its own /ready stays up
while any replica is. */}}
{{- $headless := include "blink.component" (dict "root" . "component" "engine-headless") }}
{{- $url := printf "http://%s:%d/v1" (include "blink.svcHost" (dict "root" . "name" $headless)) (int $e.port) }}
{{- $discovery := dict "mode" "dns" "health_path" "/ready" }}
{{- $models = append $models (dict "name" $e.servedModelName "kind" "openai_http" "base_url" $url "upstream_model" $e.servedModelName "discovery" $discovery) }}
{{- $default = $e.servedModelName }}
{{- end }}
{{- if .Values.vllm.enabled }}
{{- $v := .Values.vllm }}
{{- /* The headless Service's DNS name resolves to every ready replica: the gateway balances
across them itself (discovery mode dns) and health-checks each on vLLM's /health. */}}
{{- $svc := include "blink.component" (dict "root" . "component" "vllm-headless") }}
{{- $url := printf "http://%s:%d/v1" (include "blink.svcHost" (dict "root" . "name" $svc)) (int $v.port) }}
{{- $discovery := dict "mode" "dns" "health_path" "/health" }}
{{- $models = append $models (dict "name" $v.servedModelName "kind" "openai_http" "base_url" $url "upstream_model" $v.servedModelName "discovery" $discovery) }}
{{- $default = default $v.servedModelName $default }}
{{- end }}
{{- range .Values.upstreams }}
{{- $models = append $models (merge (deepCopy .) (dict "kind" "openai_http")) }}
{{- end }}
{{- $cfg := dict "server" (dict "host" "0.0.0.0" "port" (int .Values.gateway.port)) "models" $models }}
{{- if $default }}
{{- $_ := set $cfg "default_model" $default }}
{{- end }}
{{- /* Exact entries in Redis (vectors in PostgreSQL when it is there too); API keys in PostgreSQL. */}}
{{- if include "blink.hasRedis" . }}
{{- $_ := set $cfg "cache" (dict "store" "redis") }}
{{- else if include "blink.hasPostgres" . }}
{{- $_ := set $cfg "cache" (dict "store" "postgres") }}
{{- end }}
{{- toYaml (mergeOverwrite $cfg (deepCopy .Values.config)) }}
{{- end }}

{{/* Container env shared by Blink's own pods: writable HOME on the read-only root filesystem. */}}
{{- define "blink.commonEnv" -}}
- name: HOME
  value: /tmp/home
- name: XDG_CACHE_HOME
  value: /tmp/cache
- name: PYTHONUNBUFFERED
  value: "1"
{{- end }}

{{/* Gateway env from Secrets: store URLs and upstream API keys (never in the ConfigMap). */}}
{{- define "blink.gatewaySecretEnv" -}}
{{- $own := include "blink.fullname" . }}
{{- range $var := list "BLINK_RATELIMIT__STORAGE_URI" "BLINK_CACHE__REDIS_URL" }}
{{- if or $.Values.redis.enabled $.Values.redis.url }}
- name: {{ $var }}
  valueFrom: {secretKeyRef: {name: {{ $own }}, key: BLINK_RATELIMIT__STORAGE_URI}}
{{- else if $.Values.redis.existingSecret.name }}
- name: {{ $var }}
  valueFrom: {secretKeyRef: {name: {{ $.Values.redis.existingSecret.name }}, key: {{ $.Values.redis.existingSecret.key }}}}
{{- end }}
{{- end }}
{{- range $var := list "BLINK_CACHE__POSTGRES_DSN" "BLINK_AUTH__POSTGRES_DSN" }}
{{- if or $.Values.postgres.enabled $.Values.postgres.dsn }}
- name: {{ $var }}
  valueFrom: {secretKeyRef: {name: {{ $own }}, key: BLINK_CACHE__POSTGRES_DSN}}
{{- else if $.Values.postgres.existingSecret.name }}
- name: {{ $var }}
  valueFrom: {secretKeyRef: {name: {{ $.Values.postgres.existingSecret.name }}, key: {{ $.Values.postgres.existingSecret.key }}}}
{{- end }}
{{- end }}
{{- range $k, $v := .Values.secrets.env }}
- name: {{ $k }}
  valueFrom: {secretKeyRef: {name: {{ $own }}, key: {{ $k }}}}
{{- end }}
{{- end }}

{{/* Probes on one named port; the startup probe bounds first start (weights download + load) on
`.startup` (the readiness path for model servers; liveness for the gateway, which must not be
restarted while it waits for model servers to load). */}}
{{- define "blink.probes" -}}
startupProbe:
  httpGet: {path: {{ default .ready .startup }}, port: http}
  periodSeconds: 5
  failureThreshold: {{ max 1 (div (int .startupSeconds) 5) }}
readinessProbe:
  httpGet: {path: {{ .ready }}, port: http}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
livenessProbe:
  httpGet: {path: {{ .live }}, port: http}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
{{- end }}
