// This member's view of the replica set, printed as one JSON line. `hello` needs no authentication, so this
// works before any user exists and whatever credentials the inventory holds.
const reply = db.hello();
print(JSON.stringify({
  setName: reply.setName ?? null,
  isWritablePrimary: reply.isWritablePrimary === true,
  secondary: reply.secondary === true,
  primary: reply.primary ?? null,
}));
