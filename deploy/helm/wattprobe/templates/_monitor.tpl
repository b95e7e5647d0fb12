{{/*
The scrape endpoint of the ServiceMonitor and the PodMonitor (dict "root" $ "monitor" <values>):
the same settings either way. The exporter's pod, namespace and container labels name the
workloads it measures: without honorLabels Prometheus would rename them exported_*
(deploy/base/servicemonitor.yaml). The monitor's relabelings come after the shipped ones.
*/}}
{{- define "wattprobe.endpoint" -}}
{{- $v := .root.Values -}}
{{- $m := .monitor -}}
port: metrics
path: /metrics
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
honorLabels: true
relabelings:
  # The agent's own pod/namespace/... target labels would bill node series to the
  # wattprobe namespace: dropped; `node` and `instance` say where.
  - action: labeldrop
    regex: (pod|namespace|container|service|endpoint)
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
    action: replace
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $m.tlsConfig }}
scheme: https
tlsConfig:
  {{- toYaml $m.tlsConfig | nindent 2 }}
{{- else if $v.webConfig.enabled }}
{{- $secret := include "wattprobe.named" (dict "root" .root "name" $v.webConfig.scrape.secretName "suffix" "scrape-tls") }}
scheme: https
tlsConfig:
  serverName: {{ $v.webConfig.scrape.serverName | default (printf "%s.%s.svc" (include "wattprobe.fullname" .root) (include "wattprobe.namespace" .root)) }}
  ca:
    secret:
      name: {{ $secret }}
      key: ca.crt
  cert:
    secret:
      name: {{ $secret }}
      key: tls.crt
  keySecret:
    name: {{ $secret }}
    key: tls.key
{{- end }}
{{- end }}
