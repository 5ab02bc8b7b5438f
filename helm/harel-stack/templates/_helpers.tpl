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
{{- printf "%s:%s" .Values.mongodb.image.repository .Values.mongodb.image.tag }}
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
The application URL for the chart's replica set. Call with (dict "ctx" $ "password" "<plain>").
The password is one the chart generated (alphanumeric) and the user name is restricted by the schema
to URL-safe characters, so neither needs escaping.
*/}}
{{- define "harel-stack.mongodb.appUrl" -}}
{{- $ctx := .ctx }}
{{- $query := printf "replicaSet=%s&authSource=admin" $ctx.Values.mongodb.replicaSetName }}
{{- if $ctx.Values.tls.enabled }}
{{- $query = printf "%s&tls=true&tlsCAFile=%s/ca.crt" $query (include "harel-stack.tls.caDir" $ctx) }}
{{- end }}
{{- printf "mongodb://%s:%s@%s/%s?%s" $ctx.Values.mongodb.auth.appUsername .password (include "harel-stack.mongodb.dataHosts" $ctx) $ctx.Values.mongodb.database $query }}
{{- end }}

{{/*
Where the workers and the test pod read HAREL_MONGO_URL from: always a Secret.
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
{{- printf "%s:%s" .Values.worker.image.repository (default .Chart.AppVersion .Values.worker.image.tag) }}
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
mongosh options for a local probe: with TLS on, the member's certificate names its DNS name, not
localhost, so host-name checking is off for this one loopback connection (the CA is still checked).
*/}}
{{- define "harel-stack.mongodb.probeShell" -}}
mongosh --quiet --norc --port {{ .Values.mongodb.service.port }}
{{- if .Values.tls.enabled }} --tls --tlsCAFile /var/run/harel/tls-secret/ca.crt --tlsAllowInvalidHostnames{{ end }}
{{- end }}

{{/*
Checks that need two values at once (JSON Schema draft-07 cannot compare two numbers).
*/}}
{{- define "harel-stack.validate" -}}
{{- $scaling := .Values.worker.autoscaling }}
{{- if and $scaling.enabled (lt (int $scaling.maxReplicas) (int $scaling.minReplicas)) }}
{{- fail (printf "worker.autoscaling.maxReplicas (%d) must be at least worker.autoscaling.minReplicas (%d)" (int $scaling.maxReplicas) (int $scaling.minReplicas)) }}
{{- end }}
{{- end }}

{{/*
Settings of the init script (files/init-replica-set.js), as JSON.
*/}}
{{- define "harel-stack.mongodb.initConfig" -}}
{{- $config := dict
  "replicaSetName" .Values.mongodb.replicaSetName
  "dataMembers" (splitList "," (include "harel-stack.mongodb.dataHosts" .))
  "arbiter" (ternary (include "harel-stack.mongodb.arbiterHost" .) nil .Values.mongodb.arbiter.enabled)
  "database" .Values.mongodb.database
  "rootUsername" .Values.mongodb.auth.rootUsername
  "appUsername" .Values.mongodb.auth.appUsername
  "tlsCAFile" (ternary "/var/run/harel/tls-secret/ca.crt" nil .Values.tls.enabled)
  "deadlineSeconds" (int .Values.mongodb.init.deadlineSeconds)
}}
{{- toPrettyJson $config }}
{{- end }}

{{/*
HAREL_MONGO_URL, always from a Secret, and the CA volume the URL refers to when TLS is on.
Shared by the workers and the helm test pod.
*/}}
{{- define "harel-stack.worker.urlEnv" -}}
- name: HAREL_MONGO_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "harel-stack.urlSecretName" . }}
      key: {{ include "harel-stack.urlSecretKey" . }}
{{- end }}

{{- define "harel-stack.worker.caVolumeMount" -}}
{{- if .Values.tls.enabled }}
- name: tls-ca
  mountPath: {{ include "harel-stack.tls.caDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "harel-stack.worker.caVolume" -}}
{{- if .Values.tls.enabled }}
- name: tls-ca
  secret:
    secretName: {{ .Values.tls.existingSecret }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end }}
