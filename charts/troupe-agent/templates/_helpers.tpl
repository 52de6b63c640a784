{{/*
Named templates of the troupe-agent chart.

Every template takes a context with .Values (this chart's values), .Release and .Chart: the
chart's own templates pass the root context `.`; an application chart that depends on this
chart passes
  (dict "Values" (index .Values "troupe-agent") "Release" .Release "Chart" (dict "Name" "troupe-agent"))
so that the names and settings are the ones this chart renders (see README.md).
*/}}

{{/* The chart's version and appVersion (a test keeps them equal to Chart.yaml's). */}}
{{- define "troupe-agent.version" -}}
0.1.0
{{- end -}}

{{- define "troupe-agent.name" -}}
{{- default "troupe-agent" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "troupe-agent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "troupe-agent.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "troupe-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "troupe-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "troupe-agent.labels" -}}
{{ include "troupe-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default (include "troupe-agent.version" .) | quote }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/part-of: troupe
app.kubernetes.io/managed-by: {{ .Release.Service | default "Helm" }}
helm.sh/chart: {{ printf "troupe-agent-%s" (include "troupe-agent.version" .) }}
{{- end -}}

{{- define "troupe-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "troupe-agent.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "troupe-agent.secretName" -}}
{{- default (include "troupe-agent.fullname" .) .Values.secret.name -}}
{{- end -}}

{{/* The singleton lease backend in effect: the explicit one, or the membership's. */}}
{{- define "troupe-agent.singletonLease" -}}
{{- if .Values.singletonLease.backend -}}
{{- .Values.singletonLease.backend -}}
{{- else if eq .Values.membership.provider "gossip" -}}
none
{{- else -}}
{{- .Values.membership.provider -}}
{{- end -}}
{{- end -}}

{{/* Seconds from the pod's deletion to SIGKILL the agent needs, without margin. */}}
{{- define "troupe-agent.shutdownSeconds" -}}
{{- $s := .Values.shutdown -}}
{{- $ms := add (int $s.drainDelayMs) (int $s.leaveTimeoutMs) (int $s.flushTimeoutMs) -}}
{{- add (int $s.preStopSleepSeconds) (div (add $ms 999) 1000) -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: above preStop sleep + drain delay + leave timeout + flush
timeout (seed 003), computed with a margin unless set explicitly.
*/}}
{{- define "troupe-agent.terminationGracePeriodSeconds" -}}
{{- $needed := int (include "troupe-agent.shutdownSeconds" .) -}}
{{- $explicit := .Values.shutdown.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $explicit -}}
{{- add $needed (int .Values.shutdown.graceMarginSeconds) -}}
{{- else if le (int $explicit) $needed -}}
{{- fail (printf "shutdown.terminationGracePeriodSeconds is %d but must be above preStopSleepSeconds + ceil((drainDelayMs + leaveTimeoutMs + flushTimeoutMs) / 1000) = %d; raise it or leave it null to compute it" (int $explicit) $needed) -}}
{{- else -}}
{{- int $explicit -}}
{{- end -}}
{{- end -}}

{{/* Refuses contradictory settings with a message naming them and what is allowed. */}}
{{- define "troupe-agent.validate" -}}
{{- $m := .Values.membership -}}
{{- if and (ne $m.provider "gossip") $m.gossip.seeds -}}
{{- fail (printf "membership.gossip.seeds is set but membership.provider is %s: seeds are for gossip membership only; remove them or set membership.provider=gossip" $m.provider) -}}
{{- end -}}
{{- if and (eq $m.provider "gossip") (not $m.gossip.seeds) -}}
{{- fail "membership.provider is gossip but membership.gossip.seeds is empty: every pod would form a cluster of its own; list seed addresses or use membership.provider=kubernetes" -}}
{{- end -}}
{{- $lease := include "troupe-agent.singletonLease" . -}}
{{- if and (or (eq $m.provider "etcd") (eq $lease "etcd")) (not $m.etcd.endpoints) -}}
{{- fail (printf "membership.provider is %s and singletonLease.backend is %s: etcd needs membership.etcd.endpoints" $m.provider $lease) -}}
{{- end -}}
{{- with $m.ttlMs -}}
{{- if or (lt (int .) 1000) (ne (mod (int .) 1000) 0) -}}
{{- fail (printf "membership.ttlMs must be a whole number of seconds of at least 1000 (Leases and etcd count whole seconds), got %d" (int .)) -}}
{{- end -}}
{{- if and (eq $m.provider "etcd") (lt (int .) 2000) -}}
{{- fail (printf "membership.ttlMs must be at least 2000 for etcd (its smallest lease), got %d" (int .)) -}}
{{- end -}}
{{- end -}}
{{- if and $m.renewMs $m.ttlMs (gt (mul (int $m.renewMs) 3) (int $m.ttlMs)) -}}
{{- fail (printf "membership.renewMs (%d) must be at most a third of membership.ttlMs (%d), so that two renewals can fail before the lease expires" (int $m.renewMs) (int $m.ttlMs)) -}}
{{- end -}}
{{- if and (eq $lease "control-plane") (not .Values.controlPlane.url) -}}
{{- fail "singletonLease.backend is control-plane but controlPlane.url is empty" -}}
{{- end -}}
{{- $ca := .Values.controlPlane.tls.ca -}}
{{- if and $ca.secretName $ca.configMapName -}}
{{- fail (printf "controlPlane.tls.ca.secretName (%s) and controlPlane.tls.ca.configMapName (%s) are both set: the CA comes from one of them; clear the other" $ca.secretName $ca.configMapName) -}}
{{- end -}}
{{- if and (include "troupe-agent.controlPlaneCa" .) (not (hasPrefix "https://" .Values.controlPlane.url)) -}}
{{- fail (printf "controlPlane.tls.ca is set but controlPlane.url is %q: the CA verifies an https:// control plane; give an https:// url or clear controlPlane.tls.ca" .Values.controlPlane.url) -}}
{{- end -}}
{{- $spool := .Values.controlPlane.spool -}}
{{- $d := .Values.deployment -}}
{{- if and (include "troupe-agent.spool" .) (hasKey $spool.volume "persistentVolumeClaim") $d.enabled (or .Values.autoscaling.enabled (gt (int $d.replicas) 1)) -}}
{{- fail (printf "controlPlane.spool.volume is a persistentVolumeClaim but the Deployment runs %s: its pods would share one spool directory, which one agent holds at a time (the others are refused at start), and a Deployment's pods never come back with the same address; leave controlPlane.spool.volume empty for an emptyDir per pod, or run one replica" (ternary "autoscaled replicas" (printf "%d replicas" (int $d.replicas)) .Values.autoscaling.enabled)) -}}
{{- end -}}
{{- end -}}

{{/* "true" when a control-plane CA is mounted (controlPlane.tls.ca names a Secret or ConfigMap). */}}
{{- define "troupe-agent.controlPlaneCa" -}}
{{- $ca := .Values.controlPlane.tls.ca -}}
{{- if or $ca.secretName $ca.configMapName -}}true{{- end -}}
{{- end -}}

{{/* "true" when the agent reports and keeps a report spool (controlPlane.spool.enabled). */}}
{{- define "troupe-agent.spool" -}}
{{- if and .Values.controlPlane.url .Values.controlPlane.spool.enabled -}}true{{- end -}}
{{- end -}}

{{/* Where the control-plane CA is mounted, and the file the agent reads. */}}
{{- define "troupe-agent.controlPlaneCaDir" -}}
/etc/troupe/control-plane-ca
{{- end -}}

{{/* The image of the standalone Deployment. */}}
{{- define "troupe-agent.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default (include "troupe-agent.version" .)) -}}
{{- end -}}

{{/* The environment of an agent container: every setting as the agent's variable. */}}
{{- define "troupe-agent.host.env" -}}
{{- include "troupe-agent.validate" . -}}
{{- $v := .Values -}}
{{- $secret := include "troupe-agent.secretName" . -}}
{{- $lease := include "troupe-agent.singletonLease" . -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: TROUPE_ADVERTISED_HOST
  value: "$(POD_IP)"
- name: TROUPE_BIND
  value: {{ printf "0.0.0.0:%d" (int $v.ports.cluster) | quote }}
- name: TROUPE_MANAGEMENT_BIND
  value: {{ printf "0.0.0.0:%d" (int $v.ports.management) | quote }}
- name: TROUPE_SYSTEM
  value: {{ $v.system | quote }}
{{- with $v.roles }}
- name: TROUPE_ROLES
  value: {{ join "," . | quote }}
{{- end }}
- name: TROUPE_CLUSTER_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $v.secret.clusterSecretKey }}
- name: TROUPE_MEMBERSHIP
  value: {{ $v.membership.provider | quote }}
{{- if or (eq $v.membership.provider "kubernetes") (eq $lease "kubernetes") }}
- name: TROUPE_KUBE_NAMESPACE
  value: "$(POD_NAMESPACE)"
{{- with $v.membership.kubernetes.leasePrefix }}
- name: TROUPE_KUBE_LEASE_PREFIX
  value: {{ . | quote }}
{{- end }}
{{- with $v.membership.kubernetes.leaseLabel }}
- name: TROUPE_KUBE_LEASE_LABEL
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if or (eq $v.membership.provider "etcd") (eq $lease "etcd") }}
- name: TROUPE_ETCD_ENDPOINTS
  value: {{ join "," $v.membership.etcd.endpoints | quote }}
{{- with $v.membership.etcd.prefix }}
- name: TROUPE_ETCD_PREFIX
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if eq $v.membership.provider "gossip" }}
- name: TROUPE_SEEDS
  value: {{ join "," $v.membership.gossip.seeds | quote }}
{{- end }}
{{- with $v.membership.ttlMs }}
- name: TROUPE_MEMBERSHIP_TTL_MS
  value: {{ int . | quote }}
{{- end }}
{{- with $v.membership.renewMs }}
- name: TROUPE_MEMBERSHIP_RENEW_MS
  value: {{ int . | quote }}
{{- end }}
- name: TROUPE_DOWN_AFTER_MS
  value: {{ int $v.membership.downAfterMs | quote }}
- name: TROUPE_SINGLETON_LEASE
  value: {{ $lease | quote }}
{{- if eq $lease "postgres" }}
- name: TROUPE_SINGLETON_LEASE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $v.secret.singletonLeaseDatabaseUrlKey }}
{{- end }}
{{- if $v.controlPlane.url }}
- name: TROUPE_CONTROL_PLANE_URL
  value: {{ $v.controlPlane.url | quote }}
- name: TROUPE_REPORT_INTERVAL_MS
  value: {{ int $v.controlPlane.reportIntervalMs | quote }}
{{- if include "troupe-agent.controlPlaneCa" . }}
- name: TROUPE_CONTROL_PLANE_CA
  value: {{ printf "%s/ca.crt" (include "troupe-agent.controlPlaneCaDir" .) | quote }}
{{- end }}
{{- if include "troupe-agent.spool" . }}
- name: TROUPE_REPORT_SPOOL_DIR
  value: {{ $v.controlPlane.spool.mountPath | quote }}
- name: TROUPE_REPORT_SPOOL_MAX_BYTES
  value: {{ int $v.controlPlane.spool.maxBytes | quote }}
{{- end }}
{{- with $v.secret.ingestTokenKey }}
- name: TROUPE_INGEST_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . }}
{{- end }}
{{- end }}
{{- if eq $lease "control-plane" }}
- name: TROUPE_COORDINATION_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $v.secret.coordinationTokenKey }}
{{- end }}
- name: TROUPE_DRAIN_DELAY_MS
  value: {{ int $v.shutdown.drainDelayMs | quote }}
- name: TROUPE_LEAVE_TIMEOUT_MS
  value: {{ int $v.shutdown.leaveTimeoutMs | quote }}
- name: TROUPE_FLUSH_TIMEOUT_MS
  value: {{ int $v.shutdown.flushTimeoutMs | quote }}
- name: RUST_LOG
  value: {{ $v.logLevel | quote }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The ports of an agent container. */}}
{{- define "troupe-agent.host.ports" -}}
- name: cluster
  containerPort: {{ int .Values.ports.cluster }}
  protocol: TCP
- name: management
  containerPort: {{ int .Values.ports.management }}
  protocol: TCP
{{- end -}}

{{/*
The probes of seed 003: a startup probe (30 x 2 s, so a slow join is not killed in a loop),
liveness on /_troupe/health (503 "fatal" once fenced: the pod restarts), readiness on
/_troupe/health/ready (503 while starting or draining).
*/}}
{{- define "troupe-agent.host.probes" -}}
startupProbe:
  httpGet:
    path: /_troupe/health
    port: management
  failureThreshold: 30
  periodSeconds: 2
livenessProbe:
  httpGet:
    path: /_troupe/health
    port: management
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /_troupe/health/ready
    port: management
  periodSeconds: 5
  failureThreshold: 2
{{- end -}}

{{/* The preStop sleep: endpoint removal propagates before the agent starts draining. */}}
{{- define "troupe-agent.host.lifecycle" -}}
preStop:
  exec:
    command: ["sleep", {{ int .Values.shutdown.preStopSleepSeconds | quote }}]
{{- end -}}

{{/* Requests equal to limits (seed 003). */}}
{{- define "troupe-agent.host.resources" -}}
requests:
  cpu: {{ .Values.resources.cpu | quote }}
  memory: {{ .Values.resources.memory | quote }}
limits:
  cpu: {{ .Values.resources.cpu | quote }}
  memory: {{ .Values.resources.memory | quote }}
{{- end -}}

{{/*
Everything an application container needs to be a Troupe host, except its name, image and
command: put it under the container (see README.md).
*/}}
{{- define "troupe-agent.host.container" -}}
env:
{{ include "troupe-agent.host.env" . | indent 2 }}
ports:
{{ include "troupe-agent.host.ports" . | indent 2 }}
{{ include "troupe-agent.host.probes" . }}
lifecycle:
{{ include "troupe-agent.host.lifecycle" . | indent 2 }}
resources:
{{ include "troupe-agent.host.resources" . | indent 2 }}
securityContext:
{{ toYaml .Values.securityContext | indent 2 }}
{{- if or (include "troupe-agent.controlPlaneCa" .) (include "troupe-agent.spool" .) }}
volumeMounts:
{{- if include "troupe-agent.controlPlaneCa" . }}
  - name: control-plane-ca
    mountPath: {{ include "troupe-agent.controlPlaneCaDir" . }}
    readOnly: true
{{- end }}
{{- if include "troupe-agent.spool" . }}
  - name: report-spool
    mountPath: {{ .Values.controlPlane.spool.mountPath }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The agent's volumes, as list items: the CA (controlPlane.tls.ca) and the report spool
(controlPlane.spool); empty without either. troupe-agent.host.pod lists them under `volumes`:
an application pod with volumes of its own puts this template in its own `volumes` list
instead of using host.pod's.
*/}}
{{- define "troupe-agent.host.volumes" -}}
{{- $volumes := list -}}
{{- if include "troupe-agent.controlPlaneCa" . -}}
{{- $volumes = append $volumes (include "troupe-agent.volume.controlPlaneCa" .) -}}
{{- end -}}
{{- if include "troupe-agent.spool" . -}}
{{- $volumes = append $volumes (include "troupe-agent.volume.spool" .) -}}
{{- end -}}
{{- join "\n" $volumes -}}
{{- end -}}

{{/* The CA volume (controlPlane.tls.ca). */}}
{{- define "troupe-agent.volume.controlPlaneCa" -}}
{{- $ca := .Values.controlPlane.tls.ca -}}
- name: control-plane-ca
  {{- if $ca.secretName }}
  secret:
    secretName: {{ $ca.secretName }}
  {{- else }}
  configMap:
    name: {{ $ca.configMapName }}
  {{- end }}
    items:
      - key: {{ $ca.key | quote }}
        path: ca.crt
{{- end -}}

{{/*
The report spool volume (controlPlane.spool): its own source, or an emptyDir with room for the
file and, during a rewrite, its replacement (2 x maxBytes + 1 MiB, rounded up to MiB).
*/}}
{{- define "troupe-agent.volume.spool" -}}
{{- $spool := .Values.controlPlane.spool -}}
- name: report-spool
  {{- with $spool.volume }}
  {{- toYaml . | nindent 2 }}
  {{- else }}
  emptyDir:
    sizeLimit: {{ printf "%dMi" (div (add (mul 2 (int $spool.maxBytes)) 2097151) 1048576) }}
  {{- end }}
{{- end -}}

{{/* What the pod spec needs: the service account, the grace period, the CA volume if any. */}}
{{- define "troupe-agent.host.pod" -}}
serviceAccountName: {{ include "troupe-agent.serviceAccountName" . }}
terminationGracePeriodSeconds: {{ include "troupe-agent.terminationGracePeriodSeconds" . }}
{{- with include "troupe-agent.host.volumes" . }}
volumes:
{{ . | indent 2 }}
{{- end }}
{{- end -}}
