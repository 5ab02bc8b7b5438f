{{/*
Names. Every name is derived from the fullname, cut to 36 characters: the longest derived name,
"<fullname>-mongodb-arbiter", must leave room for the StatefulSet's revision-hash label (63 max).
*/}}
{{- define "harel-stack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 36 | trimSuffix "-" }}
{{- end }}

{{- define "harel-stack.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 36 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 36 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 36 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "harel-stack.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels. Call with (dict "ctx" $ "component" "worker").
*/}}
{{- define "harel-stack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "harel-stack.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "harel-stack.labels" -}}
helm.sh/chart: {{ include "harel-stack.chart" .ctx }}
{{ include "harel-stack.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: harel-stack
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Pods carrying this label may reach MongoDB through the NetworkPolicy: the workers, the init Job and
the helm test pod.
*/}}
{{- define "harel-stack.mongodbClientLabel" -}}
harel-stack/mongodb-client: "true"
{{- end }}

{{/*
Every replica-set member (data members and the arbiter) carries this label: the headless Service
selects by it, so each member has a stable DNS name, and members may reach each other.
*/}}
{{- define "harel-stack.replicaSetMemberLabel" -}}
harel-stack/replica-set-member: "true"
{{- end }}

{{- define "harel-stack.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "harel-stack.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
MongoDB object names.
*/}}
{{- define "harel-stack.mongodb.fullname" -}}
{{- printf "%s-mongodb" (include "harel-stack.fullname" .) }}
{{- end }}

{{- define "harel-stack.mongodb.arbiterName" -}}
{{- printf "%s-mongodb-arbiter" (include "harel-stack.fullname" .) }}
{{- end }}

{{- define "harel-stack.mongodb.headlessName" -}}
{{- printf "%s-mongodb-headless" (include "harel-stack.fullname" .) }}
{{- end }}

{{- define "harel-stack.mongodb.scriptsName" -}}
{{- printf "%s-mongodb-scripts" (include "harel-stack.fullname" .) }}
{{- end }}

{{- define "harel-stack.mongodb.authSecretName" -}}
{{- default (printf "%s-mongodb-auth" (include "harel-stack.fullname" .)) .Values.mongodb.auth.existingSecret }}
{{- end }}

{{- define "harel-stack.mongodb.image" -}}
{{- include "harel-stack.image" (dict "image" .Values.mongodb.image "defaultTag" "") }}
{{- end }}

{{/*
The stable DNS name of one StatefulSet pod: (dict "ctx" $ "set" "<statefulset name>" "ordinal" 0).
*/}}
{{- define "harel-stack.mongodb.podHost" -}}
{{- $ctx := .ctx }}
{{- printf "%s-%d.%s.%s.svc.%s:%d" .set (int .ordinal) (include "harel-stack.mongodb.headlessName" $ctx) $ctx.Release.Namespace $ctx.Values.clusterDomain (int $ctx.Values.mongodb.service.port) }}
{{- end }}

{{/*
The data members' host:port list, comma-separated: the seed list of every connection URL.
*/}}
{{- define "harel-stack.mongodb.dataHosts" -}}
{{- $hosts := list }}
{{- range $i := until (int .Values.mongodb.members) }}
{{- $hosts = append $hosts (include "harel-stack.mongodb.podHost" (dict "ctx" $ "set" (include "harel-stack.mongodb.fullname" $) "ordinal" $i)) }}
{{- end }}
{{- join "," $hosts }}
{{- end }}

{{/*
Topology sharded, as "true" or "".
*/}}
{{- define "harel-stack.mongodb.sharded" -}}
{{- if and .Values.mongodb.enabled (eq .Values.mongodb.topology "sharded") }}true{{ end }}
{{- end }}

{{- define "harel-stack.mongodb.mongosName" -}}
{{- printf "%s-mongodb-mongos" (include "harel-stack.fullname" .) }}
{{- end }}

{{/*
The replica sets of a sharded cluster, as a JSON list, config servers first: the StatefulSet, its component
label, the replica-set name (cfg, shard0, shard1, ...; a shard's name in the cluster is its set's), its members'
host:port list, mongod's cluster role, and the volume size and resources of its members.
*/}}
{{- define "harel-stack.mongodb.shardedSets" -}}
{{- $sharded := .Values.mongodb.sharded }}
{{- $sets := list (dict "statefulSet" (printf "%s-cfg" (include "harel-stack.mongodb.fullname" .)) "component" "mongodb-cfg" "replicaSetName" "cfg" "role" "configsvr" "members" (int $sharded.configsvr.replicaCount) "size" $sharded.configsvr.persistence.size "resources" $sharded.configsvr.resources) }}
{{- range $index := until (int $sharded.shards) }}
{{- $sets = append $sets (dict "statefulSet" (printf "%s-shard%d" (include "harel-stack.mongodb.fullname" $) $index) "component" (printf "mongodb-shard%d" $index) "replicaSetName" (printf "shard%d" $index) "role" "shardsvr" "members" (int $sharded.shardsvr.replicaCount) "size" $.Values.mongodb.persistence.size "resources" $.Values.mongodb.resources) }}
{{- end }}
{{- $withHosts := list }}
{{- range $set := $sets }}
{{- $hosts := list }}
{{- range $i := until (int $set.members) }}
{{- $hosts = append $hosts (include "harel-stack.mongodb.podHost" (dict "ctx" $ "set" $set.statefulSet "ordinal" $i)) }}
{{- end }}
{{- $withHosts = append $withHosts (merge (dict "dataMembers" $hosts) $set) }}
{{- end }}
{{- toJson $withHosts }}
{{- end }}

{{/*
The routers' address the workers use: the mongos Service.
*/}}
{{- define "harel-stack.mongodb.routerHost" -}}
{{- printf "%s.%s.svc.%s:%d" (include "harel-stack.mongodb.mongosName" .) .Release.Namespace .Values.clusterDomain (int .Values.mongodb.service.port) }}
{{- end }}

{{- define "harel-stack.mongodb.arbiterHost" -}}
{{- include "harel-stack.mongodb.podHost" (dict "ctx" . "set" (include "harel-stack.mongodb.arbiterName" .) "ordinal" 0) }}
{{- end }}

{{/*
The CA path inside worker, test and init pods when TLS is on.
*/}}
{{- define "harel-stack.tls.caDir" -}}
/etc/harel/tls
{{- end }}

{{/*
TLS switches, as "true" or "": the members have a certificate (any mode but disabled), and clients use TLS
(preferTLS and requireTLS: by then every member accepts TLS, because allowTLS was rolled out before).
*/}}
{{- define "harel-stack.tls.on" -}}
{{- if ne .Values.tls.mode "disabled" }}true{{ end }}
{{- end }}

{{- define "harel-stack.tls.clients" -}}
{{- if has .Values.tls.mode (list "preferTLS" "requireTLS") }}true{{ end }}
{{- end }}

{{/*
The application URL for the chart's replica set. Call with (dict "ctx" $ "password" "<plain>").
The password is one the chart generated (alphanumeric) and the user name is restricted by the schema
to URL-safe characters, so neither needs escaping.
*/}}
{{- define "harel-stack.mongodb.appUrl" -}}
{{- $ctx := .ctx }}
{{- $query := printf "replicaSet=%s&authSource=admin" $ctx.Values.mongodb.replicaSetName }}
{{- $hosts := include "harel-stack.mongodb.dataHosts" $ctx }}
{{- if include "harel-stack.mongodb.sharded" $ctx }}
{{- /* The routers: no replicaSet option (a mongos is no member of a set). */}}
{{- $query = "authSource=admin" }}
{{- $hosts = include "harel-stack.mongodb.routerHost" $ctx }}
{{- end }}
{{- if include "harel-stack.tls.clients" $ctx }}
{{- $query = printf "%s&tls=true&tlsCAFile=%s/ca.crt" $query (include "harel-stack.tls.caDir" $ctx) }}
{{- end }}
{{- printf "mongodb://%s:%s@%s/%s?%s" $ctx.Values.mongodb.auth.appUsername .password $hosts $ctx.Values.mongodb.database $query }}
{{- end }}

{{/*
Where the workers and the test pod read their URL from: always a Secret, mounted as a file.
*/}}
{{- define "harel-stack.urlSecretName" -}}
{{- if .Values.mongodb.enabled }}
{{- include "harel-stack.mongodb.authSecretName" . }}
{{- else if .Values.externalMongodb.existingSecret }}
{{- .Values.externalMongodb.existingSecret }}
{{- else }}
{{- printf "%s-external-mongodb" (include "harel-stack.fullname" .) }}
{{- end }}
{{- end }}

{{- define "harel-stack.urlSecretKey" -}}
{{- if and (not .Values.mongodb.enabled) .Values.externalMongodb.existingSecret }}
{{- .Values.externalMongodb.existingSecretKey }}
{{- else }}
{{- print "mongodb-url" }}
{{- end }}
{{- end }}

{{- define "harel-stack.worker.image" -}}
{{- include "harel-stack.image" (dict "image" .Values.worker.image "defaultTag" .Chart.AppVersion) }}
{{- end }}

{{- define "harel-stack.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Security contexts. Every container runs as a non-root user, without privilege escalation, without
capabilities, on a read-only root filesystem (writable paths are emptyDir volumes), under the
runtime's default seccomp profile. The mongo image runs mongod as uid/gid 999; the worker image
as uid/gid 10001.
*/}}
{{- define "harel-stack.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: {{ . }}
fsGroup: {{ . }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "harel-stack.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: {{ . }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
The readiness check of a member: mongosh runs files/member-ready.js over loopback, no shell around it. Only
under requireTLS must it use TLS; the member's certificate names its DNS name, not localhost, so host-name
checking is off for this one loopback connection (the CA is still checked).
*/}}
{{- define "harel-stack.mongodb.readinessCommand" -}}
- mongosh
- --quiet
- --norc
- --port
- {{ .Values.mongodb.service.port | quote }}
{{- if eq .Values.tls.mode "requireTLS" }}
- --tls
- --tlsCAFile
- /var/run/harel/tls-secret/ca.crt
- --tlsAllowInvalidHostnames
{{- end }}
- /var/run/harel/scripts/member-ready.js
{{- end }}

{{/*
Checks that need two values at once (JSON Schema draft-07 cannot compare two numbers).
*/}}
{{- define "harel-stack.validate" -}}
{{- $scaling := .Values.worker.autoscaling }}
{{- if and $scaling.enabled (lt (int $scaling.maxReplicas) (int $scaling.minReplicas)) }}
{{- fail (printf "worker.autoscaling.maxReplicas (%d) must be at least worker.autoscaling.minReplicas (%d)" (int $scaling.maxReplicas) (int $scaling.minReplicas)) }}
{{- end }}
{{- $keda := .Values.worker.keda }}
{{- if and $keda.enabled $scaling.enabled }}
{{- fail "worker.autoscaling.enabled and worker.keda.enabled are both true: each makes a HorizontalPodAutoscaler for the workers (KEDA makes its own from the ScaledObject), and two would fight over the replica count. Turn one off" }}
{{- end }}
{{- if and $keda.enabled (lt (int $keda.maxReplicas) (int $keda.minReplicas)) }}
{{- fail (printf "worker.keda.maxReplicas (%d) must be at least worker.keda.minReplicas (%d)" (int $keda.maxReplicas) (int $keda.minReplicas)) }}
{{- end }}
{{- /* Both ServiceMonitors scrape through the NetworkPolicies, which admit only worker.metrics.from. */}}
{{- $monitored := or .Values.worker.metrics.serviceMonitor.enabled (and .Values.mongodbExporter.enabled .Values.mongodbExporter.serviceMonitor.enabled) }}
{{- if and $monitored .Values.networkPolicy.enabled (empty .Values.worker.metrics.from) }}
{{- fail "a ServiceMonitor is enabled but worker.metrics.from is empty: the NetworkPolicies would let no one reach /metrics, so Prometheus could scrape nothing. Set worker.metrics.from to your Prometheus, e.g. [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]" }}
{{- end }}
{{- include "harel-stack.ext.checkExtraEnv" . }}
{{- $kube := .Capabilities.KubeVersion.Version }}
{{- if and .Values.jobs.sidecars (semverCompare "<1.29-0" $kube) }}
{{- fail (printf "jobs.sidecars needs Kubernetes 1.29 or newer (native sidecar containers; this is %s): a plain sidecar would keep every Job running forever" $kube) }}
{{- end }}
{{- if .Values.mongodb.enabled }}
{{- include "harel-stack.mongodb.checkExtraFlags" . }}
{{- if include "harel-stack.mongodb.sharded" . }}
{{- include "harel-stack.mongodb.checkShardedScale" . }}
{{- if lt (int .Values.mongodb.sharded.partitions) (int .Values.mongodb.sharded.shards) }}
{{- fail (printf "mongodb.sharded.partitions (%d) must be at least mongodb.sharded.shards (%d): every shard's zone is a range of at least one partition" (int .Values.mongodb.sharded.partitions) (int .Values.mongodb.sharded.shards)) }}
{{- end }}
{{- else }}
{{- include "harel-stack.mongodb.checkScaleStep" . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
A shrink must leave running a majority of the voting members running now: the StatefulSet deletes the pods
before the init Job can take them out of the replica-set configuration, and a set whose remaining members
are no majority has no primary to reconfigure. JSON Schema cannot compare with what is deployed, so this
reads the live StatefulSets (lookup; offline renders see none and cannot check: docs/kubernetes.md, "Add or remove a member").
*/}}
{{- define "harel-stack.mongodb.checkScaleStep" -}}
{{- $data := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "harel-stack.mongodb.fullname" .) }}
{{- if $data }}
{{- $arbiter := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "harel-stack.mongodb.arbiterName" .) }}
{{- $now := add (int $data.spec.replicas) (ternary 1 0 (not (empty $arbiter))) }}
{{- $kept := add (min (int $data.spec.replicas) (int .Values.mongodb.members)) (ternary 1 0 (and (not (empty $arbiter)) .Values.mongodb.arbiter.enabled)) }}
{{- if le (mul $kept 2) $now }}
{{- fail (printf "mongodb.members: going from %d to %d voting members at once would leave %d of %d running, no majority: the set would lose its primary before the init Job could remove the members. Shrink in steps that keep a majority (docs/kubernetes.md, \"Add or remove a member\")" $now (add (int .Values.mongodb.members) (ternary 1 0 .Values.mongodb.arbiter.enabled)) $kept $now) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Topology sharded, against the live StatefulSets (lookup; offline renders see none): each set shrinks only while a
majority of its members keeps running, as checkScaleStep says for the one replica set; and no shard's StatefulSet
goes away - its chunks are the cluster's data until `removeShard` has drained them, and deleting its pods first
would leave them unreachable.
*/}}
{{- define "harel-stack.mongodb.checkShardedScale" -}}
{{- range $set := include "harel-stack.mongodb.shardedSets" . | fromJsonArray }}
{{- $live := lookup "apps/v1" "StatefulSet" $.Release.Namespace $set.statefulSet }}
{{- if $live }}
{{- $now := int $live.spec.replicas }}
{{- $kept := min $now (int $set.members) }}
{{- if le (mul $kept 2) $now }}
{{- fail (printf "%s: going from %d to %d members at once would leave %d of %d running, no majority: shrink in steps that keep one (docs/sharded-clusters.md)" $set.replicaSetName $now (int $set.members) $kept $now) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $index := untilStep (int .Values.mongodb.sharded.shards) 16 1 }}
{{- if lookup "apps/v1" "StatefulSet" $.Release.Namespace (printf "%s-shard%d" (include "harel-stack.mongodb.fullname" $) $index) }}
{{- fail (printf "mongodb.sharded.shards: shard%d runs and holds chunks of the cluster's data; a shard leaves by removeShard draining it first, not by an upgrade (docs/sharded-clusters.md)" $index) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Settings of the init Job (rs_init.py in the worker image), as JSON: the wanted members, database and users.
*/}}
{{- define "harel-stack.mongodb.initConfig" -}}
{{- if include "harel-stack.mongodb.sharded" . }}
{{- $sets := include "harel-stack.mongodb.shardedSets" . | fromJsonArray }}
{{- $shards := list }}
{{- range $set := rest $sets }}
{{- $shards = append $shards (dict "replicaSetName" $set.replicaSetName "dataMembers" $set.dataMembers) }}
{{- end }}
{{- $first := first $sets }}
{{- $config := dict
  "configServer" (dict "replicaSetName" $first.replicaSetName "dataMembers" $first.dataMembers)
  "shards" $shards
  "routers" (list (include "harel-stack.mongodb.routerHost" .))
  "partitions" (int .Values.mongodb.sharded.partitions)
  "database" .Values.mongodb.database
  "rootUsername" .Values.mongodb.auth.rootUsername
  "appUsername" .Values.mongodb.auth.appUsername
  "tlsCAFile" (ternary (printf "%s/ca.crt" (include "harel-stack.tls.caDir" .)) nil (not (empty (include "harel-stack.tls.clients" .))))
}}
{{- toPrettyJson $config }}
{{- else }}
{{- $config := dict
  "replicaSetName" .Values.mongodb.replicaSetName
  "dataMembers" (splitList "," (include "harel-stack.mongodb.dataHosts" .))
  "arbiter" (ternary (include "harel-stack.mongodb.arbiterHost" .) nil .Values.mongodb.arbiter.enabled)
  "database" .Values.mongodb.database
  "rootUsername" .Values.mongodb.auth.rootUsername
  "appUsername" .Values.mongodb.auth.appUsername
  "tlsCAFile" (ternary (printf "%s/ca.crt" (include "harel-stack.tls.caDir" .)) nil (not (empty (include "harel-stack.tls.clients" .))))
}}
{{- toPrettyJson $config }}
{{- end }}
{{- end }}

{{/*
The workers' and the test pod's URL: a file from the Secret (HAREL_MONGO_URL_FILE), never an environment
value; and the CA the URL refers to when TLS is on. The workers wait for the database as long as it takes
(HAREL_CONNECT_DEADLINE=0), not ready meanwhile, instead of exiting.
*/}}
{{- define "harel-stack.worker.urlEnv" -}}
- name: HAREL_MONGO_URL_FILE
  value: /etc/harel/mongodb/url
- name: HAREL_CONNECT_DEADLINE
  value: "0"
{{- end }}

{{/*
The members' CA for a client pod (workers, test pod, exporter), mounted at tls.caDir when TLS is on.
*/}}
{{- define "harel-stack.worker.caVolumeMount" -}}
{{- if include "harel-stack.tls.on" . }}
- name: tls-ca
  mountPath: {{ include "harel-stack.tls.caDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "harel-stack.worker.caVolume" -}}
{{- if include "harel-stack.tls.on" . }}
- name: tls-ca
  secret:
    secretName: {{ .Values.tls.existingSecret }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end }}

{{- define "harel-stack.worker.volumeMounts" -}}
- name: mongodb-url
  mountPath: /etc/harel/mongodb
  readOnly: true
{{- include "harel-stack.worker.caVolumeMount" . }}
{{- end }}

{{- define "harel-stack.worker.volumes" -}}
- name: mongodb-url
  secret:
    secretName: {{ include "harel-stack.urlSecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ include "harel-stack.urlSecretKey" . }}
        path: url
{{- include "harel-stack.worker.caVolume" . }}
{{- end }}

{{/*
The credentials of the chart's MongoDB, as JSON, the same in every template of one render: the Secret
already in the cluster (lookup), else, for the generated Secret, values generated once per render. Kept in
the values tree under a key of its own (harelStackRender), because a template cannot hand values to another.
Generated: keyfile, root-password, app-password (kept on upgrade), previous-root-password when the Secret
holds one (a rotation), mongodb-url rebuilt from the app password. With mongodb.auth.existingSecret and an
offline render, nothing can be looked up: empty.
*/}}
{{- define "harel-stack.mongodb.authData" -}}
{{- if not (hasKey .Values "harelStackRender") }}
{{- $name := include "harel-stack.mongodb.authSecretName" . }}
{{- $existing := (lookup "v1" "Secret" .Release.Namespace $name).data | default dict }}
{{- $data := dict }}
{{- if .Values.mongodb.auth.existingSecret }}
{{- $data = $existing }}
{{- else }}
{{- $_ := set $data "keyfile" (get $existing "keyfile" | default (randAlphaNum 756 | b64enc)) }}
{{- $_ := set $data "root-password" (get $existing "root-password" | default (randAlphaNum 32 | b64enc)) }}
{{- $_ := set $data "app-password" (get $existing "app-password" | default (randAlphaNum 32 | b64enc)) }}
{{- with get $existing "previous-root-password" }}
{{- $_ := set $data "previous-root-password" . }}
{{- end }}
{{- $_ := set $data "mongodb-url" (include "harel-stack.mongodb.appUrl" (dict "ctx" . "password" (b64dec (get $data "app-password"))) | b64enc) }}
{{- end }}
{{- $_ := set .Values "harelStackRender" (dict "auth" $data) }}
{{- end }}
{{- toJson .Values.harelStackRender.auth }}
{{- end }}

{{/*
A checksum of some keys of the credentials: (dict "ctx" $ "keys" (list "keyfile")). A changed value changes
the checksum, which rolls the pods (annotation) or starts a new init Job (its name). mongodb.auth.revision
is part of it: offline, where the Secret cannot be read, a new revision is the change.
*/}}
{{- define "harel-stack.mongodb.authChecksum" -}}
{{- $data := include "harel-stack.mongodb.authData" .ctx | fromJson }}
{{- $parts := list (printf "revision=%s" .ctx.Values.mongodb.auth.revision) }}
{{- range .keys }}
{{- $parts = append $parts (printf "%s=%s" . (get $data . | default "")) }}
{{- end }}
{{- join "\n" $parts | sha256sum }}
{{- end }}

{{/*
A checksum of a Secret in the cluster (lookup), e.g. the TLS certificate: "" offline.
*/}}
{{- define "harel-stack.secretChecksum" -}}
{{- (lookup "v1" "Secret" .ctx.Release.Namespace .name).data | default dict | toJson | sha256sum }}
{{- end }}

{{/*
NetworkPolicy egress rules. DNS: port 53 anywhere (the cluster's DNS service differs between distributions).
MongoDB: the release's members, or with an external MongoDB networkPolicy.externalMongodbTo (any address when
empty) on externalMongodb.port.
*/}}
{{- define "harel-stack.networkPolicy.dnsEgress" -}}
- ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end }}

{{- define "harel-stack.networkPolicy.mongodbEgress" -}}
{{- if .Values.mongodb.enabled }}
- to:
    - podSelector:
        matchLabels:
          app.kubernetes.io/instance: {{ .Release.Name }}
          {{- include "harel-stack.replicaSetMemberLabel" . | nindent 10 }}
  ports:
    - protocol: TCP
      port: {{ .Values.mongodb.service.port }}
{{- else }}
- ports:
    - protocol: TCP
      port: {{ .Values.externalMongodb.port }}
  {{- with .Values.networkPolicy.externalMongodbTo }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
