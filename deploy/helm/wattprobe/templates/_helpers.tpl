{{/* The chart's name (nameOverride): app.kubernetes.io/name of every object. */}}
{{- define "wattprobe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' base name, from the release (so that two releases can live in one cluster):
fullnameOverride, else the release name where it holds the chart's name (release
"wattprobe" gives "wattprobe", the kustomize overlays' names), else <release>-<name>.
*/}}
{{- define "wattprobe.fullname" -}}
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
{{- end }}

{{/* The namespace of every namespaced object: namespaceOverride, else the release's. */}}
{{- define "wattprobe.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end }}

{{/*
A name from values that defaults to <fullname>-<suffix>: (dict "root" $ "name" <value>
"suffix" "web-config"). Release wattprobe: the kustomize overlays' names.
*/}}
{{- define "wattprobe.named" -}}
{{- .name | default (printf "%s-%s" (include "wattprobe.fullname" .root) .suffix) -}}
{{- end }}

{{/* The cloud agents' service account (serviceAccount.name, else the fullname). */}}
{{- define "wattprobe.serviceAccountName" -}}
{{- default (include "wattprobe.fullname" .) .Values.serviceAccount.name -}}
{{- end }}

{{/*
Labels on every object's metadata: what the kustomize base puts there (part-of), Helm's own
(chart, managed-by), the release (app.kubernetes.io/instance, also in every selector, so two
releases in one namespace select their own pods) and commonLabels. The kustomize overlays
have no instance label on the cloud objects and `instance: edge` on the edge ones; the chart
tells the edge objects apart by app.kubernetes.io/component (edge-exporter) instead.
*/}}
{{- define "wattprobe.labels" -}}
app.kubernetes.io/part-of: wattprobe
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The selector of one agent kind's pods: (dict "root" $ "component" "exporter"). */}}
{{- define "wattprobe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wattprobe.name" .root }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/*
An image reference from (dict "image" <repository, tag> "root" $): global.imageRegistry,
where set, replaces the repository's registry (its first part, when it names a host).
*/}}
{{- define "wattprobe.repository" -}}
{{- $repo := .repository -}}
{{- with .root.Values.global.imageRegistry -}}
{{- $parts := splitList "/" $repo -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq "localhost" $first)) -}}
{{- $repo = join "/" (rest $parts) -}}
{{- end -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}
{{- end -}}
{{- $repo -}}
{{- end }}

{{- define "wattprobe.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- $repo := include "wattprobe.repository" (dict "repository" .Values.image.repository "root" .) -}}
{{- if .Values.image.digest -}}
{{ $repo }}:{{ $tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repo }}:{{ $tag }}
{{- end }}
{{- end }}

{{/* The agent's port: fixed, because the edge forwarder's config scrapes it by number. */}}
{{- define "wattprobe.port" -}}28390{{- end }}

{{/*
The edge forwarder's config files: files/generated/forwarder/* (copied from the kubeedge
overlay by `make manifests`), with edge.forwarder.config replacing or adding files.
*/}}
{{- define "wattprobe.forwarderData" -}}
{{- $data := dict -}}
{{- range $path, $_ := .Files.Glob "files/generated/forwarder/*" -}}
{{- $_ := set $data (base $path) ($.Files.Get $path) -}}
{{- end -}}
{{- range $name, $text := .Values.edge.forwarder.config -}}
{{- $_ := set $data $name $text -}}
{{- end -}}
{{- toJson $data -}}
{{- end }}

{{/*
The forwarder ConfigMap's name: kustomize's configMapGenerator naming (name-<hash of the
data>), so a changed config rolls the edge pods and the object is the kustomize overlay's
own. The hash is kustomize's: sha256 of {"data","kind","name":""} as Go JSON, first 10 hex
digits with 0,1,3,a,e mapped to g,h,k,m,t (no all-digit or vowel-made words).
*/}}
{{- define "wattprobe.forwarderConfigMapName" -}}
{{- $data := include "wattprobe.forwarderData" . | fromJson -}}
{{- $hash := dict "data" $data "kind" "ConfigMap" "name" "" | toJson | sha256sum | trunc 10 -}}
{{ include "wattprobe.fullname" . }}-forwarder-edge-{{ $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" }}
{{- end }}
