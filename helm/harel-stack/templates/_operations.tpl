{{/*
Day-2 operations of the chart's MongoDB: the exporter, the backups, and the two operator users they run as
(created by the ops-users Job). Names and settings shared by their templates.
*/}}

{{- define "harel-stack.ops.usersNeeded" -}}
{{- if and .Values.mongodb.enabled (or .Values.mongodbExporter.enabled .Values.backup.enabled) }}true{{ end }}
{{- end }}

{{- define "harel-stack.ops.name" -}}
{{- printf "%s-mongodb-ops" (include "harel-stack.fullname" .) }}
{{- end }}

{{- define "harel-stack.ops.authSecretName" -}}
{{- default (printf "%s-mongodb-ops-auth" (include "harel-stack.fullname" .)) .Values.opsUsers.existingSecret }}
{{- end }}

{{- define "harel-stack.exporter.name" -}}
{{- printf "%s-mongodb-exporter" (include "harel-stack.fullname" .) }}
{{- end }}

{{- define "harel-stack.backup.name" -}}
{{- printf "%s-backup" (include "harel-stack.fullname" .) }}
{{- end }}

{{- define "harel-stack.backup.claimName" -}}
{{- default (include "harel-stack.backup.name" .) .Values.backup.pvc.existingClaim }}
{{- end }}

{{- define "harel-stack.exporter.image" -}}
{{- include "harel-stack.image" (dict "image" .Values.mongodbExporter.image "defaultTag" "") }}
{{- end }}

{{- define "harel-stack.backup.s3Image" -}}
{{- include "harel-stack.image" (dict "image" .Values.backup.s3.image "defaultTag" "") }}
{{- end }}

{{/*
Settings of ops-users.js (its HAREL_OPS_USERS), as JSON: which users to make, and how to reach the primary.
*/}}
{{- define "harel-stack.ops.usersConfig" -}}
{{- $sharded := include "harel-stack.mongodb.sharded" . }}
{{- /* A sharded cluster's users are made through its routers (no replica set named): they are the cluster's. */}}
{{- $config := dict
  "hosts" (ternary (list (include "harel-stack.mongodb.routerHost" .)) (splitList "," (include "harel-stack.mongodb.dataHosts" .)) (not (empty $sharded)))
  "replicaSetName" (ternary nil .Values.mongodb.replicaSetName (not (empty $sharded)))
  "rootUsername" .Values.mongodb.auth.rootUsername
  "database" .Values.mongodb.database
  "tlsCAFile" (ternary "/var/run/harel/tls-secret/ca.crt" nil (not (empty (include "harel-stack.tls.clients" .))))
  "deadlineSeconds" (int .Values.mongodb.init.deadlineSeconds)
  "monitor" (ternary (dict "username" .Values.mongodbExporter.username) nil .Values.mongodbExporter.enabled)
  "backup" (ternary (dict "username" .Values.backup.username) nil .Values.backup.enabled)
}}
{{- toJson $config }}
{{- end }}

{{/*
The exporter's targets: one mongodb:// URI per data member, each reached directly (the exporter reports that
member's own state), comma-separated as --mongodb.uri takes them.
*/}}
{{- define "harel-stack.exporter.uris" -}}
{{- $query := "" }}
{{- if include "harel-stack.tls.clients" . }}
{{- $query = printf "?tls=true&tlsCAFile=%s/ca.crt" (include "harel-stack.tls.caDir" .) }}
{{- end }}
{{- $uris := list }}
{{- range $host := splitList "," (include "harel-stack.mongodb.dataHosts" .) }}
{{- $uris = append $uris (printf "mongodb://%s/admin%s" $host $query) }}
{{- end }}
{{- join "," $uris }}
{{- end }}

{{/*
The exporter beside each router of topology sharded (a container of the mongos Deployment's pods): its one target is
the router of its own pod, over the pod's loopback. With TLS the CA is checked but not the name: the certificate
names the routers' Service, not 127.0.0.1, and a loopback connection leaves the pod's network namespace never.
*/}}
{{- define "harel-stack.exporter.routerUri" -}}
{{- $query := "" }}
{{- if include "harel-stack.tls.clients" . }}
{{- $query = printf "?tls=true&tlsCAFile=%s/ca.crt&tlsAllowInvalidHostnames=true" (include "harel-stack.tls.caDir" .) }}
{{- end }}
{{- printf "mongodb://127.0.0.1:%d/admin%s" (int .Values.mongodb.service.port) $query }}
{{- end }}

{{/*
The backup job's target, as recorded in its status document.
*/}}
{{- define "harel-stack.backup.target" -}}
{{- if eq .Values.backup.target "s3" }}
{{- printf "s3://%s/%s" .Values.backup.s3.bucket .Values.backup.s3.prefix }}
{{- else }}
{{- printf "pvc:%s" (include "harel-stack.backup.claimName" .) }}
{{- end }}
{{- end }}

{{/*
Settings of harel-backup.sh, as the KEY=value lines it sources (no secret among them).
*/}}
{{- define "harel-stack.backup.settings" -}}
{{- if include "harel-stack.mongodb.sharded" . -}}
HAREL_BACKUP_ROUTERS={{ include "harel-stack.mongodb.routerHost" . | quote }}
HAREL_BACKUP_PAUSE_TIMEOUT={{ .Values.backup.pauseTimeoutSeconds }}
{{- else -}}
HAREL_BACKUP_HOSTS={{ include "harel-stack.mongodb.dataHosts" . | quote }}
HAREL_BACKUP_REPLICA_SET={{ .Values.mongodb.replicaSetName | quote }}
{{- end }}
HAREL_BACKUP_USER={{ .Values.backup.username | quote }}
HAREL_BACKUP_DATABASE={{ .Values.mongodb.database | quote }}
HAREL_BACKUP_DIR=/backups
HAREL_BACKUP_KEEP={{ .Values.backup.keep }}
HAREL_BACKUP_JOB={{ printf "helm/%s/%s" .Release.Namespace .Release.Name | quote }}
HAREL_BACKUP_TARGET={{ include "harel-stack.backup.target" . | quote }}
HAREL_BACKUP_TLS_CA={{ ternary "/var/run/harel/tls-secret/ca.crt" "" (not (empty (include "harel-stack.tls.clients" .))) | quote }}
{{- if eq .Values.backup.target "s3" }}
HAREL_BACKUP_S3_BUCKET={{ .Values.backup.s3.bucket | quote }}
HAREL_BACKUP_S3_PREFIX={{ .Values.backup.s3.prefix | quote }}
HAREL_BACKUP_S3_ENDPOINT={{ .Values.backup.s3.endpoint | quote }}
AWS_REGION={{ .Values.backup.s3.region | quote }}
{{- end }}
{{- end }}

{{/*
What every step of the backup pod shares: its settings file, the backup user's password (a file), a writable HOME.
*/}}
{{- define "harel-stack.backup.env" -}}
- name: HOME
  value: /tmp
- name: HAREL_BACKUP_SETTINGS
  value: /var/run/harel/backup/backup.env
- name: HAREL_BACKUP_PASSWORD_FILE
  value: /var/run/harel/ops-auth/backup-password
{{- with include "harel-stack.ext.env" .Values.jobs }}
{{ . }}
{{- end }}
{{- end }}

{{- define "harel-stack.backup.volumeMounts" -}}
- name: backup-scripts
  mountPath: /var/run/harel/backup
  readOnly: true
- name: backups
  mountPath: /backups
- name: tmp
  mountPath: /tmp
- name: ops-auth
  mountPath: /var/run/harel/ops-auth
  readOnly: true
{{- if include "harel-stack.tls.on" . }}
- name: tls-secret
  mountPath: /var/run/harel/tls-secret
  readOnly: true
{{- end }}
{{- with include "harel-stack.ext.volumeMounts" .Values.jobs }}
{{ . }}
{{- end }}
{{- end }}
