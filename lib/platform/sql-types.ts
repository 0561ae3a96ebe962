// The pool's and a transaction's types, apart from db.ts so that what db.ts builds on (the
// pooler's transactions, the open-connection counter) can name them without importing it.
import type postgres from "postgres";

export type Sql = postgres.Sql<Record<string, never>>;
export type Tx = postgres.TransactionSql<Record<string, never>>;
