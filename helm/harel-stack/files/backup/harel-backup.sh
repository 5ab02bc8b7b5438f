#!/usr/bin/env bash
# harel-stack backups: `mongodump --archive --gzip --oplog` of the whole replica set, retention by count, and the
# run's outcome recorded in <database>.backups. One script for every deployment mode:
#   Helm     CronJob: `dump` (mongo image), then `upload-s3` (aws-cli image, S3 target only), then `record`
#   compose  `harel-stack backup`: `run` (dump, then record) in the mongo image
#   Ansible  a systemd timer on a member: `run`
#
#   harel-backup.sh dump|upload-s3|record|run
#   harel-backup.sh restore ARCHIVE     mongorestore --oplogReplay --drop of ARCHIVE, as HAREL_RESTORE_USER
#
# Settings come from the environment, after the KEY=value lines of the file $HAREL_BACKUP_SETTINGS if set:
#   HAREL_BACKUP_HOSTS        host:port,... of the members          HAREL_BACKUP_REPLICA_SET  replica-set name
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

# A mongodump/mongorestore --config file for user $1 with password $2: the tools read the password from it.
tool_config() {
  local uri="mongodb://${1}@${HAREL_BACKUP_HOSTS}/?replicaSet=${HAREL_BACKUP_REPLICA_SET}&authSource=admin"
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
  log "dumping ${HAREL_BACKUP_HOSTS} (replica set ${HAREL_BACKUP_REPLICA_SET}) with its oplog to ${HAREL_RUN_ARCHIVE}"
  if mongodump --config="${config}" --archive="${partial}" --gzip --oplog 2>"${messages}"; then
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
  export HAREL_BACKUP_HOSTS HAREL_BACKUP_REPLICA_SET HAREL_BACKUP_USER HAREL_BACKUP_DATABASE HAREL_BACKUP_JOB \
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
  log "restoring ${archive} into ${HAREL_BACKUP_HOSTS} (replica set ${HAREL_BACKUP_REPLICA_SET}), oplog replayed"
  if ! mongorestore --config="${config}" --archive="${archive}" --gzip --oplogReplay --drop; then
    rm -f -- "${config}"
    log "restore failed: see mongorestore's messages above"
    exit 1
  fi
  rm -f -- "${config}"
  log "restored ${archive}"
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
