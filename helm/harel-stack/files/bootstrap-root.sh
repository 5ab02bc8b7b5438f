#!/bin/bash
# Creates the root user on member 0 before the member ever runs with --replSet.
#
# Why here and not in the image's entrypoint (MONGO_INITDB_ROOT_*): the init Job cannot use the
# localhost exception (it connects over the network), so the root user must exist before the Job
# runs; the entrypoint's first-start handling differs between image releases (whether it strips
# --replSet and --keyFile for its temporary start), and it would run on every member, while only
# the member that initiates the set may hold data. So the chart bypasses the entrypoint and does
# the same thing explicitly: a temporary standalone mongod on 127.0.0.1 without auth, the user,
# a clean shutdown. Members other than member 0 stay empty and receive everything by initial sync.
set -euo pipefail

marker=/data/db/.harel-root-user-created

if [ "${HOSTNAME}" != "${HAREL_BOOTSTRAP_MEMBER}" ]; then
  echo "bootstrap-root: ${HOSTNAME} is not ${HAREL_BOOTSTRAP_MEMBER}: nothing to do"
  exit 0
fi
if [ -e "${marker}" ]; then
  echo "bootstrap-root: the root user was created on an earlier start: nothing to do"
  exit 0
fi

# --fork returns once the temporary instance accepts connections.
mongod --dbpath /data/db --bind_ip 127.0.0.1 --port "${HAREL_MONGO_PORT}" --fork \
  --logpath /tmp/bootstrap-mongod.log --pidfilepath /tmp/bootstrap-mongod.pid
trap 'cat /tmp/bootstrap-mongod.log >&2; mongod --dbpath /data/db --shutdown || true' ERR

mongosh --quiet --norc --port "${HAREL_MONGO_PORT}" /var/run/harel/scripts/bootstrap-root.js
mongod --dbpath /data/db --shutdown
trap - ERR

touch "${marker}"
echo "bootstrap-root: done"
