// What a test sees of a private MQTT broker cluster, whichever it is (testkit/aedes-cluster.ts,
// testkit/nats.ts): three nodes on loopback ports, each killed and started again on its own.

export interface BrokerNode {
  /** n1, n2, n3. */
  readonly name: string;
  /** mqtt://127.0.0.1:<its MQTT port> */
  readonly mqttUrl: string;
  readonly running: boolean;
  /** Starts it again on its port: it rejoins the cluster. Resolves once it takes MQTT connections. */
  start(): Promise<void>;
  /** SIGKILL: no goodbye to the cluster or to its clients; resolves once it is gone. */
  kill(): Promise<void>;
}

export interface BrokerCluster {
  /** "aedes" or "nats", for a scenario's title and log lines. */
  readonly kind: string;
  readonly nodes: readonly BrokerNode[];
  /** The nodes' MQTT URLs, n1 first. */
  readonly mqttUrls: readonly string[];
  /** The nodes' logs so far, for a failed assertion's message. */
  output(): string;
  /**
   * Until node `via` says the cluster's replicated state is whole again after a node came back:
   * at once where the nodes keep no state of their own (aedes over a shared Redis).
   */
  caughtUp(via: number, timeoutMs?: number): Promise<void>;
  /** Stops every node (and what they share) and removes their folder. */
  stop(): Promise<void>;
}
