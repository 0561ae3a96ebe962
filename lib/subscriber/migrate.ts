// The subscriber's own tables, from migrations kept in the code (a bundle needs no files); idempotent,
// so a database shared with the service, which has these tables already, takes them as they are.
import type { Sql, Tx } from "../platform/db.ts";
import { MIGRATION_LOCK_ID } from "../platform/migrations.ts";

// Any fixed 64-bit number unique to this library; not the service's migration lock.
const SUBSCRIBER_MIGRATION_LOCK_ID = 7_310_422_118_048n;

const MIGRATIONS: readonly { readonly version: number; readonly name: string; readonly text: string }[] = [
  {
    version: 1,
    name: "0001_inbox_sequences_dead_letters",
    text: `
      -- One row per (event id, consumer) processed: the handler's writes commit with it.
      create table if not exists inbox (
          event_id uuid not null,
          consumer text not null,
          received_at timestamptz not null default now(),
          primary key (event_id, consumer)
      );
      create index if not exists inbox_received_idx on inbox (received_at);
      create table if not exists subscriber_dead_letters (
          event_id uuid not null,
          consumer text not null,
          topic text not null,
          payload text not null,
          error text not null,
          attempts integer not null,
          dead_at timestamptz not null default now(),
          primary key (event_id, consumer)
      );
      create table if not exists subscriber_sequences (
          consumer text not null,
          aggregate_type text not null,
          aggregate_id text not null,
          last_sequence integer not null check (last_sequence >= 0),
          advanced_at timestamptz not null default now(),
          primary key (consumer, aggregate_type, aggregate_id)
      );
      -- Events that came ahead of their turn, acknowledged once kept here.
      create table if not exists subscriber_held_events (
          event_id uuid not null,
          consumer text not null,
          aggregate_type text not null,
          aggregate_id text not null,
          sequence integer not null check (sequence >= 1),
          topic text not null,
          payload text not null,
          held_at timestamptz not null default now(),
          primary key (event_id, consumer)
      );
      create index if not exists subscriber_held_events_aggregate_idx
          on subscriber_held_events (consumer, aggregate_type, aggregate_id, sequence);`,
  },
];

export type SubscriberMigrationOutcome =
  | { readonly kind: "applied"; readonly names: readonly string[] }
  | { readonly kind: "current" }
  /** The ledger names versions this library does not have: a newer one migrated the database. */
  | { readonly kind: "newer"; readonly versions: readonly number[] };

/** Creates or upgrades the subscriber's tables; safe to call from every process at every start. */
export function migrateSubscriber(sql: Sql): Promise<SubscriberMigrationOutcome> {
  return sql.begin(async (tx) => {
    await lockMigrations(tx);
    await createLedger(tx);
    const done = new Set(await appliedVersions(tx));
    const newer = [...done].filter((version) => !MIGRATIONS.some((m) => m.version === version));
    if (newer.length > 0) return { kind: "newer", versions: newer };
    const pending = MIGRATIONS.filter((m) => !done.has(m.version));
    for (const migration of pending) {
      await tx.unsafe(migration.text); // the library's own constant DDL, no input
      await recordApplied(tx, migration);
    }
    return pending.length === 0 ? { kind: "current" } : { kind: "applied", names: pending.map((m) => m.name) };
  }) as Promise<SubscriberMigrationOutcome>;
}

// The service's migration lock first (its migrations take only that one), then the library's:
// on a database shared with the service, the two never create the same tables at once.
async function lockMigrations(tx: Tx): Promise<void> {
  await tx`select pg_advisory_xact_lock(${MIGRATION_LOCK_ID.toString()}::bigint)`;
  await tx`select pg_advisory_xact_lock(${SUBSCRIBER_MIGRATION_LOCK_ID.toString()}::bigint)`;
}

async function createLedger(tx: Tx): Promise<void> {
  await tx`
    create table if not exists charges_outbox_subscriber_migrations (
        version integer primary key,
        name text not null,
        applied_at timestamptz not null default now())`;
}

async function appliedVersions(tx: Tx): Promise<number[]> {
  const rows = await tx<{ version: number }[]>`select version from charges_outbox_subscriber_migrations order by version`;
  return rows.map((row) => row.version);
}

async function recordApplied(tx: Tx, migration: (typeof MIGRATIONS)[number]): Promise<void> {
  await tx`insert into charges_outbox_subscriber_migrations (version, name) values (${migration.version}, ${migration.name})`;
}
