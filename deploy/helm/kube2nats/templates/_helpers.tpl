{{/* The release's full name: the release name, with the chart name unless it already holds it. */}}
{{- define "kube2nats.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kube2nats.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube2nats.labels" -}}
{{ include "kube2nats.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kube2nats.serviceAccountName" -}}
{{- default (include "kube2nats.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "kube2nats.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The watches with their namespaces made explicit: a watch without `namespaces` watches the release
namespace (rbac.scope namespace) or every namespace (rbac.scope cluster). Returned as YAML.
*/}}
{{- define "kube2nats.watches" -}}
{{- $watches := list -}}
{{- range .Values.config.watches -}}
{{- $w := deepCopy . -}}
{{- if not (hasKey $w "namespaces") -}}
{{- if eq $.Values.rbac.scope "namespace" -}}
{{- $_ := set $w "namespaces" (list $.Release.Namespace) -}}
{{- else -}}
{{- $_ := set $w "namespaces" (list) -}}
{{- end -}}
{{- end -}}
{{- if and (eq $.Values.rbac.scope "namespace") (empty $w.namespaces) -}}
{{- fail (printf "config.watches %s watches every namespace (namespaces: []): set rbac.scope=cluster" $w.name) -}}
{{- end -}}
{{- if and (eq $.Values.rbac.scope "namespace") $w.namespace_selector -}}
{{- fail (printf "config.watches %s has a namespace_selector, which lists and watches namespaces (cluster-scoped): set rbac.scope=cluster" $w.name) -}}
{{- end -}}
{{- $watches = append $watches $w -}}
{{- end -}}
{{- toYaml (dict "watches" $watches) -}}
{{- end -}}

{{/*
kube2nats.toml: `config` with http.listen on metricsPort, the watches' namespaces explicit, whole
numbers as integers.
*/}}
{{- define "kube2nats.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $http := deepCopy (default dict $cfg.http) -}}
{{- $_ := set $http "listen" (printf "0.0.0.0:%d" (int .Values.metricsPort)) -}}
{{- $_ := set $cfg "http" $http -}}
{{- $_ := set $cfg "watches" (fromYaml (include "kube2nats.watches" .)).watches -}}
{{- /* Durable state's owner: one instance per release, so two releases sharing a bucket in one namespace never share state (docs/durable-state.md). */ -}}
{{- $state := deepCopy (default dict $cfg.state) -}}
{{- if not $state.instance -}}
{{- $_ := set $state "instance" (printf "%s_%s" .Release.Namespace (include "kube2nats.fullname" .)) -}}
{{- end -}}
{{- $_ := set $cfg "state" $state -}}
{{- if .Values.leaderElection.enabled -}}
{{- $election := dict "enabled" true "lease_name" (include "kube2nats.leaseName" .) "lease_duration" .Values.leaderElection.leaseDuration "renew_deadline" .Values.leaderElection.renewDeadline "retry_period" .Values.leaderElection.retryPeriod -}}
{{- $_ := set $cfg "leader_election" $election -}}
{{- end -}}
{{- include "kube2nats.wholeNumbers" $cfg -}}
{{- toToml $cfg -}}
{{- end -}}

{{/*
Turns every whole-number float of a dict (and of the dicts in its lists) into an integer, in
place: Helm reads every YAML number as a float, and toToml would write 256 as 256.0, which
kube2nats' integer keys refuse.
*/}}
{{- define "kube2nats.wholeNumbers" -}}
{{- $m := . -}}
{{- range $k, $v := $m -}}
{{- if kindIs "float64" $v -}}
{{- if eq $v (floor $v) -}}
{{- $_ := set $m $k (int64 $v) -}}
{{- end -}}
{{- else if kindIs "map" $v -}}
{{- include "kube2nats.wholeNumbers" $v -}}
{{- else if kindIs "slice" $v -}}
{{- range $v -}}
{{- if kindIs "map" . -}}
{{- include "kube2nats.wholeNumbers" . -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* RBAC rules: get, list, watch on each watched resource (kubectl spelling: plural, plural.group, plural.version.group), plus rbac.extraRules. */}}
{{- define "kube2nats.rules" -}}
{{- range .Values.config.watches }}
{{- $parts := splitList "." .resource }}
{{- $resource := first $parts }}
{{- $rest := rest $parts }}
{{- if and $rest (regexMatch "^v[0-9]+((alpha|beta)[0-9]+)?$" (first $rest)) }}
{{- $rest = rest $rest }}
{{- end }}
- apiGroups: [{{ join "." $rest | quote }}]
  resources: [{{ $resource | quote }}]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- $selecting := false }}
{{- range .Values.config.watches }}{{ if .namespace_selector }}{{ $selecting = true }}{{ end }}{{ end }}
{{- if $selecting }}
# namespace_selector: the namespaces themselves, to follow their labels.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- with .Values.rbac.extraRules }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The namespaces the watches name, for per-namespace Roles. */}}
{{- define "kube2nats.namespaces" -}}
{{- $all := list -}}
{{- range (fromYaml (include "kube2nats.watches" .)).watches -}}
{{- $all = concat $all .namespaces -}}
{{- end -}}
{{- toYaml (dict "namespaces" (uniq $all)) -}}
{{- end -}}

{{/* The Lease leader election uses (in the release namespace). */}}
{{- define "kube2nats.leaseName" -}}
{{- default (include "kube2nats.fullname" .) .Values.leaderElection.leaseName -}}
{{- end -}}
