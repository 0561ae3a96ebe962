// The pool's and a transaction's types, apart from db.ts so that the pooler it builds on can name them.
import type postgres from "postgres";

export type Sql = postgres.Sql<Record<string, never>>;
export type Tx = postgres.TransactionSql<Record<string, never>>;
