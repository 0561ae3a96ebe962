// A Postgres and a Mosquitto in containers, each reachable two ways: through its port published
// on this host (for the harness, the subscriber and the checks), and at its own address on a
// private Docker network (for the processes under test). Cutting a container off that network
// (`docker network disconnect`) is a silent partition for those processes alone: their packets
// go to an address nobody answers any more, no reset comes back, open connections hang until
// their own bounds give up; the published path keeps working. Healing connects it again at the
// same address, and what TCP still holds goes through. Docker only: partitionUnavailable says
// why not, in one line, for the scenario's skip.
import type Dockerode from "dockerode";
import { containerImages, dockerAnswers, dockerode, imageMissing, sessionLabels, startMosquittoContainer, startPostgresContainer, type StartedService } from "./containers.ts";

const POSTGRES_PORT = 5432;
const MQTT_PORT = 1883;
// Subnets tried for the private network: 10.200-249.x.0/24, one unlikely to be in use; another
// is drawn when Docker says it overlaps one that is.
const SUBNET_TRIES = 8;

export type Side = "postgres" | "broker";

export interface Partition {
  /** Published: the harness's and the subscriber's way in; never cut. */
  readonly adminDatabaseUrl: string;
  readonly mqttUrl: string;
  /** The same database URL (from adminDatabaseUrl's server) at the container's private address. */
  privateDatabaseUrl(url: string): string;
  /** The broker at its private address. */
  readonly privateMqttUrl: string;
  /** Cuts `side` off the private network: silent, for whoever uses the private address. */
  cut(side: Side): Promise<void>;
  /** Connects it again at the same address. */
  heal(side: Side): Promise<void>;
}

/** Why a partition cannot be made here, or undefined when it can. */
export async function partitionUnavailable(): Promise<string | undefined> {
  if (!(await dockerAnswers())) return "no Docker engine answers (the partitions are made with docker network disconnect)";
  const images = containerImages();
  for (const image of [images.postgres, images.mqtt]) {
    const why = await imageMissing(image);
    if (why !== undefined) return `image ${image} cannot be had (${why}); bun run test:images builds it here`;
  }
  return undefined;
}

/** A labelled bridge network with a subnet of our choosing (an address can only be pinned on one). */
async function privateNetwork(docker: Dockerode): Promise<{ network: Dockerode.Network; prefix: string }> {
  const labels = await sessionLabels();
  let last: unknown;
  for (let i = 0; i < SUBNET_TRIES; i++) {
    const prefix = `10.${200 + Math.floor(Math.random() * 50)}.${Math.floor(Math.random() * 256)}`;
    try {
      const network = await docker.createNetwork({
        Name: `charges-partition-${crypto.randomUUID().slice(0, 8)}`,
        Driver: "bridge",
        IPAM: { Config: [{ Subnet: `${prefix}.0/24`, Gateway: `${prefix}.1` }] },
        Labels: labels,
      });
      return { network, prefix };
    } catch (error) {
      last = error; // most likely an overlap: draw another
    }
  }
  throw new Error(`could not create a private Docker network: ${String(last)}`);
}

export async function startPartition(): Promise<Partition> {
  const docker = await dockerode();
  const { network, prefix } = await privateNetwork(docker);
  const [pg, broker] = await Promise.all([startPostgresContainer(), startMosquittoContainer()]);
  const address: Record<Side, string> = { postgres: `${prefix}.10`, broker: `${prefix}.11` };
  const started: Record<Side, StartedService> = { postgres: pg, broker };
  const connect = (side: Side): Promise<unknown> =>
    network.connect({ Container: started[side].container.getId(), EndpointConfig: { IPAMConfig: { IPv4Address: address[side] } } });
  await Promise.all([connect("postgres"), connect("broker")]);
  return {
    adminDatabaseUrl: pg.url,
    mqttUrl: broker.url,
    privateDatabaseUrl(url: string): string {
      const u = new URL(url);
      u.hostname = address.postgres;
      u.port = String(POSTGRES_PORT);
      return u.href;
    },
    privateMqttUrl: `mqtt://${address.broker}:${MQTT_PORT}`,
    cut: async (side) => {
      await network.disconnect({ Container: started[side].container.getId(), Force: true });
    },
    heal: async (side) => {
      await connect(side);
    },
  };
}


