// `bun testkit/container-reaper.ts <owner pid> <session>`: the kit's own Ryuk, started detached
// by containers.ts. It polls the owner (pid and start time, so a reused pid does not keep it
// waiting) and, once the owner is gone however it ended (exit, signal, SIGKILL, or a `bun test`
// that fires no exit event), removes every container and network labelled with the session,
// then exits. It runs no handler of the owner's, so nothing the owner does can skip it.
import { dockerode, LABEL_SESSION, ownerAlive, ownerLabel } from "./containers.ts";
import { sleep } from "./wait.ts";

// The owner's containers outlive it by at most this (a poll is a read of /proc).
const POLL_MS = 250;

const [pidText, session] = process.argv.slice(2);
const owner = ownerLabel(Number(pidText));
if (!session || !pidText) throw new Error("usage: bun testkit/container-reaper.ts <owner pid> <session>");
// The client first, so removal starts the moment the owner is gone.
const docker = await dockerode();
while (ownerAlive(owner)) await sleep(POLL_MS);

const filters = { label: [`${LABEL_SESSION}=${session}`] };
const containers = await docker.listContainers({ all: true, filters });
await Promise.all(containers.map((c) => docker.getContainer(c.Id).remove({ force: true, v: true }).catch(() => {})));
const networks = await docker.listNetworks({ filters });
await Promise.all(networks.map((n) => docker.getNetwork(n.Id).remove().catch(() => {})));
