{{/*
Labels on every object's metadata: what the kustomize base puts there (part-of) and Helm's
own (chart, managed-by). app.kubernetes.io/instance is not the release name here: as in the
kustomize overlays it tells the edge agent's objects apart (instance: edge), and the
DaemonSets' selectors use it, so it cannot change with a release's name.
*/}}
{{- define "wattprobe.labels" -}}
app.kubernetes.io/part-of: wattprobe
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "wattprobe.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}:{{ $tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
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
wattprobe-forwarder-edge-{{ $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" }}
{{- end }}
