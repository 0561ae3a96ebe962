// A database's schema as plain values, read from the catalog, so two databases can be
// compared with one toEqual: pg_dump is not on every CI machine's PATH, and its text carries
// column order and comments, which two equal schemas may well differ in.
import type { Sql } from "../lib/platform/db.ts";

export interface SchemaDescription {
  /** `<name> <relkind>` of every table, view and sequence. */
  readonly relations: readonly string[];
  /** `<table>.<column> <type> [not null] [identity] [default <expr>]`, sorted: column order is left out. */
  readonly columns: readonly string[];
  /** `<table> <name> <pg_get_constraintdef>`. */
  readonly constraints: readonly string[];
  /** `<pg_get_indexdef>`, which names the index and its table. */
  readonly indexes: readonly string[];
  /** `<pg_get_triggerdef>` and `<name>(<arguments>)` of functions: none today, drift later. */
  readonly triggers: readonly string[];
  readonly functions: readonly string[];
}

type Lines = { line: string }[];

/** The public schema of `sql`'s database, tables named in `exclude` (e.g. the ledger) left out. */
export async function describeSchema(sql: Sql, exclude: readonly string[] = []): Promise<SchemaDescription> {
  const ex = exclude as string[];
  const [relations, columns, constraints, indexes, triggers, functions] = await Promise.all([
    sql<Lines>`select relname || ' ' || relkind::text as line from pg_class
                where relnamespace = 'public'::regnamespace and relkind in ('r', 'p', 'v', 'm', 'S', 'f')
                  and relname <> all(${ex}::text[]) order by 1`,
    selectColumns(sql, ex),
    sql<Lines>`select conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) as line
                 from pg_constraint
                where connamespace = 'public'::regnamespace and conrelid::regclass::text <> all(${ex}::text[]) order by 1`,
    sql<Lines>`select indexdef as line from pg_indexes
                where schemaname = 'public' and tablename <> all(${ex}::text[]) order by indexname`,
    sql<Lines>`select pg_get_triggerdef(oid) as line from pg_trigger
                where not tgisinternal and tgrelid::regclass::text <> all(${ex}::text[]) order by 1`,
    sql<Lines>`select proname || '(' || pg_get_function_identity_arguments(oid) || ')' as line from pg_proc
                where pronamespace = 'public'::regnamespace order by 1`,
  ]);
  const lines = (rows: Lines) => rows.map((r) => r.line);
  return {
    relations: lines(relations),
    columns: lines(columns),
    constraints: lines(constraints),
    indexes: lines(indexes),
    triggers: lines(triggers),
    functions: lines(functions),
  };
}

function selectColumns(sql: Sql, exclude: string[]): Promise<Lines> {
  return sql<Lines>`
    select c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
           || case when a.attnotnull then ' not null' else '' end
           || case when a.attidentity <> '' then ' identity ' || a.attidentity::text else '' end
           || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') as line
      from pg_attribute a
      join pg_class c on c.oid = a.attrelid
      left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
     where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p', 'v', 'm', 'f')
       and a.attnum > 0 and not a.attisdropped and c.relname <> all(${exclude}::text[])
     order by 1`;
}
