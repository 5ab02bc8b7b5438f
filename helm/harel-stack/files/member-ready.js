// Readiness of a replica-set member, run by the kubelet as `mongosh ... member-ready.js` (no shell around it)
// every 30 s: ready as PRIMARY, SECONDARY or ARBITER, i.e. a member that holds (or votes on) the set's data.
// A member that is starting, syncing or recovering is not ready: it holds rolling updates and the next
// StatefulSet pod back and counts as disrupted for the PodDisruptionBudget. `hello` needs no credentials.
const hello = db.adminCommand({ hello: 1 });
if (!(hello.isWritablePrimary || hello.secondary || hello.arbiterOnly)) {
  print(`not ready: ${hello.setName ? `member of ${hello.setName}` : 'no replica-set config yet'}, neither primary, secondary nor arbiter`);
  quit(1);
}
