{{/*
One StatefulSet of replica-set members. Call with (dict "ctx" $ "arbiter" false) for the data members
and (dict "ctx" $ "arbiter" true) for the arbiter. Both share the start-up (keyfile prepared by an
init container, then `mongod --replSet ... --keyFile ... --bind_ip_all --auth`) and the probes; the
data members add persistent volumes and the root-user bootstrap on member 0.
A sharded cluster's sets (topology sharded) pass "set": one entry of harel-stack.mongodb.shardedSets (the
StatefulSet's name, component, replica-set name, members, cluster role, volume size and resources); each such
set spreads and keeps its members apart on its own, as the voters of one replica set do.
*/}}
{{- define "harel-stack.mongodb.statefulset" -}}
{{- $ := .ctx }}
{{- $arbiter := .arbiter }}
{{- $set := .set | default dict }}
{{- $component := ternary "arbiter" "mongodb" $arbiter }}
{{- $name := ternary (include "harel-stack.mongodb.arbiterName" $) (include "harel-stack.mongodb.fullname" $) $arbiter }}
{{- $replicas := ternary 1 (int $.Values.mongodb.members) $arbiter }}
{{- $replSet := $.Values.mongodb.replicaSetName }}
{{- $resources := ternary $.Values.mongodb.arbiter.resources $.Values.mongodb.resources $arbiter }}
{{- $size := $.Values.mongodb.persistence.size }}
{{- $port := int $.Values.mongodb.service.port }}
{{- $voters := printf "app.kubernetes.io/instance: %s\n%s" $.Release.Name (include "harel-stack.replicaSetMemberLabel" $) }}
{{- if $set }}
{{- $component = $set.component }}
{{- $name = $set.statefulSet }}
{{- $replicas = int $set.members }}
{{- $replSet = $set.replicaSetName }}
{{- $resources = $set.resources }}
{{- $size = $set.size }}
{{- end }}
{{- $selector := include "harel-stack.selectorLabels" (dict "ctx" $ "component" $component) }}
{{- if $set }}
{{- $voters = $selector }}
{{- end }}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ $name }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "harel-stack.labels" (dict "ctx" $ "component" $component) | nindent 4 }}
  {{- if and $.Values.tls.reloader (include "harel-stack.tls.on" $) }}
  annotations:
    # Stakater Reloader restarts the members (one at a time: RollingUpdate) when the certificate is renewed.
    secret.reloader.stakater.com/reload: {{ $.Values.tls.existingSecret | quote }}
  {{- end }}
spec:
  serviceName: {{ include "harel-stack.mongodb.headlessName" $ }}
  replicas: {{ $replicas }}
  # OrderedReady: one member at a time, each only once the one before is primary or secondary. The init Job
  # initiates the set with member 0, then adds each member as it starts (without a vote until it has caught
  # up), so a new member never counts towards the majority before it holds the data. Shrinking removes the
  # highest ordinals first, one at a time; the chart refuses a shrink that would leave no majority running.
  podManagementPolicy: OrderedReady
  updateStrategy:
    type: RollingUpdate
  {{- if not $arbiter }}
  persistentVolumeClaimRetentionPolicy:
    whenDeleted: {{ $.Values.mongodb.persistence.whenDeleted }}
    whenScaled: {{ $.Values.mongodb.persistence.whenScaled }}
  {{- end }}
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "harel-stack.labels" (dict "ctx" $ "component" $component) | nindent 8 }}
        {{- include "harel-stack.replicaSetMemberLabel" $ | nindent 8 }}
        {{- with include "harel-stack.ext.podLabels" $.Values.mongodb }}{{ . | nindent 8 }}{{ end }}
      annotations:
        # Each checksum rolls the members, one at a time, when what it covers changes: the bootstrap and
        # readiness scripts, the keyfile (a rotation), and the TLS certificate (a renewal).
        checksum/scripts: {{ print ($.Files.Get "files/bootstrap-root.sh") ($.Files.Get "files/bootstrap-root.js") ($.Files.Get "files/member-ready.js") | sha256sum }}
        checksum/keyfile: {{ include "harel-stack.mongodb.authChecksum" (dict "ctx" $ "keys" (list "keyfile")) }}
        {{- if include "harel-stack.tls.on" $ }}
        checksum/tls: {{ include "harel-stack.secretChecksum" (dict "ctx" $ "name" $.Values.tls.existingSecret) }}
        {{- end }}
        {{- with include "harel-stack.ext.podAnnotations" $.Values.mongodb }}{{ . | nindent 8 }}{{ end }}
    spec:
      serviceAccountName: {{ include "harel-stack.serviceAccountName" $ }}
      automountServiceAccountToken: false
      # mongod steps down and hands over the primary role on SIGTERM; give it time to do so.
      terminationGracePeriodSeconds: 60
      securityContext:
        {{- include "harel-stack.podSecurityContext" 999 | nindent 8 }}
      affinity:
        {{- if and (not $arbiter) $.Values.mongodb.affinity }}
        {{- toYaml $.Values.mongodb.affinity | nindent 8 }}
        {{- else }}
        # Soft: prefer one member per node, but still schedule on a cluster with fewer nodes.
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    {{- $voters | nindent 20 }}
        {{- end }}
      # Spread over zones and nodes counting every voter, the arbiter too: a zone or node lost takes as few votes as
      # the cluster allows (mongodb.spread: soft by default, hard on request).
      topologySpreadConstraints:
        {{- include "harel-stack.ext.topologySpread" (dict "values" $.Values.mongodb "selector" $voters) | trim | nindent 8 }}
      {{- with include "harel-stack.ext.scheduling" $.Values.mongodb | trim }}{{ . | nindent 6 }}{{ end }}
      initContainers:
        {{- with include "harel-stack.ext.initContainers" (dict "values" $.Values.mongodb) | trim }}{{ . | nindent 8 }}{{ end }}
        # mongod refuses a keyfile readable by anyone but its owner. A Secret volume's files belong
        # to root (readable by group 999 through fsGroup), so the keyfile is copied to a memory
        # volume, owned by uid 999 with mode 0400; with TLS the certificate and key are joined into
        # the one PEM file mongod reads, with the same mode.
        - name: prepare-credentials
          image: {{ include "harel-stack.mongodb.image" $ }}
          imagePullPolicy: {{ $.Values.mongodb.image.pullPolicy }}
          command:
            - /bin/bash
            - -ec
            - |
              install -m 0400 /var/run/harel/auth-secret/keyfile /var/run/harel/auth/keyfile
              {{- if include "harel-stack.tls.on" $ }}
              umask 0377
              cat /var/run/harel/tls-secret/tls.crt /var/run/harel/tls-secret/tls.key > /var/run/harel/auth/mongod.pem
              {{- end }}
          securityContext:
            {{- include "harel-stack.containerSecurityContext" 999 | nindent 12 }}
          resources:
            {{- toYaml $.Values.mongodb.init.resources | nindent 12 }}
          volumeMounts:
            - name: auth-secret
              mountPath: /var/run/harel/auth-secret
              readOnly: true
            - name: auth
              mountPath: /var/run/harel/auth
            {{- if include "harel-stack.tls.on" $ }}
            - name: tls-secret
              mountPath: /var/run/harel/tls-secret
              readOnly: true
            {{- end }}
        {{- if not $arbiter }}
        - name: bootstrap-root
          image: {{ include "harel-stack.mongodb.image" $ }}
          imagePullPolicy: {{ $.Values.mongodb.image.pullPolicy }}
          command: ["/bin/bash", "/var/run/harel/scripts/bootstrap-root.sh"]
          env:
            - name: HAREL_BOOTSTRAP_MEMBER
              value: {{ printf "%s-0" $name }}
            - name: HAREL_MONGO_PORT
              value: {{ $port | quote }}
            - name: HAREL_MONGO_ROOT_USERNAME
              value: {{ $.Values.mongodb.auth.rootUsername | quote }}
            - name: HAREL_MONGO_ROOT_PASSWORD_FILE
              value: /var/run/harel/root/root-password
            - name: HOME
              value: /tmp
          securityContext:
            {{- include "harel-stack.containerSecurityContext" 999 | nindent 12 }}
          resources:
            {{- toYaml $resources | nindent 12 }}
          volumeMounts:
            - name: data
              mountPath: /data/db
            - name: scripts
              mountPath: /var/run/harel/scripts
              readOnly: true
            - name: root-password
              mountPath: /var/run/harel/root
              readOnly: true
            - name: tmp
              mountPath: /tmp
        {{- end }}
      containers:
        - name: mongod
          image: {{ include "harel-stack.mongodb.image" $ }}
          imagePullPolicy: {{ $.Values.mongodb.image.pullPolicy }}
          # mongod itself, not the image's entrypoint: the chart does its own first-start work.
          command: ["mongod"]
          args:
            - --replSet
            - {{ $replSet | quote }}
            {{- with $set.role }}
            # Its part in the sharded cluster: config servers hold the cluster's metadata and users, shards the data.
            - {{ printf "--%s" . }}
            {{- end }}
            - --keyFile
            - /var/run/harel/auth/keyfile
            - --bind_ip_all
            - --auth
            - --port
            - {{ $port | quote }}
            - --dbpath
            - /data/db
            {{- with $.Values.mongodb.extraFlags }}
            # mongodb.extraFlags (none may contradict the flags above: checked when rendering).
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- if include "harel-stack.tls.on" $ }}
            - --tlsMode
            - {{ $.Values.tls.mode }}
            - --tlsCertificateKeyFile
            - /var/run/harel/auth/mongod.pem
            - --tlsCAFile
            - /var/run/harel/tls-secret/ca.crt
            # Clients authenticate with passwords, members with the keyfile: no client certificates.
            - --tlsAllowConnectionsWithoutCertificates
            {{- end }}
          env:
            # mongosh (in the probes) keeps its state under $HOME; the root filesystem is read-only.
            - name: HOME
              value: /tmp
            {{- with include "harel-stack.ext.env" $.Values.mongodb }}{{ . | nindent 12 }}{{ end }}
          {{- with include "harel-stack.ext.envFrom" $.Values.mongodb | trim }}{{ . | nindent 10 }}{{ end }}
          ports:
            - name: mongodb
              containerPort: {{ $port }}
          # Startup and liveness: is mongod listening. A TCP connect costs nothing; mongosh costs about a CPU-second
          # and 128 MB a run, and a liveness check that restarts a member for being slow does more harm than one
          # that waits: readiness already takes a struggling member out of rotation.
          # Up to 10 minutes to recover after a crash (WiredTiger replays its journal) before liveness applies.
          startupProbe:
            tcpSocket:
              port: mongodb
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 60
          livenessProbe:
            tcpSocket:
              port: mongodb
            periodSeconds: 20
            timeoutSeconds: 10
            failureThreshold: 6
          # Ready only as primary, secondary or arbiter (files/member-ready.js): a member that is still starting,
          # syncing or recovering holds rolling updates and the next member back, and counts as disrupted for
          # the PDB. Every 30 s with a 20 s timeout and three misses: a slow member does not flap.
          readinessProbe:
            exec:
              command:
                {{- include "harel-stack.mongodb.readinessCommand" $ | nindent 16 }}
            periodSeconds: 30
            timeoutSeconds: 20
            failureThreshold: 3
          securityContext:
            {{- include "harel-stack.containerSecurityContext" 999 | nindent 12 }}
          resources:
            {{- toYaml $resources | nindent 12 }}
          volumeMounts:
            - name: data
              mountPath: /data/db
            - name: auth
              mountPath: /var/run/harel/auth
              readOnly: true
            - name: tmp
              mountPath: /tmp
            - name: scripts
              mountPath: /var/run/harel/scripts
              readOnly: true
            {{- if include "harel-stack.tls.on" $ }}
            - name: tls-secret
              mountPath: /var/run/harel/tls-secret
              readOnly: true
            {{- end }}
            {{- with include "harel-stack.ext.volumeMounts" $.Values.mongodb }}{{ . | nindent 12 }}{{ end }}
        {{- with include "harel-stack.ext.sidecars" $.Values.mongodb }}{{ . | nindent 8 }}{{ end }}
      volumes:
        - name: auth-secret
          secret:
            secretName: {{ include "harel-stack.mongodb.authSecretName" $ }}
            items:
              - key: keyfile
                path: keyfile
            defaultMode: 0440
        - name: auth
          emptyDir:
            medium: Memory
            sizeLimit: 1Mi
        - name: tmp
          emptyDir:
            sizeLimit: 256Mi
        - name: scripts
          configMap:
            name: {{ include "harel-stack.mongodb.scriptsName" $ }}
            defaultMode: 0555
        {{- if not $arbiter }}
        - name: root-password
          secret:
            secretName: {{ include "harel-stack.mongodb.authSecretName" $ }}
            items:
              - key: root-password
                path: root-password
            defaultMode: 0440
        {{- end }}
        {{- if include "harel-stack.tls.on" $ }}
        - name: tls-secret
          secret:
            secretName: {{ $.Values.tls.existingSecret }}
            defaultMode: 0440
        {{- end }}
        {{- if $arbiter }}
        # An arbiter holds no data, only its replica-set config, which it receives again from the
        # set after a restart.
        - name: data
          emptyDir:
            sizeLimit: 1Gi
        {{- end }}
        {{- with include "harel-stack.ext.volumes" $.Values.mongodb }}{{ . | nindent 8 }}{{ end }}
  {{- if not $arbiter }}
  volumeClaimTemplates:
    - apiVersion: v1
      kind: PersistentVolumeClaim
      metadata:
        name: data
        labels:
          {{- $selector | nindent 10 }}
      spec:
        accessModes:
          {{- toYaml $.Values.mongodb.persistence.accessModes | nindent 10 }}
        {{- with $.Values.mongodb.persistence.storageClass }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ $size }}
  {{- end }}
{{- end }}
