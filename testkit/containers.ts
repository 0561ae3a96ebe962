// The Testcontainers path: used only when no DATABASE_URL/MQTT_URL is given and a Docker
// engine answers. Testcontainers 11+ import paths; containers are reaped by Ryuk when the
// test process exits.
import { existsSync } from "node:fs";
import { within } from "./wait.ts";

const DOCKER_SOCKET = "/var/run/docker.sock";
// A Docker engine that has not answered a ping in this time is treated as absent.
const DOCKER_PING_TIMEOUT_MS = 2000;

export async function dockerAnswers(): Promise<boolean> {
  if (!process.env.DOCKER_HOST && !existsSync(DOCKER_SOCKET)) return false;
  try {
    const { getContainerRuntimeClient } = await import("testcontainers");
    return (await within(getContainerRuntimeClient(), DOCKER_PING_TIMEOUT_MS)) !== undefined;
  } catch {
    return false;
  }
}

/** Both containers, started side by side; Ryuk removes them when the test process ends. */
export async function startContainers(): Promise<{ adminDatabaseUrl: string; mqttUrl: string }> {
  const { GenericContainer, Wait } = await import("testcontainers");
  const { PostgreSqlContainer } = await import("@testcontainers/postgresql");
  const [pg, broker] = await Promise.all([
    new PostgreSqlContainer("postgres:16-alpine").start(),
    new GenericContainer("eclipse-mosquitto:2")
      .withExposedPorts(1883)
      // Mosquitto 2 listens on localhost only unless told otherwise.
      .withCopyContentToContainer([
        {
          content: "listener 1883 0.0.0.0\nallow_anonymous true\npersistence true\npersistence_location /mosquitto/data/\n",
          target: "/mosquitto/config/mosquitto.conf",
        },
      ])
      .withWaitStrategy(Wait.forLogMessage(/mosquitto version .* running/))
      .start(),
  ]);
  return {
    adminDatabaseUrl: pg.getConnectionUri(),
    mqttUrl: `mqtt://${broker.getHost()}:${broker.getMappedPort(1883)}`,
  };
}
