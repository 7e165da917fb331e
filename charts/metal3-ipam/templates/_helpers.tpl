{{/* The chart's name. */}}
{{- define "metal3-ipam.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object's name: the release name when it holds the chart's name, else <release>-<name>. */}}
{{- define "metal3-ipam.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "metal3-ipam.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The namespace of the leader election Lease (leaderElection.namespace, else the release's): its Role and
RoleBinding are made there, or the controller may not take the Lease. */}}
{{- define "metal3-ipam.leaseNamespace" -}}
{{- .Values.leaderElection.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* The labels Helm's conventions add to every object. */}}
{{- define "metal3-ipam.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "metal3-ipam.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The provider label clusterctl and config/default put on every object. */}}
{{- define "metal3-ipam.providerLabels" -}}
cluster.x-k8s.io/provider: ipam-metal3
{{- end -}}

{{/* Every object's labels. */}}
{{- define "metal3-ipam.labels" -}}
{{ include "metal3-ipam.helmLabels" . }}
{{ include "metal3-ipam.providerLabels" . }}
{{- end -}}

{{/* The Deployment's selector (as config/default's: it cannot change across upgrades). */}}
{{- define "metal3-ipam.selectorLabels" -}}
{{ include "metal3-ipam.providerLabels" . }}
control-plane: controller-manager
{{- end -}}

{{- define "metal3-ipam.serviceAccountName" -}}
{{ include "metal3-ipam.fullname" . }}-controller-manager
{{- end -}}

{{- define "metal3-ipam.webhookServiceName" -}}
{{ include "metal3-ipam.fullname" . }}-webhook-service
{{- end -}}

{{- define "metal3-ipam.certificateName" -}}
{{ include "metal3-ipam.fullname" . }}-serving-cert
{{- end -}}

{{/* cert-manager's CA injection: the namespace/name of the serving Certificate. */}}
{{- define "metal3-ipam.caInjection" -}}
{{- if .Values.certManager.enabled -}}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "metal3-ipam.certificateName" . }}
{{- end -}}
{{- end -}}

{{- define "metal3-ipam.webhookAnnotations" -}}
{{ include "metal3-ipam.caInjection" . }}
{{- end -}}

{{- define "metal3-ipam.crdAnnotations" -}}
{{- if .Values.crds.keep -}}
helm.sh/resource-policy: keep
{{- end -}}
{{- end -}}

{{/* A CRD whose versions the controller converts: kept, and with the serving certificate's CA injected. */}}
{{- define "metal3-ipam.convertedCrdAnnotations" -}}
{{ include "metal3-ipam.crdAnnotations" . }}
{{ include "metal3-ipam.caInjection" . }}
{{- end -}}

{{/*
The serving certificate the chart makes when cert-manager does not, as base64 of PEM: {"ca", "crt", "key"}.
Made once per rendering (kept in .Values for the other templates), and taken from the Secret of an earlier
release when there is one, so that an upgrade keeps it.
*/}}
{{- define "metal3-ipam.selfSignedCertificate" -}}
{{- if not (hasKey .Values "__selfSignedCertificate") -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace .Values.webhook.secretName -}}
{{- $data := (get (default dict $secret) "data") | default dict -}}
{{- if and (get $data "ca.crt") (get $data "tls.crt") (get $data "tls.key") -}}
{{- $_ := set .Values "__selfSignedCertificate" (dict "ca" (get $data "ca.crt") "crt" (get $data "tls.crt") "key" (get $data "tls.key")) -}}
{{- else -}}
{{- $service := include "metal3-ipam.webhookServiceName" . -}}
{{- $host := printf "%s.%s.svc" $service .Release.Namespace -}}
{{- $days := int .Values.webhook.selfSignedValidityDays -}}
{{- $ca := genCA (printf "%s-webhook-ca" (include "metal3-ipam.fullname" .)) $days -}}
{{- $cert := genSignedCert $host nil (list $host (printf "%s.cluster.local" $host)) $days $ca -}}
{{- $_ := set .Values "__selfSignedCertificate" (dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) -}}
{{- end -}}
{{- end -}}
{{- toJson (get .Values "__selfSignedCertificate") -}}
{{- end -}}

{{/* A webhook's clientConfig: the webhook Service at a path (list $ "/path"), with the chart's CA unless
cert-manager injects one. */}}
{{- define "metal3-ipam.webhookClientConfig" -}}
{{- $ := index . 0 -}}
{{- if not $.Values.certManager.enabled -}}
caBundle: {{ (include "metal3-ipam.selfSignedCertificate" $ | fromJson).ca }}
{{ end -}}
service:
  name: {{ include "metal3-ipam.webhookServiceName" $ }}
  namespace: {{ $.Release.Namespace }}
  path: {{ index . 1 }}
{{- end -}}

{{/* The container's arguments: every flag of `metal3-ipam run` from the values (the Go providers' names where
`run` takes those: --leader-elect, --diagnostics-address, ...). */}}
{{- define "metal3-ipam.args" -}}
- run
{{- if .Values.namespaces }}
{{- range .Values.namespaces }}
- --namespace={{ . }}
{{- end }}
{{- else }}
- --all-namespaces
{{- end }}
{{- with .Values.watchFilter }}
- --watch-filter={{ . }}
{{- end }}
{{- if .Values.leaderElection.enabled }}
- --leader-elect
- --leader-elect-lease-name={{ .Values.leaderElection.leaseName }}
{{- with .Values.leaderElection.namespace }}
- --leader-election-namespace={{ . }}
{{- end }}
- --leader-elect-lease-duration={{ .Values.leaderElection.leaseDuration }}
- --leader-elect-renew-deadline={{ .Values.leaderElection.renewDeadline }}
- --leader-elect-retry-period={{ .Values.leaderElection.retryPeriod }}
{{- end }}
- --health-address=:{{ .Values.healthPort }}
- --webhook-port={{ .Values.webhook.port }}
- --webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs
- --diagnostics-address=:{{ .Values.diagnostics.port }}
- --insecure-diagnostics={{ .Values.diagnostics.insecure }}
{{- with .Values.tls.minVersion }}
- --tls-min-version={{ . }}
{{- end }}
{{- with .Values.tls.cipherSuites }}
- --tls-cipher-suites={{ join "," . }}
{{- end }}
- --parallel-writes={{ .Values.parallelWrites }}
- --resync-seconds={{ .Values.resyncSeconds }}
{{- if .Values.kubeApi.qps }}
- --kube-api-qps={{ .Values.kubeApi.qps }}
{{- end }}
{{- if .Values.kubeApi.burst }}
- --kube-api-burst={{ .Values.kubeApi.burst }}
{{- end }}
{{- with .Values.lockNamespace }}
- --lock-namespace={{ . }}
{{- end }}
{{- if .Values.kubeconfigSecret }}
- --kubeconfig=/etc/metal3-ipam/kubeconfig/kubeconfig
{{- end }}
{{- range $flag, $value := .Values.kindFlags }}
{{- if not (kindIs "invalid" $value) }}
- {{ printf "--%s=%v" $flag $value | quote }}
{{- end }}
{{- end }}
{{- if ne .Values.logging.format "text" }}
- --logging-format={{ .Values.logging.format }}
{{- end }}
{{- if .Values.verbose }}
- --verbose
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
