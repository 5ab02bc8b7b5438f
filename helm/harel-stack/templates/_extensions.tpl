{{/*
Extension points: what a platform team adds to a workload's pods without forking the chart (values.yaml,
"Extension points"). worker, mongodb and jobs each carry the same keys; every workload renders them through
these helpers, called with that workload's values, e.g. (include "harel-stack.ext.env" .Values.worker). What the
user adds comes after what the chart sets: the chart's env, volumes and containers keep their names.
*/}}

{{/* Pod metadata: more labels and annotations (the schema refuses keys the chart sets itself). */}}
{{- define "harel-stack.ext.podLabels" -}}
{{- with .podLabels }}{{ toYaml . }}{{ end }}
{{- end }}

{{- define "harel-stack.ext.podAnnotations" -}}
{{- with .podAnnotations }}{{ toYaml . }}{{ end }}
{{- end }}

{{/* Pod spec: priority class, node selector and tolerations. */}}
{{- define "harel-stack.ext.scheduling" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Container: more environment entries (after the chart's), envFrom sources, volume mounts. */}}
{{- define "harel-stack.ext.env" -}}
{{- with .extraEnv }}{{ toYaml . }}{{ end }}
{{- end }}

{{- define "harel-stack.ext.envFrom" -}}
{{- with .extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "harel-stack.ext.volumeMounts" -}}
{{- with .extraVolumeMounts }}{{ toYaml . }}{{ end }}
{{- end }}

{{- define "harel-stack.ext.volumes" -}}
{{- with .extraVolumes }}{{ toYaml . }}{{ end }}
{{- end }}

{{/*
Containers. initContainers run before the chart's own; sidecars run beside the chart's containers. In a Job a
plain sidecar would keep the pod from ever completing, so jobs.sidecars render as native sidecars (init
containers with restartPolicy Always, Kubernetes 1.29+), which stop when the Job's containers are done: call
with (dict "values" .Values.jobs "native" true).
*/}}
{{- define "harel-stack.ext.initContainers" -}}
{{- with .values.initContainers }}{{ toYaml . }}{{ end }}
{{- if .native }}
{{- range .values.sidecars }}
{{ list (merge (dict "restartPolicy" "Always") .) | toYaml }}
{{- end }}
{{- end }}
{{- end }}

{{- define "harel-stack.ext.sidecars" -}}
{{- with .sidecars }}{{ toYaml . }}{{ end }}
{{- end }}

{{/*
Topology spread: (dict "values" <workload values> "selector" <matchLabels YAML>). The workload's
topologySpreadConstraints replace the chart's when set; otherwise one constraint by zone and one by node, each
soft (ScheduleAnyway: prefer, still schedule when it cannot spread) or hard (DoNotSchedule: stay Pending rather
than crowd) as <workload>.spread.zone and .node say. A hard zone spread needs the topology.kubernetes.io/zone label on
every node: nodes without it are left out. Nodes whose taints the pods do not tolerate are left out of the count
(nodeTaintsPolicy Honor): an empty tainted node, a control plane's, would otherwise hold a hard spread at one pod per
node.
*/}}
{{- define "harel-stack.ext.topologySpread" -}}
{{- if .values.topologySpreadConstraints }}
{{- toYaml .values.topologySpreadConstraints }}
{{- else }}
{{- $modes := dict "soft" "ScheduleAnyway" "hard" "DoNotSchedule" }}
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  nodeTaintsPolicy: Honor
  whenUnsatisfiable: {{ get $modes .values.spread.zone }}
  labelSelector:
    matchLabels:
      {{- .selector | nindent 6 }}
  {{- with .matchLabelKeys }}
  matchLabelKeys:
    {{- toYaml . | nindent 4 }}
  {{- end }}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  nodeTaintsPolicy: Honor
  whenUnsatisfiable: {{ get $modes .values.spread.node }}
  labelSelector:
    matchLabels:
      {{- .selector | nindent 6 }}
  {{- with .matchLabelKeys }}
  matchLabelKeys:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
Images: repository@digest when a digest is given (the registry cannot move it), else repository:tag.
Call with (dict "image" <image values> "defaultTag" <tag when image.tag is empty>).
*/}}
{{- define "harel-stack.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .defaultTag .image.tag) }}
{{- end }}
{{- end }}

{{/*
mongodb.extraFlags may not contradict what the chart starts mongod with: each flag below is the chart's, and the
message names the value that sets it. A flag is an entry starting with "-", as --name or --name=value; an entry
without a leading "-" is the value of the flag before it.
*/}}
{{- define "harel-stack.mongodb.checkExtraFlags" -}}
{{- $owned := dict
  "--replSet" "mongodb.replicaSetName sets it"
  "--keyFile" "the chart sets it: members authenticate to each other with the keyfile of mongodb.auth"
  "--clusterAuthMode" "the chart sets it: members authenticate to each other with the keyfile of mongodb.auth"
  "--bind_ip" "the chart sets --bind_ip_all: members and clients reach each member by its DNS name"
  "--bind_ip_all" "the chart sets it: members and clients reach each member by its DNS name"
  "--auth" "the chart sets it: authentication is always on"
  "--noauth" "the chart sets --auth: authentication is always on"
  "--transitionToAuth" "the chart sets --auth: authentication is always on"
  "--port" "mongodb.service.port sets it"
  "--dbpath" "the chart sets it: the data volume at /data/db"
  "--tlsMode" "tls.mode sets it"
  "--sslMode" "tls.mode sets it"
  "--tlsCertificateKeyFile" "tls.existingSecret sets it"
  "--tlsCAFile" "tls.existingSecret sets it"
  "--tlsAllowConnectionsWithoutCertificates" "tls.mode sets it"
  "--config" "a configuration file would override the flags the chart sets; pass each setting as a flag"
  "-f" "a configuration file would override the flags the chart sets; pass each setting as a flag"
  "--fork" "mongod must stay in the foreground: it is the container's process"
}}
{{- range .Values.mongodb.extraFlags }}
{{- if hasPrefix "-" . }}
{{- $flag := first (splitList "=" .) }}
{{- with get $owned $flag }}
{{- fail (printf "mongodb.extraFlags: %s is not yours to set (%s); remove it from mongodb.extraFlags" $flag .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The pod spec of every run-to-completion pod (the init and operator-users Jobs, the backup CronJob's pods, the
helm test pod): jobs' priority class, node selector, tolerations and affinity. No default affinity: they run
briefly, anywhere.
*/}}
{{- define "harel-stack.jobs.podSpec" -}}
{{- include "harel-stack.ext.scheduling" .Values.jobs }}
{{- with .Values.jobs.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The environment names the chart sets in the containers each workload's extraEnv reaches (worker: the worker
container; mongodb: mongod; jobs: every container of a Job pod). An extraEnv entry of the same name would silently
override the chart's (the last entry wins), so it is refused, naming the value; tests/infra/test_helm.py holds these
lists to what the templates render.
*/}}
{{- define "harel-stack.ext.checkExtraEnv" -}}
{{- $chart := dict
  "worker" (list "HAREL_MONGO_URL_FILE" "HAREL_CONNECT_DEADLINE" "HAREL_HTTP_PORT" "HAREL_DRAIN_SECONDS" "HAREL_LOG_FORMAT")
  "mongodb" (list "HOME")
  "jobs" (list "HOME" "HAREL_MONGO_URL_FILE" "HAREL_CONNECT_DEADLINE" "HAREL_MONGO_ROOT_PASSWORD_FILE" "HAREL_MONGO_PREVIOUS_ROOT_PASSWORD_FILE" "HAREL_APP_PASSWORD_FILE" "HAREL_MONITOR_PASSWORD_FILE" "HAREL_BACKUP_PASSWORD_FILE" "HAREL_BACKUP_SETTINGS" "HAREL_OPS_USERS" "AWS_ACCESS_KEY_ID_FILE" "AWS_SECRET_ACCESS_KEY_FILE")
}}
{{- range $workload, $names := $chart }}
{{- range (get $.Values $workload).extraEnv }}
{{- if has .name $names }}
{{- fail (printf "%s.extraEnv: %s is set by the chart (from its own values); remove it from %s.extraEnv" $workload .name $workload) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
