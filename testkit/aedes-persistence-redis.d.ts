// aedes-persistence-redis ships no types: the part testkit/aedes-node.ts uses.
declare module "aedes-persistence-redis" {
  import type { RedisOptions } from "ioredis";

  /** A persistence for aedes 1.x (its methods answer promises when given no callback). */
  export interface RedisPersistence {
    setup(broker: unknown): Promise<void>;
  }

  export default function redisPersistence(options?: RedisOptions & { maxSessionDelivery?: number }): RedisPersistence;
}
