#!/usr/bin/env bash
# harel-stack backups: `mongodump --archive --gzip --oplog` of the whole replica set, retention by count, and the
# run's outcome recorded in <database>.backups. A sharded cluster's app database (HAREL_BACKUP_ROUTERS set) is dumped
# through its routers without --oplog, quiesced: balancer stopped and every harel worker paused (pause-workers.js) until each
# live worker acknowledged, then both resumed whatever happened. One script for every deployment mode:
#   Helm     CronJob: `dump` (mongo image), then `upload-s3` (aws-cli image, S3 target only), then `record`
#   compose  `harel-stack backup`: `run` (dump, then record) in the mongo image
#   Ansible  a systemd timer on a member: `run`
#
#   harel-backup.sh dump|upload-s3|record|run
#   harel-backup.sh restore ARCHIVE     mongorestore --oplogReplay --drop of ARCHIVE, as HAREL_RESTORE_USER (sharded:
#                                       no --oplogReplay, workers paused; then `harel partitions init`, `harel resume`)
#
# Settings come from the environment, after the KEY=value lines of the file $HAREL_BACKUP_SETTINGS if set:
#   HAREL_BACKUP_HOSTS        host:port,... of the members          HAREL_BACKUP_REPLICA_SET  replica-set name
#   HAREL_BACKUP_ROUTERS      host:port,... of a sharded cluster's routers (mongos), instead of the two above
#   HAREL_BACKUP_PAUSE_TIMEOUT  seconds the workers get to acknowledge the pause (sharded; default 120)
#   HAREL_BACKUP_HEARTBEAT_SECONDS  the workers' heartbeat interval, for who is live (sharded; default 5)
#   HAREL_BACKUP_USER         the backup user                       HAREL_BACKUP_PASSWORD_FILE  file with its password
#   HAREL_BACKUP_TLS_CA       CA file when members require TLS      HAREL_BACKUP_DATABASE     where the status lives
#   HAREL_BACKUP_DIR          where archives are written            HAREL_BACKUP_KEEP         archives to keep
#   HAREL_BACKUP_JOB          this job's name in the status          HAREL_BACKUP_TARGET       where, as recorded
#   HAREL_BACKUP_S3_BUCKET    set: archives go to S3 (upload-s3); empty: they stay in HAREL_BACKUP_DIR
#   HAREL_BACKUP_S3_PREFIX, HAREL_BACKUP_S3_ENDPOINT (empty: AWS itself); the bucket's credentials come from
#   AWS_ACCESS_KEY_ID(_FILE) and AWS_SECRET_ACCESS_KEY(_FILE), AWS_REGION from the environment.
# Each password comes from the file its *_FILE variable names (a mounted secret), else from the variable without
# _FILE (HAREL_BACKUP_PASSWORD, HAREL_RESTORE_PASSWORD); it never appears on a command line.
#
# A step that fails records why instead of stopping the chain, so `record` always runs and the status document
# always says what happened; `record` (and `run`) then exit 1 for a failed run, so the job shows as failed too.
# The outcome passes from step to step in $HAREL_BACKUP_DIR/.harel-backup-run (shell assignments).
set -euo pipefail
umask 077

if [[ -n "${HAREL_BACKUP_SETTINGS:-}" ]]; then
  # shellcheck source=/dev/null
  . "${HAREL_BACKUP_SETTINGS}"
fi
: "${HAREL_BACKUP_DIR:=/backups}"
: "${HAREL_BACKUP_KEEP:=7}"
: "${HAREL_BACKUP_DATABASE:=harel}"
state="${HAREL_BACKUP_DIR}/.harel-backup-run"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Archive names sort by time: the retention below keeps the newest by name.
archive_pattern='^harel-[0-9]{8}T[0-9]{6}Z\.archive\.gz$'

log() {
  echo "harel-backup: $*" >&2
}

# A secret's value: the content of the file ${1}_FILE names, else the variable $1.
secret() {
  local file_variable="${1}_FILE"
  if [[ -n "${!file_variable:-}" ]]; then
    cat -- "${!file_variable}"
  else
    printf '%s' "${!1:-}"
  fi
}

save_state() {
  {
    for name in HAREL_RUN_ID HAREL_RUN_STARTED_AT HAREL_RUN_FINISHED_AT HAREL_RUN_OUTCOME HAREL_RUN_ARCHIVE \
      HAREL_RUN_BYTES HAREL_RUN_KEPT HAREL_RUN_ERROR; do
      printf '%s=%q\n' "${name}" "${!name:-}"
    done
  } >"${state}.new"
  mv "${state}.new" "${state}"
}

load_state() {
  if [[ ! -f "${state}" ]]; then
    log "no run to continue: ${state} is missing (the dump step did not run)"
    exit 1
  fi
  # shellcheck source=/dev/null
  . "${state}"
}

fail_run() {
  HAREL_RUN_OUTCOME=failed
  HAREL_RUN_ERROR="$1"
  HAREL_RUN_FINISHED_AT="$(date +%s)"
  log "failed: $1"
  save_state
}

# The newest $HAREL_BACKUP_KEEP names of the archives listed on stdin (one name a line) are kept; the others are
# printed, oldest first.
excess_archives() {
  grep -E "${archive_pattern}" | sort | head -n "-${HAREL_BACKUP_KEEP}" || true
}

# The object names of an `aws s3 ls` listing (date, time, size, name a line), read with bash alone: the
# aws-cli image is not known to carry awk.
object_names() {
  local _day _time _size name
  while read -r _day _time _size name; do
    printf '%s\n' "${name}"
  done
}

# $1 as a single-quoted YAML scalar.
yaml_quoted() {
  printf "'%s'" "${1//\'/\'\'}"
}

sharded() {
  [[ -n "${HAREL_BACKUP_ROUTERS:-}" ]]
}

# What the tools are given to connect to: the members and the set's name, or the routers.
where() {
  if sharded; then
    printf '%s' "${HAREL_BACKUP_ROUTERS:-}/?authSource=admin"
  else
    printf '%s' "${HAREL_BACKUP_HOSTS}/?replicaSet=${HAREL_BACKUP_REPLICA_SET}&authSource=admin"
  fi
}

# A mongodump/mongorestore --config file for user $1 with password $2: the tools read the password from it.
tool_config() {
  local uri
  uri="mongodb://${1}@$(where)"
  if [[ -n "${HAREL_BACKUP_TLS_CA:-}" ]]; then
    uri+="&tls=true&tlsCAFile=${HAREL_BACKUP_TLS_CA}"
  fi
  printf 'uri: %s\n' "$(yaml_quoted "${uri}")"
  printf 'password: %s\n' "$(yaml_quoted "${2}")"
}

dump() {
  local password
  password="$(secret HAREL_BACKUP_PASSWORD)"
  if [[ -z "${password}" ]]; then
    log "HAREL_BACKUP_PASSWORD_FILE or HAREL_BACKUP_PASSWORD must be set"
    exit 2
  fi
  HAREL_RUN_ID="$(date -u +%Y%m%dT%H%M%SZ)"
  HAREL_RUN_STARTED_AT="$(date +%s)"
  HAREL_RUN_ARCHIVE="harel-${HAREL_RUN_ID}.archive.gz"
  HAREL_RUN_BYTES=0
  HAREL_RUN_KEPT=0
  HAREL_RUN_ERROR=
  mkdir -p "${HAREL_BACKUP_DIR}"
  local partial="${HAREL_BACKUP_DIR}/${HAREL_RUN_ARCHIVE}.partial"
  local config messages
  config="$(mktemp)"
  messages="$(mktemp)"
  tool_config "${HAREL_BACKUP_USER}" "${password}" >"${config}"
  local consistent=(--oplog)
  if sharded; then
    # No oplog spans a cluster: the dump is consistent because nothing writes while it runs. The app database
    # only: the cluster's users and its sharding (config) are not a router's to dump and restore.
    consistent=(--db="${HAREL_BACKUP_DATABASE}")
    if ! quiesce; then
      fail_run "${quiesce_error}"
      if ! resume_quiesced; then
        HAREL_RUN_ERROR+="; then ${resume_error}"
        save_state
      fi
      rm -f -- "${config}" "${messages}"
      return 0
    fi
    log "dumping ${HAREL_BACKUP_ROUTERS:-} (sharded cluster, quiesced) to ${HAREL_RUN_ARCHIVE}"
  else
    log "dumping ${HAREL_BACKUP_HOSTS} (replica set ${HAREL_BACKUP_REPLICA_SET}) with its oplog to ${HAREL_RUN_ARCHIVE}"
  fi
  if mongodump --config="${config}" --archive="${partial}" --gzip "${consistent[@]}" 2>"${messages}"; then
    mv "${partial}" "${HAREL_BACKUP_DIR}/${HAREL_RUN_ARCHIVE}"
    HAREL_RUN_BYTES="$(stat -c %s "${HAREL_BACKUP_DIR}/${HAREL_RUN_ARCHIVE}")"
    HAREL_RUN_OUTCOME=succeeded
    HAREL_RUN_FINISHED_AT="$(date +%s)"
    log "wrote ${HAREL_RUN_ARCHIVE} (${HAREL_RUN_BYTES} bytes)"
    if [[ -z "${HAREL_BACKUP_S3_BUCKET:-}" ]]; then
      # A directory target keeps its archives here; an S3 target prunes the bucket after the upload.
      local old
      while read -r old; do
        rm -f -- "${HAREL_BACKUP_DIR:?}/${old}"
        log "removed ${old} (keeping the newest ${HAREL_BACKUP_KEEP})"
      done < <(ls -1 "${HAREL_BACKUP_DIR}" | excess_archives)
      HAREL_RUN_KEPT="$(ls -1 "${HAREL_BACKUP_DIR}" | grep -cE "${archive_pattern}" || true)"
    fi
    save_state
  else
    rm -f -- "${partial}"
    cat "${messages}" >&2
    fail_run "mongodump: $(grep -v '^\s*$' "${messages}" | tail -n 1)"
  fi
  rm -f -- "${config}" "${messages}"
  if sharded && ! resume_quiesced; then
    if [[ "${HAREL_RUN_OUTCOME}" == succeeded ]]; then
      fail_run "${HAREL_RUN_ARCHIVE} was written, but ${resume_error}"
    else
      HAREL_RUN_ERROR+="; then ${resume_error}"
      save_state
    fi
  fi
}

# --- the quiesce of a sharded cluster (pause-workers.js) -----------------------------------------------------

quiesce_password_file=
balancer_was=
pause_created=
quiesced=0
pause_said=
waiter=
quiesce_error=
resume_error=

# mongosh running pause-workers.js for action $1, with the password in a file (the mounted one, or a private copy);
# `exec` as $2: in place of the (background) subshell that called it, so that its pid is mongosh's own.
pause_workers() {
  local launch=()
  if [[ "${2:-}" == exec ]]; then
    launch=(exec)
  fi
  local password_file="${HAREL_BACKUP_PASSWORD_FILE:-}"
  if [[ -z "${password_file}" ]]; then
    if [[ -z "${quiesce_password_file}" ]]; then
      quiesce_password_file="$(mktemp)"
      secret HAREL_BACKUP_PASSWORD >"${quiesce_password_file}"
    fi
    password_file="${quiesce_password_file}"
  fi
  "${launch[@]}" env HAREL_PAUSE_ACTION="$1" HAREL_BALANCER_WAS="${balancer_was}" HAREL_PAUSE_CREATED="${pause_created}" \
    HAREL_BACKUP_ROUTERS="${HAREL_BACKUP_ROUTERS:-}" HAREL_BACKUP_USER="${HAREL_BACKUP_USER}" \
    HAREL_BACKUP_DATABASE="${HAREL_BACKUP_DATABASE}" HAREL_BACKUP_JOB="${HAREL_BACKUP_JOB:-}" \
    HAREL_BACKUP_TLS_CA="${HAREL_BACKUP_TLS_CA:-}" HAREL_BACKUP_PASSWORD_FILE="${password_file}" \
    mongosh --nodb --quiet --norc "${here}/pause-workers.js"
}

# The last line mongosh printed on stderr (its error), from the file $1.
last_said() {
  grep -v '^\s*$' "$1" | tail -n 1 || true
}

# Stop the balancer and pause the workers, then wait for every live worker's acknowledgement. What was done is
# remembered (balancer_was, pause_created) for resume_quiesced, which the EXIT trap runs too. On failure 1, and
# quiesce_error says why.
quiesce() {
  local messages
  messages="$(mktemp)"
  pause_said="$(mktemp)"
  quiesced=1
  # A signal ends the wait at once (bash runs its traps only between commands, so the wait runs in the
  # background), and the EXIT trap resumes whatever was stopped.
  trap 'resume_quiesced || true' EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  log "stopping the balancer and pausing the workers of ${HAREL_BACKUP_DATABASE}"
  local paused=0
  pause_workers pause >"${pause_said}" 2>"${messages}" || paused=$?
  read_pause_said
  if ((paused != 0)); then
    cat "${messages}" >&2
    quiesce_error="stopping the balancer and pausing the workers: $(last_said "${messages}")"
    rm -f -- "${messages}"
    return 1
  fi
  log "balancer was ${balancer_was}; pause ${pause_created}; waiting for every live worker (${HAREL_BACKUP_PAUSE_TIMEOUT:-120}s at most)"
  local waited=0
  pause_workers wait exec >&2 2>"${messages}" &
  waiter=$!
  wait "${waiter}" || waited=$?
  waiter=
  if ((waited != 0)); then
    cat "${messages}" >&2
    quiesce_error="the workers did not pause: $(last_said "${messages}")"
    rm -f -- "${messages}"
    return 1
  fi
  rm -f -- "${messages}"
}

# What pause-workers.js said it did (a file, so that a signal's EXIT trap reads it too).
read_pause_said() {
  local line
  if [[ -z "${pause_said}" || ! -f "${pause_said}" ]]; then
    return 0
  fi
  while read -r line; do
    case "${line}" in
      "balancer: "*) balancer_was="${line#balancer: }" ;;
      "pause: "*) pause_created="${line#pause: }" ;;
    esac
  done <"${pause_said}"
  rm -f -- "${pause_said}"
  pause_said=
}

# Resume what quiesce did, once: the pause if it created it, the balancer if it was on. 1 (resume_error says why)
# when that failed: the workers or the balancer stay stopped until someone starts them.
resume_quiesced() {
  if ((quiesced == 0)); then
    return 0
  fi
  quiesced=0
  read_pause_said # a signal may have come before quiesce read it
  if [[ -n "${waiter}" ]]; then
    kill "${waiter}" 2>/dev/null || true # it would flag the workers again
    wait "${waiter}" 2>/dev/null || true
    waiter=
  fi
  local messages status=0
  messages="$(mktemp)"
  pause_workers resume >&2 2>"${messages}" || status=$?
  if [[ -n "${quiesce_password_file}" ]]; then
    rm -f -- "${quiesce_password_file}"
    quiesce_password_file=
  fi
  if ((status != 0)); then
    cat "${messages}" >&2
    resume_error="resuming failed: $(last_said "${messages}"); run \`harel resume\` and start the balancer (sh.startBalancer())"
    log "${resume_error}"
    rm -f -- "${messages}"
    return 1
  fi
  rm -f -- "${messages}"
}

upload_s3() {
  load_state
  if [[ "${HAREL_RUN_OUTCOME}" != succeeded ]]; then
    log "nothing to upload: the dump failed"
    return 0
  fi
  local destination="s3://${HAREL_BACKUP_S3_BUCKET}/${HAREL_BACKUP_S3_PREFIX}"
  # The aws CLI reads its credentials from its environment only.
  AWS_ACCESS_KEY_ID="$(secret AWS_ACCESS_KEY_ID)"
  AWS_SECRET_ACCESS_KEY="$(secret AWS_SECRET_ACCESS_KEY)"
  export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
  local aws=(aws)
  if [[ -n "${HAREL_BACKUP_S3_ENDPOINT:-}" ]]; then
    aws+=(--endpoint-url "${HAREL_BACKUP_S3_ENDPOINT}")
  fi
  local messages listing
  messages="$(mktemp)"
  if ! "${aws[@]}" s3 cp --only-show-errors "${HAREL_BACKUP_DIR}/${HAREL_RUN_ARCHIVE}" \
    "${destination}/${HAREL_RUN_ARCHIVE}" 2>"${messages}"; then
    cat "${messages}" >&2
    fail_run "upload to ${destination}: $(tail -n 1 "${messages}")"
    return 0
  fi
  rm -f -- "${HAREL_BACKUP_DIR:?}/${HAREL_RUN_ARCHIVE}"
  log "uploaded ${HAREL_RUN_ARCHIVE} to ${destination}/"
  if ! listing="$("${aws[@]}" s3 ls "${destination}/" 2>"${messages}")"; then
    cat "${messages}" >&2
    fail_run "listing ${destination}/ for retention: $(tail -n 1 "${messages}")"
    return 0
  fi
  local old
  while read -r old; do
    "${aws[@]}" s3 rm --only-show-errors "${destination}/${old}"
    log "removed ${destination}/${old} (keeping the newest ${HAREL_BACKUP_KEEP})"
  done < <(object_names <<<"${listing}" | excess_archives)
  HAREL_RUN_KEPT="$(object_names <<<"${listing}" | grep -cE "${archive_pattern}" || true)"
  if ((HAREL_RUN_KEPT > HAREL_BACKUP_KEEP)); then
    HAREL_RUN_KEPT="${HAREL_BACKUP_KEEP}"
  fi
  save_state
  rm -f -- "${messages}"
}

record() {
  load_state
  export HAREL_RUN_ID HAREL_RUN_STARTED_AT HAREL_RUN_FINISHED_AT HAREL_RUN_OUTCOME HAREL_RUN_ARCHIVE \
    HAREL_RUN_BYTES HAREL_RUN_KEPT HAREL_RUN_ERROR
  export HAREL_BACKUP_HOSTS="${HAREL_BACKUP_HOSTS:-}" HAREL_BACKUP_REPLICA_SET="${HAREL_BACKUP_REPLICA_SET:-}" \
    HAREL_BACKUP_ROUTERS="${HAREL_BACKUP_ROUTERS:-}" HAREL_BACKUP_USER HAREL_BACKUP_DATABASE HAREL_BACKUP_JOB \
    HAREL_BACKUP_TARGET HAREL_BACKUP_TLS_CA="${HAREL_BACKUP_TLS_CA:-}"
  # record-backup.js reads the password from a file: the mounted one, or a private copy of the variable's.
  local password_file="${HAREL_BACKUP_PASSWORD_FILE:-}"
  if [[ -z "${password_file}" ]]; then
    password_file="$(mktemp)"
    secret HAREL_BACKUP_PASSWORD >"${password_file}"
  fi
  local recorded=0
  HAREL_BACKUP_PASSWORD_FILE="${password_file}" mongosh --nodb --quiet --norc "${here}/record-backup.js" || recorded=$?
  if [[ "${password_file}" != "${HAREL_BACKUP_PASSWORD_FILE:-}" ]]; then
    rm -f -- "${password_file}"
  fi
  if ((recorded != 0)); then
    log "could not record run ${HAREL_RUN_ID} in ${HAREL_BACKUP_DATABASE}.backups (mongosh exit ${recorded})"
    exit 1
  fi
  if [[ "${HAREL_RUN_OUTCOME}" != succeeded ]]; then
    log "run ${HAREL_RUN_ID} failed: ${HAREL_RUN_ERROR}"
    exit 1
  fi
  log "run ${HAREL_RUN_ID} succeeded: ${HAREL_RUN_ARCHIVE}, ${HAREL_RUN_BYTES} bytes, ${HAREL_RUN_KEPT} archive(s) kept"
}

# Restores the whole archive: every database as it was when the dump ended (the oplog it captured is replayed
# up to its last entry), each collection dropped first. --oplogReplay restores everything or nothing: mongorestore
# refuses it with a namespace filter.
restore() {
  local archive="$1" password config
  : "${HAREL_RESTORE_USER:?HAREL_RESTORE_USER must be set}"
  password="$(secret HAREL_RESTORE_PASSWORD)"
  if [[ -z "${password}" ]]; then
    log "HAREL_RESTORE_PASSWORD_FILE or HAREL_RESTORE_PASSWORD must be set"
    exit 2
  fi
  if [[ ! -r "${archive}" ]]; then
    log "cannot read ${archive}"
    exit 2
  fi
  config="$(mktemp)"
  tool_config "${HAREL_RESTORE_USER}" "${password}" >"${config}"
  if sharded; then
    restore_sharded "${archive}" "${config}"
    return
  fi
  log "restoring ${archive} into ${HAREL_BACKUP_HOSTS} (replica set ${HAREL_BACKUP_REPLICA_SET}), oplog replayed"
  if ! mongorestore --config="${config}" --archive="${archive}" --gzip --oplogReplay --drop; then
    rm -f -- "${config}"
    log "restore failed: see mongorestore's messages above"
    exit 1
  fi
  rm -f -- "${config}"
  log "restored ${archive}"
}

# A sharded cluster's restore of the app database, through the routers: the workers paused first (and left paused: the archive's
# harel_meta holds the pause of its dump too), the balancer stopped meanwhile and started again after. No
# --oplogReplay (a sharded dump has none); the workers' own documents are kept (--nsExclude), so the flags of the
# pause that keeps the live workers stopped survive. The restored executions collection is not sharded yet:
# `harel partitions init` shards it again and sets its zones, then `harel resume` lets the workers go on.
restore_sharded() {
  local archive="$1" config="$2"
  # The pause and the balancer are the restore user's to stop (the backup user may not be configured here).
  HAREL_BACKUP_USER="${HAREL_RESTORE_USER}"
  # shellcheck disable=SC2034 # read by pause_workers, through `secret`
  HAREL_BACKUP_PASSWORD="$(secret HAREL_RESTORE_PASSWORD)"
  HAREL_BACKUP_PASSWORD_FILE="${HAREL_RESTORE_PASSWORD_FILE:-}"
  if ! quiesce; then
    resume_quiesced || true
    rm -f -- "${config}"
    log "restore not started: ${quiesce_error}"
    exit 1
  fi
  pause_created=kept # the workers stay paused until `harel resume`; only the balancer is started again
  log "restoring ${archive} into ${HAREL_BACKUP_ROUTERS:-} (sharded cluster), workers paused"
  local restored=0
  mongorestore --config="${config}" --archive="${archive}" --gzip --drop \
    --nsInclude="${HAREL_BACKUP_DATABASE}.*" --nsExclude="${HAREL_BACKUP_DATABASE}.workers" || restored=$?
  rm -f -- "${config}"
  # --drop replaced harel_meta with the archive's: the pause stands again whatever the archive held
  pause_workers hold >/dev/null || log "could not request the pause again after the restore: run \`harel pause\`"
  resume_quiesced || true
  if ((restored != 0)); then
    log "restore failed: see mongorestore's messages above; the workers stay paused"
    exit 1
  fi
  log "restored ${archive}; the workers stay paused. Next, with harel (a worker image has it; the mongo image has"
  log "not): \`harel partitions init --url <the routers' URL>\` shards the executions again and sets their zones,"
  log "then \`harel resume --url <the routers' URL>\` lets the workers go on"
}

case "${1:-}" in
  dump) dump ;;
  upload-s3) upload_s3 ;;
  record) record ;;
  run)
    dump
    record
    ;;
  restore)
    restore "${2:?usage: harel-backup.sh restore ARCHIVE}"
    ;;
  *)
    echo "usage: harel-backup.sh dump|upload-s3|record|run|restore ARCHIVE" >&2
    exit 2
    ;;
esac
